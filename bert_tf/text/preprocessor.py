"""Raw text -> BERT's three inputs, in TensorFlow ops only: the one preprocessing step
that fine-tuning's tf.data pipelines (tasks/) and every exported signature (export/) run,
so a served model sees exactly the inputs it was trained on.

    preprocessor = BertPreprocessor(tokenizer, seq_length=128)
    inputs = preprocessor(text_a)                  # tf.string [batch]
    inputs = preprocessor(text_a, text_b)          # sentence pairs
    # {token_ids, segment_ids, padding_mask}: int32 [batch, seq_length]
    inputs = preprocessor.choices(first, second)   # [batch], [batch, C] -> [batch, C, seq]

It is the tokenizer (google's FullTokenizer ids, bert_tf/text/tokenization.py) followed by the
packer (google's fine-tuning truncation, bert_tf/text/packing.py). A tf.Module, so a
SavedModel holding it tracks the tokenizer and its vocab asset.
"""

import tensorflow as tf

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
