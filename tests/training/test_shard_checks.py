"""run_pretraining on damaged or mismatched shards: one `error:` line naming the file and
byte offset, before any work where a cheap check can tell; --skip_corrupt_records leaves
the damaged records out and counts them exactly."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.base import tfrecord
from bert_tf.training import shard_checks
from bert_tf.training.data import check_shards, pretraining_dataset
from bert_tf.run_pretraining import main
from tests.testing import write_pretraining_shards

TINY = {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 64}
FLAGS = ["--num_train_steps=2", "--train_batch_size=4", "--max_seq_length=32",
         "--max_predictions_per_seq=5", "--num_warmup_steps=0"]


@pytest.fixture(scope="module")
def good_shard(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("good"))
    write_pretraining_shards(directory, num_files=1, examples_per_file=16)
    return os.path.join(directory, "shard_0.tfrecord")


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("config") / "bert_config.json"
    path.write_text(json.dumps(TINY))
    return str(path)


def record_offsets(path):
    offsets, lengths, cut = shard_checks.record_spans(path)
    assert cut is None and len(offsets) == 16
    return [int(o) for o in offsets], [int(n) for n in lengths]


def damaged_copy(good_shard, tmp_path, edit):
    """A copy of the shard with `edit(bytearray)` applied; returns its path."""
    path = str(tmp_path / "shards" / "shard_0.tfrecord")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = bytearray(open(good_shard, "rb").read())
    with open(path, "wb") as f:
        f.write(edit(data))
    return path


def flip_data(good_shard, *indices):
    """An edit that flips a byte in the middle of the data of records `indices`."""
    offsets, lengths = record_offsets(good_shard)

    def edit(data):
        for i in indices:
            data[offsets[i] + 12 + lengths[i] // 2] ^= 0xFF
        return data
    return edit


def run(shard, config_file, tmp_path, *extra, flags=FLAGS):
    return main([f"--input_file={shard}", f"--output_dir={tmp_path / 'out'}",
                 f"--bert_config_file={config_file}", "--do_train", *flags, *extra])


def one_error_line(capsys, *parts):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    for part in parts:
        assert part in err[0], (part, err[0])
    return err[0]


@pytest.mark.parametrize("inside", [20, 6], ids=["in-data", "in-header"])
def test_cut_shard_is_refused_before_training(good_shard, config_file, tmp_path, capsys,
                                              inside):
    # TFRecordDataset raises for a cut inside a record's data, but ends the file silently
    # (8 of 16 records, no error) for a cut inside a header: the tail check sees both.
    offsets, lengths = record_offsets(good_shard)
    shard = damaged_copy(good_shard, tmp_path, lambda d: d[:offsets[8] + inside])
    if inside == 6:
        assert sum(1 for _ in tf.data.TFRecordDataset(shard)) == 8
    with pytest.raises(SystemExit) as e:
        run(shard, config_file, tmp_path)
    assert e.value.code == 1
    need = 16 + lengths[8] if inside > 12 else 12
    one_error_line(capsys, f"error: {shard}: the last record, at byte {offsets[8]}, is cut "
                   f"short ({inside} of {need} bytes", "--skip_corrupt_records")
    assert not os.path.exists(tmp_path / "out")  # refused before any work


def test_corrupted_record_met_in_training_names_shard_and_offset(
        good_shard, config_file, tmp_path, capsys):
    # The first record and the tail are intact, so only tf.data meets the damage (as a
    # DataLossError naming neither file nor record); the record is found afterwards.
    offsets, _ = record_offsets(good_shard)
    shard = damaged_copy(good_shard, tmp_path, flip_data(good_shard, 5))
    with pytest.raises(SystemExit) as e:
        run(shard, config_file, tmp_path)
    assert e.value.code == 1
    one_error_line(capsys, f"error: {shard}: the record at byte {offsets[5]} is corrupted "
                   f"(its data fails its checksum); rerun with --skip_corrupt_records",
                   "write the shard again")


def test_text_file_as_shard(config_file, tmp_path, capsys):
    shard = tmp_path / "notes.txt"
    shard.write_text("not a shard\n" * 20)
    with pytest.raises(SystemExit) as e:
        run(str(shard), config_file, tmp_path)
    assert e.value.code == 1
    one_error_line(capsys, f"error: {shard}: not a TFRecord file (the record header at "
                   f"byte 0 fails its checksum)")


@pytest.mark.parametrize("flag,feature,written", [
    ("max_seq_length", "input_ids", 32),
    ("max_predictions_per_seq", "masked_lm_positions", 5)])
def test_lengths_the_shards_were_not_written_with(good_shard, config_file, tmp_path,
                                                  capsys, flag, feature, written):
    flags = [f for f in FLAGS if not f.startswith(f"--{flag}=")] + [f"--{flag}=64"]
    with pytest.raises(SystemExit) as e:
        run(good_shard, config_file, tmp_path, flags=flags)
    assert e.value.code == 1
    one_error_line(capsys, f"error: {good_shard}: records have {feature} of length "
                   f"{written}, but --{flag}=64; pass --{flag}={written} (the value the "
                   f"shards were written with)")


def test_ignore_errors_drops_the_rest_of_the_file(good_shard, tmp_path):
    # Why --skip_corrupt_records does not use tf.data's ignore_errors(): after a damaged
    # record TFRecordDataset goes on with the next file, so the 12 intact records after
    # record 3 are lost. If TensorFlow changes this, the reader in data.py can be simpler.
    shard = damaged_copy(good_shard, tmp_path, flip_data(good_shard, 3, 10))
    assert sum(1 for _ in tf.data.TFRecordDataset(shard).ignore_errors()) == 3


def test_skip_corrupt_records_reads_the_intact_ones_and_counts(
        good_shard, config_file, tmp_path, capsys):
    offsets, _ = record_offsets(good_shard)
    shard = damaged_copy(good_shard, tmp_path, flip_data(good_shard, 3, 10))
    damaged = check_shards([shard], 32, 5, skip_corrupt_records=True)
    assert [e.offset for e in damaged[shard].skipped] == [offsets[3], offsets[10]]
    expected = [r for i, r in enumerate(tf.data.TFRecordDataset(good_shard).as_numpy_iterator())
                if i not in (3, 10)]
    batches = list(pretraining_dataset(shard, 4, 32, 5, is_training=False, damaged=damaged))
    assert sum(len(b["token_ids"]) for b in batches) == 14
    parsed = [tf.train.Example.FromString(r).features.feature["input_ids"].int64_list.value
              for r in expected]
    np.testing.assert_array_equal(np.concatenate([b["token_ids"] for b in batches]), parsed)
    capsys.readouterr()

    metrics = run(shard, config_file, tmp_path, "--do_eval", "--skip_corrupt_records")
    assert metrics["skipped_corrupt_records"] == 2
    out = capsys.readouterr().out
    assert f"{shard}: skipping 2 damaged record(s) (at byte {offsets[3]}, {offsets[10]}); " \
           f"14 intact" in out
    assert "skipped_corrupt_records = 2" in open(tmp_path / "out" / "eval_results.txt").read()


def test_skip_counts_a_cut_last_record_and_refuses_a_damaged_header(good_shard, tmp_path):
    offsets, _ = record_offsets(good_shard)
    shard = damaged_copy(good_shard, tmp_path, lambda d: d[:offsets[15] + 30])
    skipped = check_shards([shard], 32, 5, skip_corrupt_records=True)[shard].skipped
    assert [(e.offset, e.skippable) for e in skipped] == [(offsets[15], True)]

    def header(data):
        data[offsets[7] + 2] ^= 0x01
        return data
    shutil.rmtree(tmp_path / "shards")
    shard = damaged_copy(good_shard, tmp_path, header)
    with pytest.raises(ValueError, match=f"{shard}: the record header at byte {offsets[7]} "
                       f"fails its checksum"):
        check_shards([shard], 32, 5, skip_corrupt_records=True)


def test_numpy_crc_and_header_walk_agree_with_tensorflow(good_shard):
    data = np.frombuffer(open(good_shard, "rb").read(), np.uint8)
    offsets, lengths = record_offsets(good_shard)
    crcs = tfrecord.masked_crc32c_rows(data, np.array(offsets) + 12, lengths)
    assert [int(c) for c in crcs] == [
        int.from_bytes(data[o + 12 + n:o + 16 + n].tobytes(), "little")
        for o, n in zip(offsets, lengths)]
    recs = list(tf.data.TFRecordDataset(good_shard).as_numpy_iterator())
    assert [n for n in lengths] == [len(r) for r in recs]
    shard_checks.check_tail(good_shard)  # whole
