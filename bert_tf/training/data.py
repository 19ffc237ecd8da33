"""Pretraining input pipeline: TFRecord shards -> batches with the project's names.

The shards use google-research/bert's feature names and dtypes (bert_tf/base/shard_schema.py),
so shards written by google's `create_pretraining_data.py` and by ours read the same way.
Batches are dicts with the encoder's input names (`token_ids`, `segment_ids`,
`padding_mask`) plus the masked-LM and next-sentence fields, all int32 except the weights.

Damaged shards: `check_shards` runs before training. By default it reads each shard's
first record (framing, both checksums, its features' lengths against the flags) and its
last bytes (is the last record whole), and stops with one line naming the file and byte
offset. A record whose data fails its checksum in the middle of a shard is met only by
tf.data, whose DataLossError names neither file nor record: `data_loss_error` finds them
afterwards. With --skip_corrupt_records every record's checksum is checked first and the
damaged ones are left out of the input (`DamagedShard`), counted exactly.
"""

import dataclasses
import re

import numpy as np
import tensorflow as tf

from bert_tf.base import file_patterns, shard_schema
from bert_tf.training import shard_checks
from bert_tf.base.tfrecord import parse_example

# tf.io.gfile's calls: the shards may lie on gs://, s3://, hdfs://.
GFILE = file_patterns.FileSystem(tf.io.gfile.glob, tf.io.gfile.exists, tf.io.gfile.isdir,
                                 lambda path: tf.io.gfile.stat(path).length)

SKIP_ADVICE = ("rerun with --skip_corrupt_records to skip damaged records, or write the "
               "shard again")


def feature_spec(max_seq_length, max_predictions_per_seq, word_marks=False):
    """google's feature names, shapes and dtypes of one pretraining example, as
    tf.io.parse_example reads them (from bert_tf/base/shard_schema.py); `word_marks`: also
    the shards' shard_schema.WORD_CONTINUES."""
    lengths = shard_schema.lengths(max_seq_length, max_predictions_per_seq)
    spec = {f.name: tf.io.FixedLenFeature([lengths[f.name]], tf.as_dtype(f.dtype))
            for f in shard_schema.FEATURES}
    if word_marks:
        marks = shard_schema.WORD_CONTINUES
        spec[marks.name] = tf.io.FixedLenFeature([max_seq_length], tf.as_dtype(marks.dtype))
    return spec


@dataclasses.dataclass(frozen=True)
class DamagedShard:
    """A shard whose damaged records are skipped (--skip_corrupt_records): where its
    intact records' data lie, and what was left out."""
    path: str
    offsets: np.ndarray   # [intact records] int64, byte offset of each record's data
    lengths: np.ndarray   # [intact records] int64
    skipped: tuple        # shard_checks.RecordError of each damaged record


def check_shards(files, max_seq_length, max_predictions_per_seq,
                 skip_corrupt_records=False, needs_masks=False):
    """Checks pretraining shards before any work; ValueError naming the file and byte
    offset for the first problem. Returns {path: DamagedShard} for the shards with
    damaged records to skip (always empty without `skip_corrupt_records`).

    Default: each shard's first record (a TFRecord file; both checksums; a
    tf.train.Example whose features have the flags' lengths) and its last bytes (the
    last record is whole); a few milliseconds per shard whatever its size.
    `needs_masks`: the first record must hold masked-LM predictions (static masking
    reads them; shards written with --masking=none have none).
    `skip_corrupt_records`: also every record's checksum, with one tf.data pass per shard
    (about 5 s per GB of 860-byte records, on this 2-core machine) and, for a shard where
    it fails, a NumPy scan that finds each damaged record (about 8 s per GB more); a
    damaged record header is still an error, since the records after it cannot be
    found."""
    damaged = {}
    progress = None
    if skip_corrupt_records:
        from bert_tf.base.progress import progress_bar
        progress = progress_bar(len(files), "checking shards", unit="shard")
    for path in files:
        try:
            if skip_corrupt_records:
                shard = _scan_for_damage(path)
                if shard is None:
                    offset, data = 0, shard_checks.first_record(path)
                else:
                    damaged[path] = shard
                    if not len(shard.offsets):
                        raise ValueError(f"{path}: no intact record (all "
                                         f"{len(shard.skipped)} damaged); leave it out")
                    offset = int(shard.offsets[0]) - 12
                    with tf.io.gfile.GFile(path, "rb") as f:
                        f.seek(offset + 12)
                        data = f.read(int(shard.lengths[0]))
            else:
                data, offset = shard_checks.first_record(path), 0
                shard_checks.check_tail(path)
        except shard_checks.RecordError as e:
            raise ValueError(f"{e}; {SKIP_ADVICE}" if e.skippable else str(e)) from None
        features = _check_example(path, offset, data, max_seq_length,
                                  max_predictions_per_seq)
        if needs_masks and not features["masked_lm_weights"].any():
            raise ValueError(
                f"{path}: the record at byte {offset} has no masked-LM predictions (all "
                f"masked_lm_weights are 0, as create_pretraining_data --masking=none "
                f"writes); pretrain from these shards with --masking=dynamic")
        if progress is not None:
            progress.update(1)
    if progress is not None:
        progress.close()
    for shard in damaged.values():
        where = ", ".join(str(e.offset) for e in shard.skipped[:10])
        more = f" and {len(shard.skipped) - 10} more" if len(shard.skipped) > 10 else ""
        print(f"{shard.path}: skipping {len(shard.skipped)} damaged record(s) (at byte "
              f"{where}{more}); {len(shard.offsets)} intact", flush=True)
    return damaged


