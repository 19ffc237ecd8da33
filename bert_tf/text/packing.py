"""Packing token ids into BERT's inputs: [CLS] A [SEP] (B [SEP]), truncated and padded.

Two truncation rules, as in google-research/bert:

* fine-tuning (`run_classifier._truncate_seq_pair`): while the pair is too long, drop the
  last token of the longer segment; on a tie, of segment B. That equals a round-robin
  allocation of the budget starting with A (A gets ceil(budget/2) when both are long), which
  is what tf-text's `RoundRobinTrimmer` computes; tests/text/test_packing.py checks the two
  against each other on thousands of random lengths. `BertPacker` does this in the graph,
  from the closed-form lengths of `pair_lengths`.
* pretraining (`create_pretraining_data.truncate_seq_pair`): while too long, drop one token
  from the longer segment (B on a tie), from its front or its back with probability 1/2
  each. `truncate_seq_pair_random` does this on Python lists with an explicit
  `random.Random`, drawing exactly as google's does, so a seeded run makes the same cuts.

The layout itself, column by column, is `bert_tf.text.text_rules.pair_layout`, which
bert_tf/data/masking.py's NumPy packer of pretraining's instances follows too (the data
command does not import TensorFlow).

The three outputs are named as everywhere in the project (`bert_tf.base.input_names`):
`token_ids`, `segment_ids`, `padding_mask` (int32, 1 for real tokens).

`BertPacker` packs in the graph (fine-tuning's tf.data pipelines, every export) and,
through `pack_rows` / `pack_row`, the rows built in Python (extract_features', the
quickstart's): the one packer of the project.
"""

import numpy as np
import tensorflow as tf

from bert_tf.base.input_names import PADDING_MASK, SEGMENT_IDS, TOKEN_IDS
from bert_tf.text.text_rules import pair_layout


