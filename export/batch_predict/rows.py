"""A record of an input file -> a row of the export's inputs, or the reason it cannot be
predicted; a shard's records, read from where the plan says it starts."""

import os

from bert_tf.base.text_records import json_object, read_records
from bert_tf.data import storage
from bert_tf.data.errors import InputError


class BadRow(ValueError):
    """A row that cannot be predicted (its reason; the caller adds file and line)."""


def needed_columns(inputs):
    """The header columns (.tsv/.csv) or JSON keys (.jsonl) the export's inputs take:
    `endings0`, `endings1`, ... for a list input (JSON: one key holding the list)."""
    return [name if size is None else f"{name}{i}" for name, size in inputs.items()
            for i in range(size or 1)]


def format_of(path):
    return os.path.splitext(path)[1].lower()


def parse_row(record, fmt, inputs, header, max_bytes):
    """One record (bert_tf/base/text_records.py) -> {input: str or [C strs]}, or None for
    a record that holds no row (a blank line of a .jsonl/.tsv/.csv); BadRow why it cannot
    be predicted."""
    try:
        record.raw.decode("utf-8")
    except UnicodeDecodeError as e:
        where = "line" if record.lines == 1 else "record"
        raise BadRow(f"not UTF-8 (byte {e.start + 1} of the {where})") from None
    if fmt == ".txt":
        (name, size), = inputs.items()
        row = {name: record.value}
    elif fmt == ".jsonl":
        if not record.value.strip():
            return None
        try:
            value = json_object(record.value)
        except ValueError as e:
            raise BadRow(str(e)) from None
        row = {}
        for name, size in inputs.items():
            if name not in value:
                raise BadRow(f"no {name!r} (the export's inputs: {', '.join(inputs)})")
            row[name] = value[name]
    else:
        if record.error:
            raise BadRow(record.error)
        fields = record.value
        if not fields:
            return None
        if len(fields) != len(header):
            raise BadRow(f"{len(fields)} columns, the header has {len(header)}")
        cells = dict(zip(header, fields))
        row = {name: cells[name] if size is None else
               [cells[f"{name}{i}"] for i in range(size)] for name, size in inputs.items()}
    for name, size in inputs.items():
        value = row[name]
        texts = [value] if size is None else value
        if size is not None and (not isinstance(value, list) or len(value) != size):
            raise BadRow(f"{name}: expected a list of {size} texts")
        for text in texts:
            if not isinstance(text, str):
                raise BadRow(f"{name}: expected text, got {type(text).__name__}")
            if len(text.encode("utf-8", "surrogatepass")) > max_bytes:
                raise BadRow(f"{name}: {len(text.encode('utf-8', 'surrogatepass')):,} bytes, "
                             f"more than the export's max_text_bytes ({max_bytes:,})")
    return row


def read_row(record, fmt, inputs, header, max_bytes):
    """A record -> its row, or None for a record that holds no row (the header of a
    .tsv/.csv, a blank line between rows); BadRow why it cannot be predicted."""
    if header is not None and record.offset == 0:
        return None
    return parse_row(record, fmt, inputs, header, max_bytes)


def job_records(plan, job):
    """The records of a shard's job: its file read where it is now (`plan["paths"]`: the
    plan names each input by the spelling the job started with), from the record the
    plan says it starts at (its byte offset and line), so a shard is read from there, not
    from the file's start."""
    label = job["file"]
    return read_records(plan["paths"][label], format_of(label), open_read=storage.open_read,
                        offset=job["offset"], line=job["line"],
                        count=job["end"] - job["first"])


def job_rows(plan, job):
    """The records of a job that may hold a row: its records, less a .tsv/.csv header."""
    header = plan["headers"].get(job["file"])
    return job["end"] - job["first"] - (1 if header is not None and job["first"] == 0
                                        else 0)


def check_unchanged(plan, label):
    """InputError when the input `label` is not the file the plan fingerprinted (its size
    or modification time changed since): its rows would not be the planned ones."""
    path = plan["paths"][label]
    if [storage.getsize(path), storage.mtime_ns(path)] != plan["stats"][label]:
        raise InputError(f"--input_file: {label} changed while the job read it; the shards "
                         f"written before are of its earlier content: predict into another "
                         f"--output_file, or pass --overwrite to predict it again")