def has_word_marks(files):
    """Whether the shards carry whole-word marks (shard_schema.WORD_CONTINUES, as
    create_pretraining_data --chinese_word_segmenter --masking=none writes), from each
    one's first record; ValueError naming one of each when some do and some do not."""
    found = {path: shard_schema.WORD_CONTINUES.name in parse_example(
        memoryview(shard_checks.first_record(path))) for path in files}
    if len(set(found.values())) > 1:
        with_marks = next(p for p, marked in found.items() if marked)
        without = next(p for p, marked in found.items() if not marked)
        raise ValueError(f"--input_file: {with_marks} has whole-word marks (written with "
                         f"--chinese_word_segmenter) and {without} has none; dynamic "
                         f"whole-word masking reads one kind of shard at a time")
    return any(found.values())


def _scan_for_damage(path):
    """None when every record of the shard is whole and passes its checksums (one tf.data
    pass, TensorFlow's own CRC, and the tail check, since TFRecordDataset stops silently
    at a record cut inside its header); else the DamagedShard from a NumPy scan."""
    try:
        for _ in tf.data.TFRecordDataset(path, buffer_size=16 << 20).batch(1 << 16):
            pass
        shard_checks.check_tail(path)
        return None
    except (tf.errors.DataLossError, shard_checks.RecordError):
        offsets, lengths, skipped = shard_checks.scan_records(path)
        return DamagedShard(path, offsets, lengths, tuple(skipped))


def _check_example(path, offset, data, max_seq_length, max_predictions_per_seq):
    """ValueError unless `data` is a tf.train.Example with the features `parse_batch`
    reads, of the lengths the flags give; returns its features."""
    try:
        features = parse_example(memoryview(data))
    except (ValueError, IndexError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: the record at byte {offset} is not a tf.train.Example "
                         f"({e}); is it a pretraining shard?") from None
    lengths = shard_schema.lengths(max_seq_length, max_predictions_per_seq)
    for feature in shard_schema.FEATURES:
        name, flag = feature.name, feature.length
        if name not in features:
            have = ", ".join(sorted(features)[:10]) or "none"
            raise ValueError(f"{path}: the record at byte {offset} has no {name!r} feature "
                             f"(it has: {have}); is it a pretraining shard?")
        value = features[name]
        kind = "bytes" if isinstance(value, list) else \
            "float" if value.dtype == np.float32 else "int64"
        want = "float" if feature.kind == "float" else "int64"
        if kind != want and len(value):
            raise ValueError(f"{path}: the record at byte {offset} has {name} as {kind} "
                             f"values; pretraining shards have {want} values there")
        if flag is None:
            if len(value) != 1:
                raise ValueError(f"{path}: the record at byte {offset} has {len(value)} "
                                 f"{name}, expected 1")
        elif len(value) != lengths[name]:
            raise ValueError(
                f"{path}: records have {name} of length {len(value)}, but "
                f"--{flag}={lengths[name]}; pass --{flag}={len(value)} (the value the shards "
                f"were written with)")
    return features


def data_loss_error(error, files):
    """The one-line ValueError for a tf.errors.DataLossError met while reading `files`.
    TensorFlow says "corrupted record at N" without the file; the record is found
    afterwards (shard_checks.locate_damage) and named with the user's two ways out."""
    match = re.search(r"(?:corrupted|truncated) record at (\d+)", error.message)
    damage = shard_checks.locate_damage(files, int(match.group(1))) if match else None
    if damage is None:
        return ValueError(f"a shard is damaged but could not be found (TensorFlow: "
                          f"{' '.join(error.message.split())[:200]}); {SKIP_ADVICE}")
    return ValueError(f"{damage}; {SKIP_ADVICE}" if damage.skippable else str(damage))


def expand_gfile_patterns(patterns, skip=()):
    """file_patterns.expand_file_patterns through tf.io.gfile (local and remote shards)."""
    return file_patterns.expand_file_patterns(patterns, skip=skip, fs=GFILE)


