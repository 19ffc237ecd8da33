"""The shard checks of run_pretraining (data.py `check_shards`), with NumPy alone: is each
shard whole, and where are its damaged records. The TFRecord framing and the
tf.train.Example codec they read with are bert_tf/base/tfrecord.py's.

A TFRecord file is a sequence of records:

    uint64 length | uint32 masked CRC-32C of length | data[length] | uint32 masked CRC of data

The helpers: `first_record` (one record, both CRCs), `check_tail` (is the last record
whole, from the file's last bytes), `record_spans` (a walk over the record headers,
seeking past the data), `scan_records` (every record's data CRC, computed with NumPy
across records at once) and `locate_damage` (the file of a record TensorFlow reported
damaged without naming its file).
"""

import mmap
import os
import struct

import numpy as np

from bert_tf.base.tfrecord import FramingError, masked_crc32c, masked_crc32c_rows, read_framed


class RecordError(ValueError):
    """A damaged record, its file and byte offset named in the message. `skippable`: the
    records after it can still be found (its data fails its checksum, or it is the last
    record and is cut short), so a reader may skip it; a damaged header hides where the
    next record starts."""

    def __init__(self, message, path, offset, skippable):
        super().__init__(message)
        self.path, self.offset, self.skippable = path, offset, skippable


def _little_endian(buf, positions, width):
    """The unsigned `width`-byte integers at `positions` of uint8 `buf`, as uint64."""
    value = np.zeros(len(positions), np.uint64)
    for i in range(width):
        value |= buf[positions + i].astype(np.uint64) << np.uint64(8 * i)
    return value


def _is_remote(path):
    return "://" in path  # gs://, s3://, hdfs://: read through TensorFlow's file systems


def _open(path):
    if _is_remote(path):
        import tensorflow as tf  # only for remote files: this module runs without it
        return tf.io.gfile.GFile(path, "rb")
    return open(path, "rb")


def _file_bytes(path):
    """The whole file as a uint8 array: mapped, not read, when it is local."""
    if _is_remote(path):
        with _open(path) as f:
            return np.frombuffer(f.read(), np.uint8)
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return np.zeros(0, np.uint8)
        return np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), np.uint8)


def _bad_header(path, offset, start):
    """The error for a record header at `offset` whose length fails its checksum; `start`:
    the file's first bytes."""
    if offset == 0 and bytes(start[:2]) == b"\x1f\x8b":
        return RecordError(f"{path}: gzip-compressed (written with --gzip?), but the shards "
                           f"are read uncompressed: decompress it (gzip -dc SHARD > NEW) or "
                           f"write the shards without --gzip", path, 0, skippable=False)
    if offset == 0:
        return RecordError(f"{path}: not a TFRecord file (the record header at byte 0 "
                           f"fails its checksum)", path, 0, skippable=False)
    return RecordError(
        f"{path}: the record header at byte {offset} fails its checksum (the shard is "
        f"damaged; the records after it cannot be found, so they cannot be skipped): "
        f"write the shard again or leave it out", path, offset, skippable=False)


def _cut_short(path, offset, have, need):
    return RecordError(
        f"{path}: the last record, at byte {offset}, is cut short ({have} of {need} "
        f"bytes: a shard copied or written only in part?)", path, offset, skippable=True)


def _corrupted(path, offset):
    return RecordError(f"{path}: the record at byte {offset} is corrupted (its data fails "
                       f"its checksum)", path, offset, skippable=True)


def first_record(path):
    """The data of the file's first record, its framing and both checksums checked:
    RecordError naming the file and offset otherwise (a file that is not a TFRecord file,
    a cut record, a corrupted one)."""
    def too_short(size):
        return RecordError(f"{path}: not a TFRecord file ({size} bytes, shorter than a "
                           f"record header)", path, 0, skippable=False)
    with _open(path) as f:
        try:
            record = read_framed(f)
        except FramingError as e:
            if e.kind == "bad length checksum":
                raise _bad_header(path, 0, e.header) from None
            if e.kind == "data cut":
                raise _cut_short(path, 0, e.have, e.need) from None
            raise too_short(e.have) from None
    if record is None:
        raise too_short(0)
    data, data_crc = record
    if masked_crc32c(data) != data_crc:
        raise _corrupted(path, 0)
    return bytes(data)


