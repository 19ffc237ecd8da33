"""TFRecord shards of tf.train.Examples read with NumPy alone, for Keras' JAX and PyTorch
backends (data.py's tf.data pipeline needs TensorFlow; a machine with only JAX or torch
has none).

A TFRecord file is a sequence of records:

    uint64 length | uint32 masked CRC-32C of length | data[length] | uint32 masked CRC of data

and each record's data is a serialized tf.train.Example: a map from feature name to a list
of int64s, floats or byte strings, in protocol-buffer wire format. The length's CRC is
checked (it is what tells a TFRecord file from any other file); the data's CRC is not,
since computing it in Python would cost more than the parsing: a cut or flipped record
still fails, on its length or its parse, with the file and byte offset named.
"""

import struct

import numpy as np


def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _crc32c_table()


def _masked_crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    # TFRecord's mask: rotate right by 15 and add a constant.
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(path):
    """Yields (offset, data) for each record of the TFRecord file at `path`; ValueError
    naming the file and byte offset for a cut or foreign record."""
    with open(path, "rb") as f:
        offset = 0
        while True:
            header = f.read(12)
            if not header:
                return
            if len(header) < 12:
                raise ValueError(f"{path}: record at byte {offset} is cut short "
                                 f"(a truncated TFRecord file?)")
            length, length_crc = struct.unpack("<QI", header)
            if _masked_crc32c(header[:8]) != length_crc:
                raise ValueError(f"{path}: record at byte {offset} has a bad length "
                                 f"checksum (not a TFRecord file, or corrupted)")
            data = f.read(length + 4)
            if len(data) < length + 4:
                raise ValueError(f"{path}: record at byte {offset} is cut short "
                                 f"(a truncated TFRecord file?)")
            yield offset, data[:length]
            offset += 12 + length + 4


# -- protocol-buffer wire format ---------------------------------------------------------

def _varint(buf, pos):
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(buf):
    """(field number, wire type, value) of a message; LEN values as bytes."""
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
    for number, wire, value in _fields(buf):
        if number == 1:
            values.append(_packed_varints(value) if wire == 2 else
                          np.array([value], np.uint64).view(np.int64))
    return np.concatenate(values) if values else np.zeros(0, np.int64)


def _float_list(buf):
    values = []
    for number, wire, value in _fields(buf):
        if number == 1:
            values.append(np.frombuffer(value, "<f4"))
    return np.concatenate(values).astype(np.float32) if values else np.zeros(0, np.float32)


def _bytes_list(buf):
    return [bytes(value) for number, _, value in _fields(buf) if number == 1]


def parse_example(data):
    """A serialized tf.train.Example -> {name: int64 array | float32 array | [bytes]}."""
    features = {}
    for number, _, value in _fields(data):
        if number != 1:  # Example.features
            continue
        for entry_number, _, entry in _fields(value):
            if entry_number != 1:  # Features.feature (map entry)
                continue
            name, feature = None, b""
            for n, _, v in _fields(entry):
                if n == 1:
                    name = bytes(v).decode("utf-8")
                elif n == 2:
                    feature = v
            for kind, _, v in _fields(feature):
                if kind == 1:
                    features[name] = _bytes_list(v)
                elif kind == 2:
                    features[name] = _float_list(v)
                elif kind == 3:
                    features[name] = _int64_list(v)
            features.setdefault(name, np.zeros(0, np.int64))
    return features

