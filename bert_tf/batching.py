"""Batches that cost what their texts cost: padding cut to the batch's longest sequence.

Examples are packed to max_seq_length (as google-research/bert writes them); a batch of
short texts then spends most of its work on padding. HF's Trainer pads each batch to its
longest (`DataCollatorWithPadding`) and can group similar lengths (`group_by_length`).
Here the same, on tf.data:

    off       every batch padded to max_seq_length (google-research/bert's behaviour)
    longest   batches in the given order, each cut to its longest sequence, rounded up to
              a multiple of 8 (`trim_to_longest`)
    bucket    examples of similar length batched together (tf.data
              `bucket_by_sequence_length`, buckets every 8 tokens), then cut as `longest`;
              examples enter the buckets in their (shuffled) order, so every epoch still
              mixes lengths and orders randomly. For training only: it reorders examples.

Widths are multiples of 8 up to max_seq_length, so an XLA-compiled step compiles at most
max_seq_length / 8 programs (16 at 128).

Real tokens attend only to real tokens, so cutting padding leaves what the model computes
for them unchanged; a tensor is cut when it has the shape of `padding_mask` (inputs and
per-token labels such as NER tags).
"""

import tensorflow as tf

MODES = ("bucket", "longest", "off")
MULTIPLE = 8


def trim_to_longest(features, multiple=MULTIPLE):
    """Packed features [..., seq] -> [..., width]: width is the last real position of any
    sequence (padding_mask > 0), rounded up to `multiple`, at most seq (and `multiple` for
    an empty batch)."""
    mask = features["padding_mask"]
    seq = tf.shape(mask)[-1]
    last = tf.reduce_max(tf.where(mask > 0, tf.range(1, seq + 1), 0))     # 0 if empty
    width = tf.minimum(seq, tf.maximum(multiple, (last + multiple - 1) // multiple * multiple))
    return {name: value[..., :width] for name, value in features.items()}


def trim_batch(element, multiple=MULTIPLE):
    """trim_to_longest on a dataset element (inputs, labels...[, weights]): every tensor
    shaped like inputs["padding_mask"] is cut to the same width."""
    inputs, *rest = element if isinstance(element, tuple) else (element,)
    mask = inputs["padding_mask"]
    width = tf.shape(trim_to_longest({"padding_mask": mask}, multiple)["padding_mask"])[-1]

    def cut(x):
        if x.shape.rank == mask.shape.rank and x.shape[-1] == mask.shape[-1]:
            return x[..., :width]
        return x
    out = tf.nest.map_structure(cut, (inputs, *rest))
    return out if isinstance(element, tuple) else out[0]


def sequence_length(element):
    """Real tokens of one (unbatched) example: the longest of its sequences (SWAG: the
    longest of its choices)."""
    inputs = element[0] if isinstance(element, tuple) else element
    mask = tf.reshape(inputs["padding_mask"], [-1, tf.shape(inputs["padding_mask"])[-1]])
    return tf.reduce_max(tf.reduce_sum(tf.cast(mask, tf.int32), -1))


def batch(dataset, batch_size, mode, max_seq_length, drop_remainder=False,
          multiple=MULTIPLE):
    """Batches an unbatched dataset of (inputs, ...) examples packed to max_seq_length,
    by `mode` (see the module docstring)."""
    if mode not in MODES:
        raise ValueError(f"length batching must be one of {MODES}, got {mode!r}")
    if mode == "bucket":
        boundaries = list(range(multiple + 1, max_seq_length + 1, multiple))
        dataset = dataset.bucket_by_sequence_length(
            lambda *element: sequence_length(element if len(element) > 1 else element[0]),
            bucket_boundaries=boundaries,
            bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
            drop_remainder=drop_remainder)
    else:
        dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    if mode == "off":
        return dataset
    return dataset.map(lambda *element: trim_batch(element if len(element) > 1
                                                   else element[0], multiple),
                       num_parallel_calls=tf.data.AUTOTUNE)


def rebatch(dataset, batch_size, mode, max_seq_length, drop_remainder=False,
            multiple=MULTIPLE):
    """`batch` for a dataset whose elements are already batches packed to max_seq_length
    (pipelines that tokenize a whole batch of strings at once): off leaves it, longest
    cuts each batch, bucket regroups the examples by length first."""
    if mode == "off":
        return dataset
    if mode == "longest":
        return dataset.map(lambda *element: trim_batch(element if len(element) > 1
                                                       else element[0], multiple),
                           num_parallel_calls=tf.data.AUTOTUNE)
    return batch(dataset.unbatch(), batch_size, mode, max_seq_length, drop_remainder,
                 multiple)
