"""Rows of the user's files, shared by the families that read them (classification,
multi-label, SWAG): `DataError` (bad input, naming the file and line), `RowReport`
(bad rows skipped and counted, or the first one an error) and `finish_report`, a file's
records with their line numbers (`file_records`: the project's one reader per format,
bert_tf/base/text_records.py, so a quoted .csv cell may span lines), and the rows of a
.jsonl (`jsonl_rows`) or a .tsv / .csv (`table_rows`) file with named or numbered columns.
"""

import collections
import io
import sys

from bert_tf.base.files import decode_text
from bert_tf.base.text_records import RecordError, json_object, records


class DataError(ValueError):
    """Bad input data; the message starts with the file and line."""


def file_records(path, fmt):
    """The records of `path` in the format `fmt` (".jsonl", ".tsv", ".csv"), blank ones
    left out: bert_tf/base/text_records.py's reader, after the whole file was checked to
    be UTF-8 text (files.decode_text: the first byte that is not, or a NUL byte, is an
    error naming its line). A record whose cells the csv module cannot read has its
    `error`; a quote never closed is a DataError naming the line where it opens."""
    with open(path, "rb") as f:
        data = f.read()
    decode_text(data, path)
    try:
        for record in records(io.BytesIO(data), fmt, path):
            if record.value or record.error:
                yield record
    except RecordError as e:
        raise DataError(str(e)) from None


class RowReport:
    """Counts the rows a reader skipped, by reason, keeping the first place of each.

    policy "skip": count and go on; "error": raise DataError at the first bad row.
    """

    def __init__(self, source, policy="skip"):
        if policy not in ("skip", "error"):
            raise ValueError(f"--bad_rows must be skip or error, got {policy!r}")
        self.source, self.policy = source, policy
        self.rows = 0
        self.skipped = collections.Counter()
        self.first = {}

    def bad(self, where, reason, detail):
        """where: "file:line"; reason: a short key (malformed, empty_text,
        unknown_label); detail: what is wrong, for the message."""
        message = f"{where}: {detail}"
        if self.policy == "error":
            raise DataError(message)
        self.skipped[reason] += 1
        self.first.setdefault(reason, message)

    def summary(self):
        """One line: rows kept and, per reason, how many were skipped and the first."""
        total = sum(self.skipped.values())
        line = f"{self.source}: {self.rows - total} of {self.rows} rows used"
        if total:
            line += "; skipped " + "; ".join(
                f"{n} {reason} (first: {self.first[reason]})"
                for reason, n in sorted(self.skipped.items()))
        return line


def finish_report(report, examples):
    """Prints the report of a file when rows were skipped; an error when none is left."""
    if report.skipped:
        print(report.summary(), file=sys.stderr, flush=True)
    if not examples:
        raise DataError(f"{report.source}: no usable rows ({report.summary()})")
    return examples


def jsonl_rows(path, text_a_column, text_b_column, label_column, report):
    """(where, text_a, text_b, raw label) of each JSON-lines row that has the text keys
    (text_b, label: None where no column is named); blank lines skipped, other rows
    counted and reported as malformed."""
    pair = text_b_column is not None
    for record in file_records(path, ".jsonl"):
        if not record.value.strip():
            continue
        where = f"{path}:{record.line}"
        try:
            row = json_object(record.value)
        except ValueError as e:
            report.rows += 1
            report.bad(where, "malformed", str(e))
            continue
        missing = [c for c in (text_a_column, text_b_column) if c is not None
                   and c not in row]
        if missing:
            report.rows += 1
            report.bad(where, "malformed", f"no key {missing[0]!r}")
            continue
        yield (where, row[text_a_column], row.get(text_b_column) if pair else None,
               row.get(label_column) if label_column is not None else None)


def _resolve_column(path, header, column, has_header):
    """A --*_column value: a header name, or a 0-based index."""
    if has_header and column in header:
        return header.index(column)
    if str(column).lstrip("-").isdigit():
        return int(column)
    raise DataError(f"{path}:1: no column {column!r} in the header "
                    f"({', '.join(repr(h) for h in header)})")


def header_cells(rows, path):
    """The cells of the first record of `rows` (file_records of `path`), its header;
    DataError for an empty file or a header the csv rules cannot read."""
    first = next(rows, None)
    if first is None:
        raise DataError(f"{path}: empty file")
    if first.error:
        raise DataError(f"{path}:{first.line}: {first.error}")
    return first.value


def table_rows(path, ext, text_a_column, text_b_column, label_column, has_header, report):
    """(where, text_a, text_b, raw label) of each .tsv (no quoting, GLUE's) or .csv
    (RFC 4180: a quoted cell may span lines; `where` names the line a row starts on) row
    with the header's number of fields (without a header: enough for the named columns,
    0-based indices); other rows counted and reported as malformed."""
    pair = text_b_column is not None
    rows = file_records(path, ext)
    header = header_cells(rows, path) if has_header else []
    columns = [_resolve_column(path, header, c, has_header)
               for c in (text_a_column, text_b_column, label_column) if c is not None]
    width = len(header) if has_header else None
    for record in rows:
        where = f"{path}:{record.line}"
        fields = record.value
        if record.error:
            report.rows += 1
            report.bad(where, "malformed", record.error)
            continue
        if (width is not None and len(fields) != width) or \
                max(columns) >= len(fields):
            report.rows += 1
            report.bad(where, "malformed",
                       f"expected {width or max(columns) + 1} fields, found "
                       f"{len(fields)}")
            continue
        values = iter(columns)
        text_a = fields[next(values)]
        text_b = fields[next(values)] if pair else None
        raw_label = fields[next(values)] if label_column is not None else None
        yield where, text_a, text_b, raw_label
