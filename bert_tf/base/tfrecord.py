"""The TFRecord codec, TF-free: CRC32C, varints, tf.train.Example protobuf encode and
decode, and TFRecord framing, with NumPy alone. The shard writer (data/) and
the NumPy readers (training/fit.py; the shard checks of training/shard_checks.py) use it,
so a machine without TensorFlow (create_pretraining_data's processes; Keras' JAX and
PyTorch backends) writes and reads the shards.

Writing: a batch of rows of fixed-length lists is encoded at once with NumPy (~50x faster
than one protobuf message per row), bytes exactly those of TensorFlow's deterministic
serialization and `tf.io.TFRecordWriter` (tests compare both byte for byte).

Encoding (protobuf wire format; tag = field number << 3 | wire type, 2 = length-delimited):
    Example   = 0x0A len Features
    Features  = (0x0A len Entry) per feature, keys sorted
    Entry     = 0x0A len key  0x12 len Feature
    Feature   = 0x1A len Int64List | 0x12 len FloatList   (0x0A len BytesList)
    Int64List = 0x0A len packed varints;  FloatList = 0x0A len packed little-endian float32
TFRecord: uint64 length, uint32 masked CRC32C of the length, data, uint32 masked CRC32C
of the data (CRC32C = Castagnoli, masked as ((crc >> 15) | (crc << 17)) + 0xa282ead8).

Feature kinds: "int" (an Int64List) or "float" (a FloatList); the caller's schema names
them (bert_tf/base/shard_schema.py for the pretraining shards).
"""

import struct

import numpy as np


# ------------------------------------------------------------------------------ CRC32C

def _crc_tables():
    """Slicing-by-4 tables for CRC32C, merged in pairs into two 65536-entry tables so a
    32-bit step is two lookups: TA[low 16 bits] ^ TB[high 16 bits]."""
    poly = 0x82F63B78   # Castagnoli, reflected
    t0 = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        t0.append(c)
    tables = [np.array(t0, np.uint32)]
    for _ in range(3):
        prev = tables[-1]
        tables.append((prev >> 8) ^ tables[0][prev & 0xFF])
    t0, t1, t2, t3 = tables
    lo, hi = np.meshgrid(np.arange(256), np.arange(256))           # value = hi << 8 | lo
    ta = (t3[lo] ^ t2[hi]).reshape(-1)
    tb = (t1[lo] ^ t0[hi]).reshape(-1)
    return tables, ta, tb


# t0..t3 (slicing-by-4) and the merged pair.
_TABLES, _TA, _TB = _crc_tables()
_T0 = _TABLES[0]
# The byte table as Python ints: a CRC of a few bytes (a record header) is faster in
# plain Python than through NumPy's per-call overhead.
_CRC_TABLE = _T0.tolist()


def crc32c_aligned(words, first_word, lengths):
    """CRC32C of byte ranges that start on 4-byte boundaries of a buffer.

    words: the buffer as little-endian uint32 [W] (padded so that reading a range's last
    full word stays inside); first_word, lengths: int64 [N] (range i starts at byte
    4 * first_word[i]). -> uint32 [N]. One vectorized step per 4 bytes over all ranges at
    once, longest first so each step works on a prefix of them (those still running).
    The cost is numpy's per-call overhead times the steps, so give it many ranges.
    """
    n = len(first_word)
    if n == 0:
        return np.zeros(0, np.uint32)
    order = np.argsort(-lengths, kind="stable")
    index, lengths = first_word[order], lengths[order]
    full = lengths // 4
    # running[j]: how many ranges have a word j (a prefix, as the ranges are sorted).
    running = np.searchsorted(-full, -np.arange(int(full[0])), side="left")
    crc = np.full(n, 0xFFFFFFFF, np.uint32)
    xor, take = np.bitwise_xor, np.take
    for k in running.tolist():
        c = crc[:k]
        x = xor(c, take(words, index[:k])).view(np.uint16)   # [2k]: low, high halves
        xor(take(_TA, x[0::2]), take(_TB, x[1::2]), out=c)
        index[:k] += 1
    # The last 1-3 bytes, one at a time.
    rest = lengths % 4
    tail = take(words, index, mode="clip").view(np.uint8).reshape(n, 4)
    for t in range(3):
        step = _T0[(crc ^ tail[:, t]) & 0xFF] ^ (crc >> 8)
        crc = np.where(t < rest, step, crc)
    out = np.empty(n, np.uint32)
    out[order] = crc ^ np.uint32(0xFFFFFFFF)
    return out