def record_spans(path, buf=None):
    """(offsets, lengths, cut) of the records of a TFRecord file, from a walk over the
    record headers that seeks past the data: each record's offset and data length (int64
    arrays), and `cut`, a RecordError for a last record cut short, or None. Every header's
    length checksum is checked (with NumPy, after the walk): RecordError for the first that
    fails. The walk costs about 0.45 s per GB of 860-byte records read from the page
    cache (a Python step per record), more when the file must come from disk."""
    buf = _file_bytes(path) if buf is None else buf
    size = len(buf)
    view = memoryview(buf)
    unpack = struct.Struct("<Q").unpack_from
    offsets = []
    offset = 0
    while offset + 12 <= size:
        offsets.append(offset)
        offset += unpack(view, offset)[0] + 16
    offsets = np.array(offsets, np.int64)
    stored = _little_endian(buf, offsets + 8, 4)
    bad = np.flatnonzero(masked_crc32c_rows(buf, offsets, np.full(len(offsets), 8)) != stored)
    if bad.size:  # the walk went astray from the first damaged header on
        raise _bad_header(path, int(offsets[bad[0]]), buf[:2])
    lengths = _little_endian(buf, offsets, 8).astype(np.int64)
    cut = None
    if offset > size:     # the last record's data or checksum is cut
        cut = _cut_short(path, int(offsets[-1]), size - int(offsets[-1]),
                         16 + int(lengths[-1]))
        offsets, lengths = offsets[:-1], lengths[:-1]
    elif offset < size:   # a header is cut
        cut = _cut_short(path, offset, size - offset, 12)
    return offsets, lengths, cut


def check_tail(path, window=1 << 16):
    """RecordError unless the file ends with a whole record. Read from the file's last
    `window` bytes: some position there must hold a header whose length ends the record
    exactly at the end of the file and whose length checksum matches (a false match needs
    a 32-bit coincidence). When none does (a cut file, or a last record longer than the
    window) `record_spans` walks the file to tell which, and name the cut record."""
    with _open(path) as f:
        size = f.size() if _is_remote(path) else os.fstat(f.fileno()).st_size
        f.seek(max(0, size - window))
        tail = np.frombuffer(f.read(), np.uint8)
    if len(tail) >= 16:
        words = np.lib.stride_tricks.sliding_window_view(tail[:len(tail) - 8], 8)
        lengths = (words.astype(np.uint64) << (8 * np.arange(8, dtype=np.uint64))).sum(1)
        positions = np.arange(len(words))
        for p in np.flatnonzero(lengths == (len(tail) - 16 - positions).astype(np.uint64)):
            header = tail[p:p + 12].tobytes()
            if masked_crc32c(header[:8]) == struct.unpack("<I", header[8:])[0]:
                return
    _, _, cut = record_spans(path)
    if cut is not None:
        raise cut


def scan_records(path, chunk=8192):
    """Every record's data checksum checked. Returns (offsets, lengths, damaged): the data
    offsets and lengths of the intact records (int64 arrays) and a RecordError for each
    damaged one (data failing its checksum; a last record cut short). RecordError for a
    header failing its checksum (the records after it cannot be found). The checksums are
    computed with NumPy, `chunk` records at a time (about 8 s per GB here)."""
    buf = _file_bytes(path)
    offsets, lengths, cut = record_spans(path, buf)
    intact = np.ones(len(offsets), bool)
    for i in range(0, len(offsets), chunk):
        data, n = offsets[i:i + chunk] + 12, lengths[i:i + chunk]
        intact[i:i + chunk] = masked_crc32c_rows(buf, data, n) == \
            _little_endian(buf, data + n, 4)
    damaged = [_corrupted(path, int(o)) for o in offsets[~intact]]
    if cut is not None:
        damaged.append(cut)
    return offsets[intact] + 12, lengths[intact], damaged


def _data_fails_checksum(path, offset):
    """Whether a whole record starts at `offset` (its length checksum matches) and its
    data fails its checksum."""
    if offset < 0:
        return False
    with _open(path) as f:
        f.seek(offset)
        try:
            record = read_framed(f)
        except FramingError:
            return False
    return record is not None and masked_crc32c(record[0]) != record[1]


def locate_damage(paths, offset):
    """The RecordError of the damaged record TensorFlow reported as "corrupted record at
    `offset`" or "truncated record at `offset`" without naming its file, or None. TF's
    offset is the record's own for a damaged header or a cut record, and its data's (12
    bytes on) for data failing its checksum, the common case: that one is probed first in
    every file (one record read each), then the headers are walked."""
    for path in paths:
        if _data_fails_checksum(path, offset - 12):
            return _corrupted(path, offset - 12)
    for path in paths:
        try:
            _, _, cut = record_spans(path)
        except RecordError as e:
            if e.offset == offset:
                return e
            continue
        if cut is not None and cut.offset == offset:
            return cut
    return None
