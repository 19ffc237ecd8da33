"""Rows of the user's files, shared by the families that read them (classification,
multi-label, SWAG): `DataError` (bad input, naming the file and line), `RowReport`
(bad rows skipped and counted, or the first one an error) and `finish_report`, csv rows
with their line numbers (`numbered_rows`), and the rows of a .jsonl (`jsonl_rows`) or a
.tsv / .csv (`table_rows`) file with named or numbered columns.
"""

import collections
import csv
import io
import json
import sys

from bert_tf.base.files import read_text


class DataError(ValueError):
    """Bad input data; the message starts with the file and line."""


def numbered_rows(reader, path):
    """(line number, fields) of each non-empty row of a csv.reader over `path`; a row
    the csv module cannot parse is a DataError naming the file and line."""
    while True:
        start = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise DataError(f"{path}:{start}: {e}") from None
        if fields:
            yield start, fields


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
    with io.StringIO(read_text(path)) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                report.rows += 1
                report.bad(where, "malformed", f"not valid JSON ({e.msg})")
                continue
            if not isinstance(row, dict):
                report.rows += 1
                report.bad(where, "malformed", "expected a JSON object")
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


def table_rows(path, ext, text_a_column, text_b_column, label_column, has_header, report):
    """(where, text_a, text_b, raw label) of each .tsv (no quoting, GLUE's) or .csv
    (RFC 4180) row with the header's number of fields (without a header: enough for the
    named columns, 0-based indices); other rows counted and reported as malformed."""
    pair = text_b_column is not None
    with io.StringIO(read_text(path), newline="") as f:
        if ext == ".tsv":
            reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        else:
            reader = csv.reader(f)
        try:
            header = next(reader) if has_header else []
        except StopIteration:
            raise DataError(f"{path}: empty file") from None
        except csv.Error as e:
            raise DataError(f"{path}:1: {e}") from None
        columns = [_resolve_column(path, header, c, has_header)
                   for c in (text_a_column, text_b_column, label_column) if c is not None]
        width = len(header) if has_header else None
        for start, fields in numbered_rows(reader, path):
            where = f"{path}:{start}"
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
