"""bert_tf/checkpoints/bundle.py: TensorFlow's checkpoint index read without TensorFlow,
on Model Garden's committed checkpoints (tests/fixtures/model_garden/). The damaged files
through every command are rows of tests/workflows/test_fuzz.py."""

import os
import shutil
import struct

from bert_tf.base.tfrecord import crc32c, masked_crc
from bert_tf.checkpoints import bundle
from tests import TESTS

TRAINER = os.path.join(TESTS, "fixtures", "model_garden",
                       "trainer")


def _varints(data, count):
    """The first `count` base-128 varints of `data`."""
    values, value, shift = [], 0, 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            values.append(value)
            value = shift = 0
            if len(values) == count:
                return values
    raise ValueError("too few varints")


def _encoded(*values):
    out = bytearray()
    for value in values:
        while value >= 0x80:
            out.append(value & 0x7F | 0x80)
            value >>= 7
        out.append(value)
    return bytes(out)


def test_the_index_gives_each_shard_its_extent(tmp_path):
    prefix = os.path.join(TRAINER, "ckpt-1")
    data = prefix + ".data-00000-of-00001"
    # Every byte of the one data shard belongs to a tensor: the extent is its size.
    assert bundle.bundle_extent(prefix) == {data: os.path.getsize(data)}
    assert bundle.bundle_damage(prefix) is None
    copy = tmp_path / "trainer"
    shutil.copytree(TRAINER, copy)
    cut = copy / "ckpt-1.data-00000-of-00001"
    cut.write_bytes(cut.read_bytes()[:-3])
    assert bundle.bundle_damage(str(copy / "ckpt-1")) == (
        f"ckpt-1.data-00000-of-00001 is cut short ({os.path.getsize(data) - 3:,} bytes; "
        f"its index expects {os.path.getsize(data):,})")


def test_the_state_file_of_a_moved_folder_and_of_a_missing_checkpoint(tmp_path):
    copy = tmp_path / "trainer"
    shutil.copytree(TRAINER, copy)
    assert bundle.latest_prefix(str(copy)) == str(copy / "ckpt-1")
    # Absolute names written where the folder was before: the folder's own files.
    (copy / "checkpoint").write_text('model_checkpoint_path: "/elsewhere/ckpt-1"\n')
    assert bundle.latest_prefix(str(copy)) == str(copy / "ckpt-1")
    (copy / "checkpoint").write_text('model_checkpoint_path: "ckpt-3"\n'
                                     'all_model_checkpoint_paths: "ckpt-1"\n'
                                     'all_model_checkpoint_paths: "ckpt-3"\n')
    try:
        bundle.latest_prefix(str(copy))
        raise AssertionError("a state file naming a missing checkpoint was accepted")
    except ValueError as e:
        assert str(e).startswith(f"{copy}/ckpt-3.index: missing (the checkpoint ckpt-3 "
                                 f"that {copy}/checkpoint names as the latest; ckpt-1, an "
                                 f"earlier one it names, is there")
    os.remove(copy / "checkpoint")
    assert bundle.latest_prefix(str(copy)) is None


def test_an_index_it_cannot_parse_is_blamed_only_when_a_checksum_fails(tmp_path):
    """A block this reader does not parse (compressed: TensorFlow's table may snappy
    one) but whose checksum holds is left to TensorFlow; the same block with a changed
    byte is the index's damage, said in one line."""
    copy = tmp_path / "trainer"
    shutil.copytree(TRAINER, copy)
    index = copy / "ckpt-1.index"
    data = bytearray(index.read_bytes())
    # The first data block starts the file; its trailer (type byte, masked CRC) follows
    # it. Mark it compressed with a checksum that matches.
    footer = data[-48:]                  # two block handles, padding, the magic
    numbers = _varints(footer, 4)        # metaindex offset, size; index offset, size
    block = data[numbers[2]:numbers[2] + numbers[3]]
    shared, unshared, length = _varints(block, 3)          # the index's first entry
    at = len(_encoded(shared, unshared, length)) + unshared
    first, size = _varints(block[at:at + length], 2)       # the first data block
    data[first + size] = 1
    data[first + size + 1:first + size + 5] = struct.pack(
        "<I", masked_crc(crc32c(bytes(data[first:first + size]) + b"\x01")))
    index.write_bytes(bytes(data))
    assert bundle.bundle_extent(str(copy / "ckpt-1")) is None
    assert bundle.bundle_damage(str(copy / "ckpt-1")) is None
    data[first + 3] ^= 0xFF
    index.write_bytes(bytes(data))
    assert bundle.bundle_damage(str(copy / "ckpt-1")) == (
        f"ckpt-1.index is damaged, the block at byte {first:,} fails its checksum (not a "
        f"checkpoint index, or cut short)")
