"""The shards' records: a batch of masked examples -> tf.train.Examples with google's
feature names (bert_tf/base/shard_schema.py), encoded by the TF-free TFRecord codec
(bert_tf/base/tfrecord.py), byte-identical to TensorFlow's writers. NumPy only, no TensorFlow
(bert_tf/text/python_tokenizer.py says why that matters).
"""

from bert_tf.base import shard_schema, tfrecord


def encode_unframed(features):
    """{google's feature name: array [N, n]} -> the batch's records without their CRCs,
    for tfrecord.frame_records (which frames many batches at once)."""
    kinds = shard_schema.KINDS
    if shard_schema.WORD_CONTINUES.name in features:
        kinds = {**kinds, shard_schema.WORD_CONTINUES.name: shard_schema.WORD_CONTINUES.kind}
    return tfrecord.encode_unframed(features, kinds)


def encode_records(features):
    """{google's feature name: array [N, n]} (ints, floats for masked_lm_weights) -> bytes:
    N TFRecords as tf.io.TFRecordWriter would write them."""
    return tfrecord.encode_records(features, shard_schema.KINDS)
