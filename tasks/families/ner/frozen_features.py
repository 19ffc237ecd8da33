"""A frozen encoder's features, computed once per data set and kept on disk, and the
head of a feature-based model run on them.

The feature-based recipe (`python -m tasks.ner --feature_based`) trains a head on layers
of an encoder that never changes: running the encoder at every step of every epoch
recomputes the same numbers. `frozen_features` runs it once over a data set, keeps the
chosen layers' outputs at the real positions of each row (padding is left out, so the
file holds what the texts hold), and writes them to `CACHE_DIR/KEY.npy`; a later epoch,
evaluation, prediction or run with the same key reads them back. `head_and_features`
gives the model's head alone (BertTokenClassifier.feature_head_model) with them, and
`rows` the tf.data rows it reads.

The key is the SHA-256 of everything the stored numbers depend on:

  - FORMAT (raised whenever what a file holds changes);
  - the layer choice (`feature_layers`) and the encoder's BertConfig, every field;
  - the dtype policy the encoder computes in (bfloat16 features differ from float32);
  - every encoder weight: its path, shape, dtype and bytes, in order (another checkpoint
    gives another key, however it was loaded);
  - the encoder's inputs `token_ids`, `segment_ids`, `padding_mask`: shapes, dtypes and
    bytes. The data file's text, the vocabulary, lower casing and max_seq_length reach
    the encoder only through them, so a change of any of these changes the key.

Files are written under a temporary name and renamed when complete (bert_tf/base/files.py):
a run stopped half-way leaves no file that a later run would take for whole. Files of
other keys are left in place (delete CACHE_DIR to reclaim the space).

Features written beforehand (`--extracted_features`): `extracted_features` reads them
from bert_tf.extract_features' `--output_format=tfrecord` files instead of running the
encoder over the whole file (a corpus embedded once, on Beam or on another machine, and
trained on many times). A record is found by its word pieces: each sentence's pieces,
between [CLS] and [SEP], must be those of a record (extract_features over the sentences'
texts, one a line, with the run's vocabulary and casing, `--layers` covering the layer
choice, and `--doc_stride` for a sentence longer than the sequence). A window of a long
sentence reads its pieces' vectors from the record of the whole sentence (each piece
from the window where it had the most context). Before any is used, the encoder runs
on a few single-window sentences and must give the records' values (to 1e-4 of their
scale in float32): records of another checkpoint, or of another layer than they say,
are refused in one line instead of trained on.
"""

import contextlib
import hashlib
import json
import os
import re

import numpy as np

from bert_tf.base.input_names import INPUT_NAMES
from bert_tf.base.files import atomic_write

FORMAT = 1


