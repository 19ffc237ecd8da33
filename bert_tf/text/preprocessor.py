"""Raw text -> BERT's three inputs, in TensorFlow ops only: the one preprocessing step
that fine-tuning's tf.data pipelines (tasks/) and every exported signature (export/) run,
so a served model sees exactly the inputs it was trained on.

    preprocessor = BertPreprocessor(tokenizer, seq_length=128)
    inputs = preprocessor(text_a)                  # tf.string [batch]
    inputs = preprocessor(text_a, text_b)          # sentence pairs
    # {token_ids, segment_ids, padding_mask}: int32 [batch, seq_length]
    inputs = preprocessor.choices(first, second)   # [batch], [batch, C] -> [batch, C, seq]
    inputs, splits = preprocessor.windows(text, max_windows=0, stride=63)
                                                   # [windows, seq], text i's: splits[i:i+2]
    inputs = preprocessor.windowed(text, max_windows=4, stride=63)   # [batch, windows, seq]

A text longer than seq_length - 2 pieces is cut there by `__call__`; `windows` reads it
instead in overlapping windows of seq_length - 2 pieces, `stride` pieces apart
(bert_tf/text/windows.py's op, over units of one piece, as SQuAD's), each packed as a
text of its own.

It is the tokenizer (google's FullTokenizer ids, bert_tf/text/tokenization.py) followed by the
packer (google's fine-tuning truncation, bert_tf/text/packing.py). A tf.Module, so a
SavedModel holding it tracks the tokenizer and its vocab asset.
"""

import tensorflow as tf

from bert_tf.text import windows
from bert_tf.text.packing import BertPacker


class BertPreprocessor(tf.Module):
    """tokenizer + packer: raw strings -> {token_ids, segment_ids, padding_mask}.

    Its methods are left alone by AutoGraph (their control flow is tf.cond already), so a
    tf.data map or tf.function that calls them does not convert the packer's code each
    time it is traced."""

    def __init__(self, tokenizer, seq_length, name=None):
        super().__init__(name=name)
        self.tokenizer = tokenizer
        self.packer = BertPacker.from_tokenizer(tokenizer, seq_length)

    @property
    def seq_length(self):
        return self.packer.seq_length

    @tf.autograph.experimental.do_not_convert
    def __call__(self, text_a, text_b=None):
        return self.pack(text_a, text_b)

    @tf.autograph.experimental.do_not_convert
    def pack(self, text_a, text_b=None):
        """Single texts [batch] or pairs -> int32 [batch, seq_length] each. (A subclass
        may give __call__ other inputs, as SWAG's, and still pack through this.)"""
        segment_b = None if text_b is None else self.tokenizer(text_b)
        return self.packer(self.tokenizer(text_a), segment_b)

    @tf.autograph.experimental.do_not_convert
    def choices(self, first, second):
        """Multiple choice: choice i of row r packed as [CLS] first[r] [SEP] second[r, i]
        [SEP]. first: [batch]; second: [batch, C] -> int32 [batch, C, seq_length]."""
        c = second.shape[1] or tf.shape(second)[1]      # static where it is known
        packed = self.pack(tf.repeat(first, c), tf.reshape(second, [-1]))  # [batch * C, seq]
        return {k: tf.reshape(v, [-1, c, self.seq_length]) for k, v in packed.items()}

    @tf.autograph.experimental.do_not_convert
    def windows(self, text, max_windows=0, stride=None):
        """Single texts [batch] -> (features int32 [windows, seq_length], row_splits int64
        [batch + 1]): text i's windows are rows splits[i]:splits[i + 1]. Its pieces are
        read in windows of seq_length - 2 pieces, the k-th starting k * stride pieces in
        (stride None or more than a window: consecutive parts), until one reaches the
        last piece or max_windows are made (0: no limit; 1 is `__call__`'s cut). A text
        of no pieces is one window, [CLS] [SEP]."""
        room = self.seq_length - 2
        stride = room if stride is None else min(int(stride), room)
        if stride < 1 or max_windows < 0:
            raise ValueError(f"windows: stride must be >= 1 and max_windows >= 0, got "
                             f"{stride} and {max_windows}")
        pieces = self.tokenizer(text).with_row_splits_dtype(tf.int64)   # [batch, (n)]
        row, first, end = windows.windows(pieces.row_splits[:-1], pieces.row_splits[1:],
                                          room, stride, max_windows=max_windows,
                                          empty_window=True)
        window_pieces = tf.gather(pieces.flat_values, tf.ragged.range(first, end))
        counts = tf.math.unsorted_segment_sum(tf.ones_like(row), row, pieces.nrows())
        return self.packer(window_pieces), tf.concat([[0], tf.cumsum(counts)], 0)

    @tf.autograph.experimental.do_not_convert
    def windowed(self, text, max_windows=0, stride=None):
        """`windows` as int32 [batch, windows, seq_length]: each text's windows, then
        rows of padding (padding_mask 0 throughout) up to the batch's most windows."""
        features, splits = self.windows(text, max_windows, stride)
        return {k: tf.RaggedTensor.from_row_splits(v, splits, validate=False).to_tensor()
                for k, v in features.items()}