def masked_crc(crc):
    """TFRecord's mask of a CRC32C (an int, or a uint32 array): rotate right by 15 and add
    a constant, so that a CRC of data holding CRCs is not trivially zero."""
    if isinstance(crc, (int, np.integer)):
        crc = int(crc)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    crc = crc.astype(np.uint32)
    return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(0xA282EAD8)


def crc32c(data):
    """CRC32C of one bytes object."""
    words = np.frombuffer(bytes(data) + bytes(8 - len(data) % 4), "<u4")
    return int(crc32c_aligned(words, np.array([0]), np.array([len(data)]))[0])


def masked_crc32c(data):
    """TFRecord's masked CRC32C of a few bytes, in plain Python (one record header or
    record: no NumPy call per record)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return masked_crc(crc ^ 0xFFFFFFFF)


def masked_crc32c_rows(buf, starts, lengths):
    """TFRecord's masked CRC-32C of buf[s:s + n] for every (s, n), computed with NumPy
    across all rows at once, four bytes a step (rows sorted longest first, so the rows
    still running are a prefix). [rows] uint32. Unlike crc32c_aligned, the rows may start
    at any byte (a shard's records, read as they lie in the file)."""
    starts = np.asarray(starts, np.int64)
    lengths = np.asarray(lengths, np.int64)
    order = np.argsort(-lengths, kind="stable")
    s, negative_n = starts[order], -lengths[order]   # negative_n ascends
    crc = np.full(len(s), 0xFFFFFFFF, np.uint32)
    t0, t1, t2, t3 = _TABLES
    longest = int(-negative_n[0]) if len(s) else 0
    for k in range(0, longest, 4):
        full = np.searchsorted(negative_n, -(k + 4), side="right")  # rows with >= k+4 bytes
        if full:
            i = s[:full] + k
            c = crc[:full] ^ (buf[i].astype(np.uint32) | buf[i + 1].astype(np.uint32) << 8 |
                              buf[i + 2].astype(np.uint32) << 16 |
                              buf[i + 3].astype(np.uint32) << 24)
            crc[:full] = (t3[c & 0xFF] ^ t2[(c >> 8) & 0xFF] ^
                          t1[(c >> 16) & 0xFF] ^ t0[c >> 24])
        for j in range(3):  # rows that end inside these four bytes: one byte at a time
            end = np.searchsorted(negative_n, -(k + j + 1), side="right")  # > k+j bytes
            if end > full:
                r = slice(full, end)
                crc[r] = t0[(crc[r] ^ buf[s[r] + k + j]) & 0xFF] ^ (crc[r] >> 8)
    crc ^= np.uint32(0xFFFFFFFF)
    out = np.empty(len(s), np.uint32)
    out[order] = masked_crc(crc)
    return out


# ------------------------------------------------------------------------------ varints

def _varint_width(max_value):
    width = 1
    while max_value >= 1 << (7 * width):
        width += 1
    return width


def _varints(values, width):
    """Non-negative ints [N, n] -> (bytes uint8 [N, n * width], used bool [N, n * width]):
    each value's varint in `width` bytes, the unused ones marked."""
    values = np.asarray(values, np.int64)
    n, m = values.shape
    out = np.empty((n, m, width), np.uint8)
    used = np.empty((n, m, width), bool)
    for b in range(width):
        rest = values >> (7 * b)
        out[:, :, b] = (rest & 0x7F) | ((rest >> 7 > 0) << 7)
        used[:, :, b] = (rest > 0) | (b == 0)
    return out.reshape(n, m * width), used.reshape(n, m * width)


_TABLE_SIZE = 1 << 16


def _small_varint_tables():
    """Varints of 0..65535 as uint32 words (bytes little-endian, the 4th never used) and
    the matching used-byte masks as uint32 words: one gather per value instead of one per
    byte."""
    data, used = _varints(np.arange(_TABLE_SIZE)[:, None], 3)
    pad = np.zeros((_TABLE_SIZE, 1), np.uint8)
    return (np.concatenate([data, pad], axis=1).view("<u4")[:, 0],
            np.concatenate([used.astype(np.uint8), pad], axis=1).view("<u4")[:, 0])


_SMALL_DATA, _SMALL_USED = _small_varint_tables()


def _encode_values(values):
    """Packed varints of int rows [N, n] -> a group: ("fixed", uint8 [N, n]) when every
    value is below 128 (one byte each), else ("var", bytes [N, n * w], used [N, n * w])."""
    top = int(values.max()) if values.size else 0
    if top < 128:
        return ("fixed", np.asarray(values, np.uint8))
    n, m = values.shape
    if top < _TABLE_SIZE:
        # Vocabulary ids: one 4-byte table lookup per value; 4-byte slots (the 4th byte
        # never used) keep every array contiguous.
        values = np.asarray(values, np.intp)
        return ("var", _SMALL_DATA[values].view(np.uint8).reshape(n, 4 * m),
                _SMALL_USED[values].view(bool).reshape(n, 4 * m))
    return ("var",) + _varints(values, _varint_width(top))


def _varint_len(values):
    """Bytes of the varint of each length (an int, or an int64 array)."""
    if isinstance(values, int):
        return len(varint_bytes(values))
    width = np.ones_like(values)
    top = int(values.max()) if values.size else 0
    b = 1
    while top >= 1 << (7 * b):
        width += values >= 1 << (7 * b)
        b += 1
    return width


def _length_varint(values):
    """Varints of per-row lengths [N] -> a column group."""
    if values.min() == values.max():   # often: one constant for all rows
        return ("const", varint_bytes(int(values[0])))
    return ("var",) + _varints(values[:, None], _varint_width(int(values.max())))


def varint_bytes(value):
    """A non-negative int as a protobuf varint (7 bits a byte, low first)."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _entry_groups(name, tag, payload, p_len):
    """Column groups of one map entry (key, Feature, list, packed values) and its length:
    an int when every row has the same, else int64 [N]."""
    key = name.encode()
    list_len = 1 + _varint_len(p_len) + p_len            # Int64List / FloatList
    feat_len = 1 + _varint_len(list_len) + list_len      # Feature
    entry_len = 2 + len(key) + 1 + _varint_len(feat_len) + feat_len
    if isinstance(p_len, int):                           # fixed size: one constant header
        head = (b"\x0a" + varint_bytes(entry_len) + bytes([0x0A, len(key)]) + key + b"\x12"
                + varint_bytes(feat_len) + bytes([tag]) + varint_bytes(list_len) + b"\x0a"
                + varint_bytes(p_len))
        return [("const", head), payload], 1 + _varint_len(entry_len) + entry_len
    return ([("const", b"\x0a"), _length_varint(entry_len),
             ("const", bytes([0x0A, len(key)]) + key + b"\x12"), _length_varint(feat_len),
             ("const", bytes([tag])), _length_varint(list_len), ("const", b"\x0a"),
             _length_varint(p_len), payload], 1 + _varint_len(entry_len) + entry_len)


def encode_unframed(features, kinds):
    """The records of a batch without their CRCs: (uint8 [total], int64 [N] data lengths),
    frame_records fills them in for many batches at once.

    Each record is laid out as 12 blank header bytes, the serialized example, 0-3 padding
    bytes and 4 blank trailer bytes, so that every record, and the data in it, starts on a
    4-byte boundary (the CRC reads aligned words); frame_records drops the padding.

    Each part of a record is a group of columns of one [N, W] byte matrix: the same bytes
    for every row ("const"), n bytes per row ("fixed"), or up to n bytes per row with a
    mask of the ones used ("var": varints). Compacting the matrix by the mask lays the
    records end to end. Lengths that are the same for every row are Python ints.

    `features`: {name: array [N, n]}; `kinds`: {name: "int" | "float"} for each of them.
    """
    n = len(next(iter(features.values())))
    body, features_len = [], 0
    for name in sorted(kinds):   # deterministic serialization: map keys sorted
        kind = kinds[name]
        values = features[name]
        if kind == "int":
            payload = _encode_values(values)
            tag = 0x1A
        else:
            payload = ("fixed", np.ascontiguousarray(values, "<f4").view(np.uint8)
                       .reshape(n, -1))
            tag = 0x12
        p_len = payload[2].sum(axis=1) if payload[0] == "var" else payload[1].shape[1]
        groups, length = _entry_groups(name, tag, payload, p_len)
        body += groups
        features_len = features_len + length
    if isinstance(features_len, int):
        features_len = np.full(n, features_len, np.int64)
    groups = [("const", bytes(12) + b"\x0a"), _length_varint(features_len)] + body
    data_len = 1 + _varint_len(features_len) + features_len
    pad = (-data_len) % 4
    groups += [("var", np.zeros((n, 3), np.uint8), np.arange(3)[None, :] < pad[:, None]),
               ("const", bytes(4))]
    widths = [len(g[1]) if g[0] == "const" else g[1].shape[1] for g in groups]
    matrix = np.empty((n, sum(widths)), np.uint8)
    used = np.ones((n, sum(widths)), bool)
    at = 0
    for group, width in zip(groups, widths):
        if group[0] == "const":
            matrix[:, at:at + width] = np.frombuffer(group[1], np.uint8)
        else:
            matrix[:, at:at + width] = group[1]
            if group[0] == "var":
                used[:, at:at + width] = group[2]
        at += width
    return matrix[used], data_len


def encode_records(features, kinds):
    """{name: array [N, n]} (ints, or floats for the "float" ones of `kinds`: {name:
    "int" | "float"}) -> bytes: N TFRecords, each a serialized tf.train.Example, in row
    order, as tf.io.TFRecordWriter would write them."""
    return frame_records([encode_unframed(features, kinds)]).tobytes()


def frame_records(parts):
    """[(records, data lengths)] from encode_unframed -> uint8 array of finished
    TFRecords: each record's length, masked CRC32C of the length and masked CRC32C of the
    data filled in, padding dropped. `parts` is emptied (its arrays freed early)."""
    nonempty = [p for p in parts if len(p[1])]
    parts.clear()
    if not nonempty:
        return np.zeros(0, np.uint8)
    data_len = np.concatenate([p[1] for p in nonempty])
    n = len(data_len)
    padded = np.concatenate([p[0] for p in nonempty] + [np.zeros(4, np.uint8)])
    del nonempty
    words = padded.view("<u4")
    slot = (data_len + 3) // 4 * 4 + 16                     # bytes per record, aligned
    start = np.cumsum(slot) - slot
    header = data_len.astype("<u8").view(np.uint8).reshape(n, 8)
    header_crc = masked_crc(crc32c_aligned(header.reshape(-1).view("<u4"),
                                           np.arange(n) * 2, np.full(n, 8)))
    data_crc = masked_crc(crc32c_aligned(words, start // 4 + 3, data_len))
    padded[start[:, None] + np.arange(8)] = header
    padded[start[:, None] + np.arange(8, 12)] = header_crc.astype("<u4").view(np.uint8) \
        .reshape(n, 4)
    padded[(start + slot - 4)[:, None] + np.arange(4)] = data_crc.astype("<u4") \
        .view(np.uint8).reshape(n, 4)
    keep = np.ones(len(padded), bool)
    keep[-4:] = False
    gap = (start + 12 + data_len)[:, None] + np.arange(3)
    keep[gap[np.arange(3)[None, :] < (slot - data_len - 16)[:, None]]] = False
    return padded[keep]


# ------------------------------------------------------------------------------ reading

class FramingError(Exception):
    """The record at a file's position is not whole: `kind` "header cut", "bad length
    checksum" or "data cut"; `header`: the header bytes read; `have` / `need`: the
    record's bytes there and those its length asks for. Each reader words it its way."""

    def __init__(self, kind, header, have, need):
        super().__init__(kind)
        self.kind, self.header, self.have, self.need = kind, header, have, need


def read_framed(f):
    """The next record of the binary file `f`, its length's checksum checked: (data, the
    data's stored masked CRC32C, which the caller checks), or None at the end of the
    file; FramingError when it is not whole. The one reading of TFRecord framing (8-byte
    little-endian length, its masked CRC32C, the data, the data's masked CRC32C)."""
    header = f.read(12)
    if not header:
        return None
    if len(header) < 12:
        raise FramingError("header cut", header, len(header), 12)
    length, length_crc = struct.unpack("<QI", header)
    if masked_crc32c(header[:8]) != length_crc:
        raise FramingError("bad length checksum", header, 12, 12)
    data = f.read(length + 4)
    if len(data) < length + 4:
        raise FramingError("data cut", header, 12 + len(data), 16 + length)
    return data[:length], struct.unpack("<I", data[length:])[0]


def read_records(path):
    """Yields (offset, data) for each record of the local TFRecord file at `path`;
    ValueError naming the file and byte offset for a cut or foreign record.

    The length's CRC is checked (it is what tells a TFRecord file from any other file);
    the data's CRC is not, since computing it in Python would cost more than the parsing:
    a cut or flipped record still fails, on its length or its parse, with the file and
    byte offset named."""
    with open(path, "rb") as f:
        offset = 0
        while True:
            try:
                record = read_framed(f)
            except FramingError as e:
                if e.kind == "bad length checksum":
                    raise ValueError(f"{path}: record at byte {offset} has a bad length "
                                     f"checksum (not a TFRecord file, or corrupted)") from None
                raise ValueError(f"{path}: record at byte {offset} is cut short "
                                 f"(a truncated TFRecord file?)") from None
            if record is None:
                return
            yield offset, record[0]
            offset += 16 + len(record[0])


# ---------------------------------------------------------- protocol-buffer decoding

def _varint(buf, pos):
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def message_fields(buf):
    """(field number, wire type, value) of a message (any protobuf); LEN values as bytes."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value = buf[pos:pos + size]
            if len(value) != size:
                raise ValueError("a field runs past the end of the message")
            pos += size
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        else:
            raise ValueError(f"unknown wire type {wire}")
        yield number, wire, value


def _packed_varints(buf):
    """Packed varints -> int64 array, decoded with NumPy (one byte each for ids < 128,
    up to ten for negative int64s)."""
    b = np.frombuffer(buf, np.uint8)
    if b.size == 0:
        return np.zeros(0, np.int64)
    if b[-1] >= 0x80:
        raise ValueError("a packed int64 list ends inside a value")
    ends = np.flatnonzero(b < 0x80)
    starts = np.concatenate([[0], ends[:-1] + 1])
    if ends.size == b.size:  # every value in one byte
        return b.astype(np.int64)
    place = np.arange(b.size) - np.repeat(starts, ends - starts + 1)  # byte index in value
    parts = (b & 0x7F).astype(np.uint64) << (7 * place).astype(np.uint64)
    return np.add.reduceat(parts, starts).view(np.int64)


def _int64_list(buf):
    values = []
    for number, wire, value in message_fields(buf):
        if number == 1:
            values.append(_packed_varints(value) if wire == 2 else
                          np.array([value], np.uint64).view(np.int64))
    return np.concatenate(values) if values else np.zeros(0, np.int64)


def _float_list(buf):
    values = []
    for number, wire, value in message_fields(buf):
        if number == 1:
            values.append(np.frombuffer(value, "<f4"))
    return np.concatenate(values).astype(np.float32) if values else np.zeros(0, np.float32)


def _bytes_list(buf):
    return [bytes(value) for number, _, value in message_fields(buf) if number == 1]


def parse_example(data):
    """A serialized tf.train.Example -> {name: int64 array | float32 array | [bytes]}."""
    features = {}
    for number, _, value in message_fields(data):
        if number != 1:  # Example.features
            continue
        for entry_number, _, entry in message_fields(value):
            if entry_number != 1:  # Features.feature (map entry)
                continue
            name, feature = None, b""
            for n, _, v in message_fields(entry):
                if n == 1:
                    name = bytes(v).decode("utf-8")
                elif n == 2:
                    feature = v
            for kind, _, v in message_fields(feature):
                if kind == 1:
                    features[name] = _bytes_list(v)
                elif kind == 2:
                    features[name] = _float_list(v)
                elif kind == 3:
                    features[name] = _int64_list(v)
            features.setdefault(name, np.zeros(0, np.int64))
    return features