def truncate_seq_pair(tokens_a, tokens_b, max_length):
    """Fine-tuning rule, in place on lists: pop from the end of the longer list (B on a tie)
    until len(tokens_a) + len(tokens_b) <= max_length."""
    while len(tokens_a) + len(tokens_b) > max_length:
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def truncate_seq_pair_random(tokens_a, tokens_b, max_num_tokens, rng):
    """Pretraining rule, in place on lists: until the pair fits in max_num_tokens, take the
    longer list (B on a tie) and delete its first element if rng.random() < 0.5, else its
    last. One rng.random() call per deleted token, as in google's create_pretraining_data,
    so the same seed gives the same cuts. Removing from both ends spreads the cut context
    over the start and the end of documents instead of always losing the end."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if not longer:
            raise ValueError(f"cannot fit a pair into max_num_tokens={max_num_tokens}")
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


class BertPacker(tf.Module):
    """RaggedTensor token ids -> dense BERT inputs, in the graph.

        packer = BertPacker(seq_length=128, cls_id=101, sep_id=102, pad_id=0)
        features = packer(ids_a)           # [CLS] A [SEP]
        features = packer(ids_a, ids_b)    # [CLS] A [SEP] B [SEP]
        features["token_ids"], features["segment_ids"], features["padding_mask"]

    Inputs are int RaggedTensors [batch, (tokens)] (e.g. BertTokenizer output); outputs are
    int32 Tensors [batch, seq_length]. Truncation is the fine-tuning rule of the module
    docstring. As in google's run_classifier, a pair whose B has no tokens at all is packed
    as a single segment ([CLS] A [SEP], A cut at seq_length - 2, no second [SEP]); with
    seq_length 3 or 4 truncation can empty B, which then also gets no second [SEP].
    Works eagerly, in tf.data maps, in tf.function and in SavedModels (no state besides the
    four integers).

    Args:
        seq_length: the packed length (>= 3).
        cls_id, sep_id, pad_id: the special tokens' ids (`from_tokenizer` reads them).

    Example:
        >>> import tensorflow as tf
        >>> from bert_tf import BertPacker
        >>> packer = BertPacker(seq_length=8, cls_id=101, sep_id=102)
        >>> out = packer(tf.ragged.constant([[7, 8]]), tf.ragged.constant([[9]]))
        >>> out["token_ids"].numpy().tolist(), out["segment_ids"].numpy().tolist()
        ([[101, 7, 8, 102, 9, 102, 0, 0]], [[0, 0, 0, 0, 1, 1, 0, 0]])
    """

    def __init__(self, seq_length, cls_id, sep_id, pad_id=0, name=None):
        super().__init__(name=name)
        if seq_length < 3:
            raise ValueError(f"seq_length must be >= 3 (room for [CLS], [SEP] and a token); "
                             f"got {seq_length}")
        self.seq_length = int(seq_length)
        self.cls_id, self.sep_id, self.pad_id = int(cls_id), int(sep_id), int(pad_id)

    @classmethod
    def from_tokenizer(cls, tokenizer, seq_length):
        """Special ids taken from a `bert_tf.text.tokenization.BertTokenizer`."""
        return cls(seq_length, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)

    def get_config(self):
        return {"seq_length": self.seq_length, "cls_id": self.cls_id,
                "sep_id": self.sep_id, "pad_id": self.pad_id}

    def __call__(self, segment_a, segment_b=None, seq_length=None):
        """segment_a, segment_b: int RaggedTensors [batch, (tokens)] -> dict of three int32
        Tensors [batch, seq_length]: token_ids, segment_ids, padding_mask. `seq_length`
        (a Python int or a scalar int Tensor, >= 3) packs to another length than the
        packer's own, as TF Hub's `bert_pack_inputs(..., seq_length=)` does."""
        if seq_length is None:
            seq_length = self.seq_length
        elif isinstance(seq_length, int):
            if seq_length < 3:
                raise ValueError(f"seq_length must be >= 3, got {seq_length}")
        else:
            seq_length = tf.cast(seq_length, tf.int64)
            with tf.control_dependencies([tf.debugging.assert_greater_equal(
                    seq_length, tf.constant(3, tf.int64), message="seq_length must be >= 3")]):
                seq_length = tf.identity(seq_length)
        return self._pack(segment_a, segment_b, seq_length)

    def _pack(self, segment_a, segment_b, seq_length):
        a = _as_ragged_int32(segment_a, "segment_a")
        len_a = a.row_lengths()                                          # [batch] int64
        if segment_b is None:
            b = None
            keep_a = tf.minimum(len_a, seq_length - 2)
            keep_b = tf.zeros_like(len_a)
        else:
            b = _as_ragged_int32(segment_b, "segment_b")
            len_b = b.row_lengths()
            pair_a, pair_b = pair_lengths(len_a, len_b, seq_length - 3)
            # google tests `if tokens_b:` before truncating: a B without tokens means a
            # single segment, cut at seq_length - 2.
            has_b = len_b > 0
            keep_a = tf.where(has_b, pair_a, tf.minimum(len_a, seq_length - 2))
            keep_b = tf.where(has_b, pair_b, tf.zeros_like(len_b))
        # ... and again after: a B truncated away (only possible for seq_length <= 4) gets no
        # second [SEP] (pair_layout: a B of no tokens is no segment).
        col = tf.range(seq_length, dtype=tf.int64)[None, :]           # [1, L]
        ka, kb = keep_a[:, None], keep_b[:, None]                          # [batch, 1]
        layout = pair_layout(col, ka, kb)
        last = seq_length - 1
        dense_a = _to_width(a, seq_length, self.pad_id)
        index_a = tf.broadcast_to(tf.clip_by_value(col - 1, 0, last), tf.shape(dense_a, tf.int64))
        tokens = tf.where(layout.in_a, tf.gather(dense_a, index_a, batch_dims=1), self.pad_id)
        if b is not None:
            dense_b = _to_width(b, seq_length, self.pad_id)
            index_b = tf.clip_by_value(col - ka - 2, 0, last)              # [batch, L]
            tokens = tf.where(layout.in_b, tf.gather(dense_b, index_b, batch_dims=1), tokens)
        tokens = tf.where(layout.is_sep, self.sep_id, tokens)
        tokens = tf.where(col == 0, self.cls_id, tokens)
        return {TOKEN_IDS: tokens,
                SEGMENT_IDS: tf.cast(layout.second_segment, tf.int32),
                PADDING_MASK: tf.cast(layout.real, tf.int32)}


def pack_rows(ids_a, ids_b=None, seq_length=None, cls_id=None, sep_id=None, pad_id=0,
              chunk=4096):
    """Rows of ids that fit, packed eagerly by `BertPacker`, `chunk` rows a call (memory
    stays the outputs' own), for the rows built in Python: extract_features' and the
    quickstart's. ids_a (and ids_b), lists of id
    sequences -> {token_ids, segment_ids, padding_mask}: numpy int32 [rows, seq_length]
    (None: the longest row). ValueError when a row is longer than seq_length (the packer
    would cut it)."""
    flat = lambda rows: np.concatenate([np.asarray(r, np.int64).reshape(-1) for r in rows]
                                       + [np.zeros([0], np.int64)])
    ragged = lambda rows: tf.RaggedTensor.from_row_lengths(
        flat(rows), np.asarray([len(r) for r in rows], np.int64), validate=False)
    lengths = np.asarray([len(a) for a in ids_a], np.int64) + 2
    if ids_b is not None:
        lengths += np.asarray([len(b) + 1 if len(b) else 0 for b in ids_b], np.int64)
    longest = int(lengths.max()) if len(lengths) else 2
    target = longest if seq_length is None else int(seq_length)
    if longest > target:
        raise ValueError(f"pack_row: {longest} ids with [CLS] and [SEP] do not fit in "
                         f"{target}")
    packer = BertPacker(max(target, 3), cls_id, sep_id, pad_id)
    out = {name: np.zeros([len(ids_a), target], np.int32)
           for name in (TOKEN_IDS, SEGMENT_IDS, PADDING_MASK)}
    for lo in range(0, len(ids_a), chunk):
        packed = packer(ragged(ids_a[lo:lo + chunk]),
                        None if ids_b is None else ragged(ids_b[lo:lo + chunk]))
        for name, value in packed.items():
            out[name][lo:lo + chunk] = value.numpy()[:, :target]
    return out


def pack_row(ids_a, ids_b=None, seq_length=None, cls_id=None, sep_id=None, pad_id=0):
    """One row, `pack_rows`' (BertPacker's layout): [CLS] A [SEP] (B [SEP]; a B of no ids
    is no segment, as google's) -> {token_ids, segment_ids, padding_mask}: int32
    [seq_length] (None: as long as the row). A and B's positions are 1 and len(A) + 2.
    ValueError when the row is longer than seq_length."""
    packed = pack_rows([ids_a], None if ids_b is None else [ids_b], seq_length, cls_id,
                       sep_id, pad_id)
    n = int(packed[PADDING_MASK].sum())
    width = n if seq_length is None else int(seq_length)
    return {k: v[0, :width] for k, v in packed.items()}


def pair_lengths(len_a, len_b, budget):
    """Lengths [batch] that run_classifier's _truncate_seq_pair keeps within a budget.

    Popping from the longer (B on ties) until the pair fits leaves, when it does not fit,
    A = min(len_a, max(ceil(budget / 2), budget - len_b)) and B = budget - A: the shorter
    keeps everything if it fits in its half, and A gets the odd token. That is tf-text's
    RoundRobinTrimmer allocation (the tests check both against the loop); it is computed
    here directly because the trimmer + combine_segments + pad_model_inputs chain builds
    ~1,500 graph ops per call (2 s to trace, and per-batch overhead) for ~40 here.
    """
    budget = tf.cast(budget, len_a.dtype)
    fits = len_a + len_b <= budget
    keep_a = tf.minimum(len_a, tf.maximum((budget + 1) // 2, budget - len_b))
    keep_a = tf.where(fits, len_a, keep_a)
    keep_b = tf.where(fits, len_b, budget - keep_a)
    return keep_a, keep_b


def _to_width(ragged, width, pad_id):
    """[batch, (n)] -> [batch, width]: cut or padded with pad_id. `width` an int or a
    scalar Tensor."""
    if isinstance(width, int):
        return ragged.to_tensor(default_value=pad_id, shape=[None, width])
    dense = ragged.to_tensor(default_value=pad_id)[:, :width]
    missing = tf.cast(width, tf.int32) - tf.shape(dense)[1]
    return tf.pad(dense, [[0, 0], [0, missing]], constant_values=pad_id)


def _as_ragged_int32(ids, name):
    if isinstance(ids, tf.RaggedTensor):
        if ids.shape.rank != 2:
            raise ValueError(f"{name} must be a RaggedTensor [batch, (tokens)]; got rank "
                             f"{ids.shape.rank}")
        if not ids.dtype.is_integer:
            raise ValueError(f"{name} must hold integer token ids; got {ids.dtype.name}")
        return tf.cast(ids, tf.int32)
    ids = tf.convert_to_tensor(ids)
    if ids.shape.rank != 2 or not ids.dtype.is_integer:
        raise ValueError(f"{name} must be integer token ids [batch, (tokens)]; got "
                         f"{ids.dtype.name} of shape {ids.shape}")
    return tf.RaggedTensor.from_tensor(tf.cast(ids, tf.int32))