def cache_key(frozen, inputs):
    """The hex SHA-256 of the module docstring's list for a FrozenLastLayers layer and
    `inputs` ({token_ids, segment_ids, padding_mask} int32 [N, S])."""
    from bert_tf.models.task_models import encoder_policy
    encoder = frozen.encoder
    digest = hashlib.sha256()
    head = {"format": FORMAT, "feature_layers": frozen.feature_layers,
            "bert_config": encoder.bert_config.to_dict(),
            "dtype_policy": encoder_policy(encoder).name}
    digest.update(json.dumps(head, sort_keys=True).encode())
    for variable in encoder.weights:
        value = np.ascontiguousarray(variable.numpy())
        digest.update(f"{variable.path} {value.shape} {value.dtype}".encode())
        digest.update(value.tobytes())
    for name in INPUT_NAMES:
        value = np.ascontiguousarray(inputs[name], np.int32)
        digest.update(f"{name} {value.shape}".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def row_lengths(padding_mask):
    """[N, S] 1/0 -> [N] real positions per row; ValueError unless each row's real
    positions come first (what the stored rows assume)."""
    mask = np.asarray(padding_mask) > 0
    lengths = mask.sum(axis=1)
    if not (mask == (np.arange(mask.shape[1]) < lengths[:, None])).all():
        raise ValueError("frozen features: padding_mask must be 1 on a prefix of each row")
    return lengths


def frozen_features(frozen, inputs, cache_dir=None, batch_size=32):
    """What `frozen` (a FrozenLastLayers layer: [B, S, D] or [B, S, n, H]) gives at the
    real positions of `inputs`, row after row -> float32 [T, D] or [T, n, H] with
    T = padding_mask.sum().

    cache_dir: read from `cache_dir/KEY.npy` when it holds them, else computed (one pass
    of the encoder, in batches of `batch_size` cut to their longest row) and written
    there; None: computed and not kept.
    """
    from tensorflow.io import gfile            # output_dir may be gs://...
    lengths = row_lengths(inputs["padding_mask"])
    path = None
    if cache_dir is not None:
        path = os.path.join(cache_dir, cache_key(frozen, inputs)[:32] + ".npy")
        if gfile.exists(path):
            with gfile.GFile(path, "rb") as f:
                values = np.load(f)
            if values.shape[0] == lengths.sum():
                print(f"frozen features: {len(lengths)} sequences read from {path}",
                      flush=True)
                return values
    values = _compute(frozen, inputs, batch_size)
    if path is not None:
        gfile.makedirs(cache_dir)
        with atomic_write(path, "wb") as f:
            np.save(f, values)
        print(f"frozen features: {len(lengths)} sequences written to {path}", flush=True)
    return values


# Sequences the encoder runs on to check that extracted features are its own.
CHECKED_SEQUENCES = 8


def extracted_features(frozen, inputs, pattern, source):
    """What `frozen_features` gives for `inputs` (NER's features: token ids, padding_mask,
    sentence_index, piece_start), read from the extract_features TFRecord files `pattern`
    names (comma-separated globs) as the module docstring says; ValueError in one line
    naming `source` (the data file) or the records file when they cannot give them."""
    from bert_tf.base.file_patterns import expand_file_patterns
    from bert_tf.base.feature_records import read_feature_records
    files = expand_file_patterns(pattern, flag="--extracted_features")
    lengths = row_lengths(inputs["padding_mask"])
    sentences = _sentence_pieces(inputs, lengths)
    wanted = {np.asarray(tokens, np.int32).tobytes(): None for tokens in sentences.values()}
    num_layers = frozen.encoder.bert_config.num_hidden_layers
    hidden = frozen.encoder.bert_config.hidden_size
    needed = [i - 1 for i in frozen.indexes]             # hidden[0] is the embeddings
    if min(needed) < 0:
        raise ValueError(f"--extracted_features: --feature_layers={frozen.feature_layers} "
                         f"reads the embeddings, which extract_features does not write")
    for path in files:
        _check_layout(path)
        for record in read_feature_records(path):
            key = record["token_ids"].tobytes()
            if key not in wanted or wanted[key] is not None:
                continue
            layers, values = record["layers"], record["values"]
            if values.shape[-1] != hidden or max(layers) >= num_layers:
                raise ValueError(
                    f"--extracted_features: {path} holds layers {_layer_list(layers)} of "
                    f"width {values.shape[-1]}; the encoder has {num_layers} layers of "
                    f"width {hidden}")
            missing = [i for i in needed if i not in layers]
            if missing:
                raise ValueError(
                    f"--extracted_features: {path} holds layers {_layer_list(layers)}; "
                    f"--feature_layers={frozen.feature_layers} reads layers "
                    f"{_layer_list(needed)} (extract_features --layers="
                    f"{','.join(str(i - num_layers) for i in needed)})")
            wanted[key] = values[:, [layers.index(i) for i in needed]]    # [n, k, H]
    absent = [s for s, tokens in sentences.items()
              if wanted[np.asarray(tokens, np.int32).tobytes()] is None]
    if absent:
        raise ValueError(
            f"--extracted_features: {len(absent)} of {len(sentences)} sentences of {source} "
            f"have no record of their word pieces in {pattern} (the first: sentence "
            f"{absent[0] + 1}); run bert_tf.extract_features --output_format=tfrecord over "
            f"the sentences' texts with this run's vocabulary and casing (and --doc_stride "
            f"for sentences longer than the sequence)")
    parts = []
    for row, length in enumerate(lengths):
        values = wanted[np.asarray(sentences[inputs["sentence_index"][row]],
                                   np.int32).tobytes()]
        start = inputs["piece_start"][row]
        read = np.concatenate([[0], np.arange(start + 1, start + length - 1),
                               [len(values) - 1]])
        parts.append(values[read])
    stacked = np.concatenate(parts).astype(np.float32)                   # [T, k, H]
    values = stacked if frozen.mixed else stacked.reshape(len(stacked), -1)
    _check_encoder(frozen, inputs, lengths, values, pattern)
    print(f"frozen features: {len(lengths)} sequences of {source} read from {pattern}",
          flush=True)
    return values


def _sentence_pieces(inputs, lengths):
    """{sentence index: its token ids [CLS] pieces [SEP]}, put back together from the
    rows (windows) of each sentence."""
    pieces, ends = {}, {}
    for row, length in enumerate(lengths):
        s, start = int(inputs["sentence_index"][row]), int(inputs["piece_start"][row])
        tokens = inputs["token_ids"][row, :length]
        known = pieces.setdefault(s, {})
        for k, token in enumerate(tokens[1:-1]):
            known[start + k] = int(token)
        ends[s] = (int(tokens[0]), int(tokens[-1]))
    return {s: [ends[s][0]] + [known[k] for k in range(len(known))] + [ends[s][1]]
            for s, known in pieces.items()}


def _check_layout(path):
    """ValueError unless `path` starts like a TFRecord file (JSON lines are named)."""
    with open(path, "rb") as f:
        head = f.read(16)
    if re.match(rb"\s*\{", head):
        raise ValueError(f"--extracted_features: {path} is extract_features' JSON layout; "
                         f"write the features with --output_format=tfrecord")


def _layer_list(layers):
    return ",".join(str(i) for i in sorted(layers))


def _check_encoder(frozen, inputs, lengths, values, pattern):
    """ValueError unless the encoder gives `values` (extracted) on up to CHECKED_SEQUENCES
    rows that are whole sentences (one window each: their records hold what the encoder
    computes on exactly those inputs)."""
    from bert_tf.models.task_models import encoder_policy
    counts = np.bincount(inputs["sentence_index"])
    rows = [r for r in range(len(lengths))
            if counts[inputs["sentence_index"][r]] == 1][:CHECKED_SEQUENCES]
    if not rows:
        return
    starts = np.concatenate([[0], np.cumsum(lengths)])
    sample = {name: np.asarray(inputs[name])[rows] for name in INPUT_NAMES}
    computed = _compute(frozen, sample, CHECKED_SEQUENCES, quiet=True)
    given = np.concatenate([values[starts[r]:starts[r + 1]] for r in rows])
    scale = float(np.abs(computed).max())
    tolerance = 1e-4 if encoder_policy(frozen.encoder).compute_dtype == "float32" else 3e-2
    worst = float(np.abs(computed - given).max())
    if worst > tolerance * scale:
        raise ValueError(
            f"--extracted_features: the records in {pattern} are not this encoder's "
            f"features (they differ from what it computes by up to {worst:.3g}, at a scale "
            f"of {scale:.3g}): extract them with the run's --init_checkpoint")


def _compute(frozen, inputs, batch_size, quiet=False):
    import tensorflow as tf

    from bert_tf.text import batching
    from bert_tf.base.progress import progress_bar
    spec = {name: tf.TensorSpec([None, None], tf.int32) for name in INPUT_NAMES}
    run = tf.function(lambda x: frozen(x), input_signature=[spec], autograph=False)
    dataset = batching.finish(tf.data.Dataset.from_tensor_slices(
        {name: np.asarray(inputs[name], np.int32) for name in INPUT_NAMES})
        .batch(batch_size).map(batching.trim_to_longest))
    parts = []
    with (contextlib.nullcontext() if quiet else
          progress_bar(len(inputs["padding_mask"]), "frozen features", unit="seq")) as bar:
        for batch in dataset:
            out = np.asarray(run(batch)).astype(np.float32)        # [b, w, ...]
            parts.append(out[batch["padding_mask"].numpy() > 0])   # [real positions, ...]
            if bar is not None:
                bar.update(len(out))
    return np.concatenate(parts)


def head_and_features(model, features, cache_dir, batch_size=32, extracted=None,
                      source=None):
    """(the head of a feature-based BertTokenClassifier, `features` with "frozen": its
    frozen layers' outputs, `frozen_features`, or `extracted_features` from the files
    `extracted` names, for the data file `source`) for `ner.make_dataset`."""
    layer = model.get_layer("frozen_layers")
    if extracted:
        frozen = extracted_features(layer, features, extracted, source)
    else:
        frozen = frozen_features(layer, features, cache_dir, batch_size)
    return model.feature_head_model(), dict(features, frozen=frozen)


def rows(features, with_labels=True, shuffle_seed=None):
    """tf.data of one element per row: ({"features": [S, ...] zero-padded, "padding_mask"
    [S]}, {"logits": label_ids [S]}), from `features` with "frozen" [T, ...].

    shuffle_seed: shuffled as `Dataset.shuffle(N, seed, reshuffle_each_iteration=True)`
    shuffles the token ids' rows. A shuffle's order depends on its seed and the number of
    elements only, so both give the same order; here the shuffle holds row indexes, and
    each row's features are padded after it, not N padded rows at once."""
    import tensorflow as tf
    n, seq = features["token_ids"].shape
    lengths = row_lengths(features["padding_mask"])
    starts = tf.constant(np.concatenate([[0], np.cumsum(lengths)[:-1]]), tf.int64)
    lengths = tf.constant(lengths, tf.int64)
    values = tf.constant(features["frozen"])                              # [T, ...]
    mask, labels = tf.constant(features["padding_mask"]), tf.constant(features["label_ids"])

    def row(i):
        real = values[starts[i]:starts[i] + lengths[i]]                   # [length, ...]
        padding = [[0, seq - lengths[i]]] + [[0, 0]] * (len(values.shape) - 1)
        x = {"features": tf.ensure_shape(tf.pad(real, padding), [seq] + values.shape[1:]),
             "padding_mask": mask[i]}
        return (x, {"logits": labels[i]}) if with_labels else x

    dataset = tf.data.Dataset.range(n)
    if shuffle_seed is not None:
        dataset = dataset.shuffle(n, seed=shuffle_seed, reshuffle_each_iteration=True)
    return dataset.map(row)
