"""The records of the user's text files: one reader per format for the whole project
(export.batch_predict, and the fine-tuning families' readers through tasks/rows.py and
GLUE's and SWAG's). TF-free.

- `.txt`: a record a line (one text).
- `.jsonl`: a record a line (JSON Lines: one JSON value a line; `json_object` reads it).
- `.tsv`: a record a line, cells split at tabs, no quoting (GLUE's convention).
- `.csv`: a record as RFC 4180 says (Python's csv module, its default dialect): a quoted
  cell may hold commas, doubled quotes and line ends, so one record may span lines.

Only "\\n" ends a line ("\\r" before it is dropped), as google's readline() loops read:
a text may hold other Unicode line breaks (U+2028, U+0085, a lone "\\r"). A UTF-8 BOM
at the file's start is dropped.

Each record says where it starts, its first physical line (1-based) and its byte offset,
and where it ends: a reader started at a record's offset with its line number (a shard
of batch_predict, on either engine) reads the same records as one started at the file's
start. Bytes that are not UTF-8 are kept as surrogates (`surrogateescape`) so a record
still has its cells; the caller decides what such a record is (batch_predict rejects it,
the families refuse the file before reading).
"""

import csv
import json
import typing

FORMATS = (".txt", ".jsonl", ".tsv", ".csv")

# A cell may be as long as a text: the csv module's default limit (128 KiB) would make a
# long cell an error of the file, not a text the caller measures (batch_predict rejects
# one longer than the export takes).
_FIELD_LIMIT = 2 ** 31 - 1


class RecordError(ValueError):
    """The file cannot be cut into records (the message names the file and line)."""


class Record(typing.NamedTuple):
    line: int       # the physical line (1-based) where the record starts
    offset: int     # the byte offset where it starts
    end: int        # the byte offset after it: where the next record starts
    lines: int      # the physical lines it spans
    raw: bytes      # its bytes, its last line end removed
    value: object   # .txt / .jsonl: its text; .tsv / .csv: its cells ([] for a blank line)
    error: str      # why its cells cannot be read (the csv module's reason), else None


def _text(raw, first):
    """A line's bytes -> str (not UTF-8 kept as surrogates), the BOM of the file's first
    line dropped."""
    text = raw.decode("utf-8", "surrogateescape")
    return text.removeprefix("\ufeff") if first else text


def _strip_end(raw):
    return raw.removesuffix(b"\n").removesuffix(b"\r")


def tsv_cells(text):
    """A .tsv record's text -> its cells (split at tabs, no quoting; [] for a blank
    line)."""
    return text.split("\t") if text else []


def records(f, fmt, path, offset=0, line=1, count=None):
    """The records of the binary file object `f` in the format `fmt` (FORMATS), from the
    record that starts at byte `offset` on line `line` (`count` of them, else to the
    end). RecordError naming `path` and the line where a quoted .csv cell opens that is
    never closed (every line after it would be read as its text)."""
    if offset:
        f.seek(offset)
    taken = 0
    if fmt != ".csv":
        for raw in f:
            if count is not None and taken >= count:
                return
            body = _strip_end(raw)
            text = _text(body, offset == 0)
            yield Record(line, offset, offset + len(raw), 1, body,
                         tsv_cells(text) if fmt == ".tsv" else text, None)
            line, offset, taken = line + 1, offset + len(raw), taken + 1
        return
    csv.field_size_limit(max(csv.field_size_limit(), _FIELD_LIMIT))
    pending = []                    # the lines the csv reader took for this record
    state = {"past_end": False}

    def lines():
        for raw in f:
            pending.append(raw)
            yield _text(raw, offset == 0 and len(pending) == 1 and not taken)
        # The reader asks past the end only in the middle of a record: in a quoted cell.
        state["past_end"] = bool(pending)

    reader = csv.reader(lines())
    while count is None or taken < count:
        pending.clear()
        error = None
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            cells, error = None, str(e)
            if "new-line character" in error:
                error = "a carriage return (\\r) inside an unquoted cell; quote the cell"
        if state["past_end"]:
            raise RecordError(f"{path}:{line}: a quoted cell of the record starting here "
                              f"is never closed (a '\"' without its pair): every line "
                              f"after it would be read as its text; close or double it")
        size = sum(len(r) for r in pending)
        yield Record(line, offset, offset + size, len(pending),
                     _strip_end(b"".join(pending)), cells, error)
        line, offset, taken = line + len(pending), offset + size, taken + 1


def read_records(path, fmt, open_read=None, **kwargs):
    """`records` of the file `path` (opened by `open_read`, default `open(path, "rb")`)."""
    with (open_read(path) if open_read else open(path, "rb")) as f:
        yield from records(f, fmt, path, **kwargs)


def json_object(text):
    """A .jsonl record's text -> its object; ValueError saying why it is not one (not
    JSON: the parser's reason; another JSON value)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg})") from None
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    return value
