"""Pretraining input pipeline: TFRecord shards -> batches with the project's names.

The shards use google-research/bert's feature names and dtypes, so shards written by
google's `create_pretraining_data.py` and by ours read the same way:

    input_ids, input_mask, segment_ids        int64 [max_seq_length]
    masked_lm_positions, masked_lm_ids        int64 [max_predictions_per_seq]
    masked_lm_weights                         float [max_predictions_per_seq]
    next_sentence_labels                      int64 [1]   (0 = B is next, 1 = random)

Batches are dicts with the encoder's input names (`token_ids`, `segment_ids`,
`padding_mask`) plus the masked-LM and next-sentence fields, all int32 except the weights.
"""

import tensorflow as tf


def feature_spec(max_seq_length, max_predictions_per_seq):
    """google's feature names, shapes and dtypes of one pretraining example."""
    seq = [max_seq_length]
    pred = [max_predictions_per_seq]
    return {
        "input_ids": tf.io.FixedLenFeature(seq, tf.int64),
        "input_mask": tf.io.FixedLenFeature(seq, tf.int64),
        "segment_ids": tf.io.FixedLenFeature(seq, tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature(pred, tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature(pred, tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature(pred, tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }


def expand_file_patterns(patterns):
    """Comma-separated globs (or a list of them) -> sorted file list; an error names a
    pattern that matches nothing."""
    if isinstance(patterns, str):
        patterns = [p for p in patterns.split(",") if p]
    files = []
    for pattern in patterns:
        matched = tf.io.gfile.glob(pattern)
        if not matched:
            raise FileNotFoundError(f"--input_file: no file matches {pattern!r}")
        files.extend(matched)
    files = sorted(set(files))
    for file in files:
        # A repeated stream of nothing would wait forever for its first batch.
        if tf.io.gfile.isdir(file):
            raise ValueError(f"--input_file: {file} is a directory (give a glob of its "
                             f"shards, e.g. {file.rstrip('/')}/*.tfrecord)")
        if tf.io.gfile.stat(file).length == 0:
            raise ValueError(f"--input_file: {file} is empty (0 bytes, no records); "
                             f"remove it or write the shards again")
    return files


def parse_batch(serialized, max_seq_length, max_predictions_per_seq):
    """[batch] serialized tf.Examples -> dict of int32/float32 tensors with our names.

    int64 -> int32: TPUs and most kernels want int32, and ids fit."""
    ex = tf.io.parse_example(serialized, feature_spec(max_seq_length,
                                                      max_predictions_per_seq))
    i32 = lambda t: tf.cast(t, tf.int32)  # noqa: E731
    return {
        "token_ids": i32(ex["input_ids"]),
        "segment_ids": i32(ex["segment_ids"]),
        "padding_mask": i32(ex["input_mask"]),
        "masked_lm_positions": i32(ex["masked_lm_positions"]),
        "masked_lm_ids": i32(ex["masked_lm_ids"]),
        "masked_lm_weights": ex["masked_lm_weights"],
        "next_sentence_labels": i32(ex["next_sentence_labels"][:, 0]),
    }


def pretraining_dataset(input_files, batch_size, max_seq_length, max_predictions_per_seq,
                        is_training=True, input_context=None, seed=12345,
                        shuffle_buffer=10000, cycle_length=8):
    """Batches of pretraining examples.

    Training: files are sharded per input pipeline (one per worker under
    MultiWorkerMirroredStrategy), repeated, shuffled at file and record level with fixed
    seeds, interleaved deterministically; so the stream is a pure function of the seed
    and its position can be checkpointed and restored exactly.
    Eval: files in order, one pass, the last partial batch kept.

    `batch_size` is the batch of this input pipeline (per worker). Parsing happens after
    batching (vectorized `parse_example`).
    """
    files = expand_file_patterns(input_files)
    ds = tf.data.Dataset.from_tensor_slices(files)
    if is_training:
        if input_context and input_context.num_input_pipelines > 1:
            if len(files) < input_context.num_input_pipelines:
                raise ValueError(
                    f"--input_file: {len(files)} file(s) for "
                    f"{input_context.num_input_pipelines} workers; write at least one "
                    f"shard per worker")
            ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
            files = files[input_context.input_pipeline_id::input_context.num_input_pipelines]
        # Shuffle, then repeat: every epoch is a fresh permutation of the files (a shuffle
        # buffer over the repeated stream could open the same file twice at once).
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()
        # No more open files than this worker has: the repeated stream would otherwise
        # open one file twice and read each record twice in a row.
        ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=min(cycle_length, len(files)),
                           num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        ds = ds.shuffle(shuffle_buffer, seed=seed + 1)
        ds = ds.batch(batch_size, drop_remainder=True)
    else:
        ds = tf.data.TFRecordDataset(ds)
        ds = ds.batch(batch_size, drop_remainder=False)
    ds = ds.map(lambda s: parse_batch(s, max_seq_length, max_predictions_per_seq),
                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)