def parse_batch(serialized, max_seq_length, max_predictions_per_seq, word_marks=False):
    """[batch] serialized tf.Examples -> dict of int32/float32 tensors with our names
    (shard_schema.to_batch: int64 -> int32, since TPUs and most kernels want int32);
    `word_marks`: also "word_continues", bool (for dynamic_masking.remask, which drops
    it)."""
    ex = tf.io.parse_example(serialized, feature_spec(max_seq_length,
                                                      max_predictions_per_seq, word_marks))
    batch = shard_schema.to_batch(ex, lambda t: tf.cast(t, tf.int32))
    if word_marks:
        batch[shard_schema.WORD_CONTINUES.input] = ex[shard_schema.WORD_CONTINUES.name] > 0
    return batch


def _shard_reader(files, damaged):
    """(dataset of the files, function from its element to the file's serialized
    examples). Intact shards are read by TFRecordDataset. A shard with damaged records
    (`damaged`: {path: DamagedShard}) is read whole with tf.io.read_file (so held in memory
    while its records are served) and its intact records are cut out at the offsets its
    scan found (about 5 s per GB against TFRecordDataset's 2.6 here): TFRecordDataset can
    neither start at an offset nor go on after a damaged record (with ignore_errors() it
    drops the rest of the file)."""
    names = [f for f in files if f in (damaged or {})]
    if not names:
        return tf.data.Dataset.from_tensor_slices(files), tf.data.TFRecordDataset
    index = [names.index(f) if f in names else -1 for f in files]
    # Row k + 1 of `splits` starts damaged shard k's records; row 0 is the intact shards'
    # (none), so index -1 reads nothing from here.
    splits = tf.constant(np.cumsum([0, 0] + [len(damaged[f].offsets) for f in names]),
                         tf.int64)
    offsets = tf.constant(np.concatenate([damaged[f].offsets for f in names]), tf.int64)
    lengths = tf.constant(np.concatenate([damaged[f].lengths for f in names]), tf.int64)

    def read(file, k):
        intact = tf.data.TFRecordDataset(tf.reshape(file, [1])[:tf.cast(k < 0, tf.int32)])
        lo, hi = splits[k + 1], splits[k + 2]

        def cut_out(_):
            contents = tf.io.read_file(file)  # [] the whole shard
            # A vectorized substr per 4096 records: one map call per record costs ~10x.
            return tf.data.Dataset.from_tensor_slices((offsets[lo:hi], lengths[lo:hi])) \
                .batch(4096).map(lambda offset, length: tf.strings.substr(
                    contents, offset, length)).unbatch()
        return intact.concatenate(
            tf.data.Dataset.range(tf.cast(k >= 0, tf.int64)).flat_map(cut_out))

    return tf.data.Dataset.from_tensor_slices((files, index)), read


def pretraining_dataset(input_files, batch_size, max_seq_length, max_predictions_per_seq,
                        is_training=True, input_context=None, seed=12345,
                        shuffle_buffer=10000, cycle_length=8, damaged=None, masking=None):
    """Batches of pretraining examples.

    Training: files are sharded per input pipeline (one per worker under
    MultiWorkerMirroredStrategy), repeated, shuffled at file and record level with fixed
    seeds, interleaved deterministically; so the stream is a pure function of the seed
    and its position can be checkpointed and restored exactly.
    Eval: files in order, one pass, the last partial batch kept.

    `batch_size` is the batch of this input pipeline (per worker). Parsing happens after
    batching (vectorized `parse_example`). `damaged`: {path: DamagedShard} from
    `check_shards(..., skip_corrupt_records=True)`, whose damaged records are left out.
    `masking`: a dynamic_masking.MaskingSpec to draw new masked-LM predictions for every
    batch (from the seed, this pipeline's id and the batch's number in it) instead of
    reading the shards' own.
    """
    files = expand_gfile_patterns(input_files)
    ds, read = _shard_reader(files, damaged)
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
        ds = ds.interleave(read, cycle_length=min(cycle_length, len(files)),
                           num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        ds = ds.shuffle(shuffle_buffer, seed=seed + 1)
        ds = ds.batch(batch_size, drop_remainder=True)
    else:
        ds = ds.flat_map(read)
        ds = ds.batch(batch_size, drop_remainder=False)
    word_marks = masking is not None and masking.word_marks
    ds = ds.map(lambda s: parse_batch(s, max_seq_length, max_predictions_per_seq,
                                      word_marks),
                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if masking is not None:
        from bert_tf.training.dynamic_masking import remask
        pipeline = input_context.input_pipeline_id if input_context else 0
        # enumerate() counts the batches inside the pipeline, so the count is part of the
        # iterator state a checkpoint saves.
        ds = ds.enumerate().map(lambda i, batch: remask(batch, i, masking, seed, pipeline),
                                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)
