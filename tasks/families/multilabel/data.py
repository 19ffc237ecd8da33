"""Reading multi-label data: the user's .tsv / .csv / .jsonl files (the row layouts of
tasks/rows.py: named columns, TSV without quoting, CSV with RFC 4180 quoting) with a
label column holding a label set, and the label file.

A label set is a JSON list of strings in a .jsonl row (`"labels": ["json", "os"]`), or a
string split at --label_delimiter (default ",") in any file; `[]` or an empty field is
the empty set (refused with --allow_empty_labels=false). Labels are stripped of spaces
and a label named twice in one row counts once. The label file lists the labels one per
line in class-id order; without it, the training file's labels, sorted, are the classes.
A label not among the classes, a label file with a blank line or a label twice, a
label file whose labels the training data never uses, or a label that contains the label
delimiter (the export joins a text's labels with it: "C, C++" would read back as two
labels), is one error line naming the file (and line).
"""

import csv
import dataclasses
import io
import json
import os

import numpy as np

from bert_tf.base.files import read_text
from tasks.rows import DataError, RowReport, finish_report, jsonl_rows, table_rows


@dataclasses.dataclass
class Example:
    """One row: guid "file:line" (a test file's: its 0-based row number), the texts, and
    the label set (a tuple of names in class-id order once checked; None: unlabelled)."""
    guid: str
    text_a: str
    text_b: str = None
    labels: tuple = None


def delimiter_error(where, name, delimiter):
    """The DataError of a label `name` that contains the label delimiter."""
    return DataError(f"{where}: label {name!r} contains the label delimiter {delimiter!r} "
                     f"(--label_delimiter): the run's predicted label sets are written "
                     f"joined by it, so it would read back as other labels; rename the "
                     f"label or pass another --label_delimiter")


def read_label_file(path, delimiter=None):
    """The labels of `path`, one per line, in class-id order; DataError naming the line
    of a blank or repeated label, or of one that contains `delimiter`."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: label file not found")
    with open(path, encoding="utf-8-sig") as f:
        lines = f.read().splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    labels, seen = [], {}
    for number, line in enumerate(lines, 1):
        name = line.strip()
        if not name:
            raise DataError(f"{path}:{number}: empty label (one label per line)")
        if delimiter and delimiter in name:
            raise delimiter_error(f"{path}:{number}", name, delimiter)
        if name in seen:
            raise DataError(f"{path}:{number}: label {name!r} again (first on line "
                            f"{seen[name]})")
        seen[name] = number
        labels.append(name)
    if len(labels) < 2:
        raise DataError(f"{path}: {len(labels)} label(s); multi-label classification "
                        f"needs two or more")
    return labels


def split_labels(raw, delimiter):
    """A raw label value (a JSON list, or a delimited string) -> label names, or None
    when it is neither. (A listed name may contain the delimiter: read_file refuses it.)"""
    if isinstance(raw, list):
        if not all(isinstance(name, str) for name in raw):
            return None
        names = raw
    elif isinstance(raw, str):
        names = raw.split(delimiter) if raw.strip() else []
    else:
        return None
    return list(dict.fromkeys(name.strip() for name in names if name.strip()))


def read_file(path, text_a_column, text_b_column=None, label_column=None, labels=None,
              delimiter=",", has_header=True, allow_empty=True):
    """A .tsv / .csv / .jsonl file -> examples. label_column None: a file to predict
    (no labels read). labels: the classes (None: any label, when collecting them from
    the training file). Every bad row is an error naming its file and line."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".tsv", ".csv", ".jsonl"):
        raise DataError(f"{path}: unsupported file type {ext!r}; use .tsv, .csv or .jsonl")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: file not found")
    report = RowReport(path, "error")
    rows = jsonl_rows(path, text_a_column, text_b_column, label_column, report) \
        if ext == ".jsonl" else \
        table_rows(path, ext, text_a_column, text_b_column, label_column, has_header, report)
    known = None if labels is None else set(labels)
    examples = []
    for where, text_a, text_b, raw in rows:
        report.rows += 1
        if not isinstance(text_a, str) or (text_b_column and not isinstance(text_b, str)):
            raise DataError(f"{where}: text is not a string")
        if not text_a.strip() or (text_b_column and not text_b.strip()):
            raise DataError(f"{where}: empty text")
        names = None
        if label_column is not None:
            names = split_labels(raw, delimiter)
            if names is None:
                raise DataError(f"{where}: {label_column!r} must be a list of label names "
                                f"or a string of them separated by {delimiter!r}, got "
                                f"{raw!r}")
            joined = next((name for name in names if delimiter in name), None)
            if joined is not None:
                raise delimiter_error(where, joined, delimiter)
            if not names and not allow_empty:
                raise DataError(f"{where}: no labels (--allow_empty_labels=false)")
            unknown = [name for name in names if known is not None and name not in known]
            if unknown:
                raise DataError(f"{where}: label {unknown[0]!r} is not one of the "
                                f"{len(known)} labels ({', '.join(labels)})")
        guid = where if label_column is not None else str(report.rows - 1)
        examples.append(Example(guid, text_a, text_b, None if names is None else tuple(
            sorted(names, key=labels.index) if labels else names)))
    return finish_report(report, examples)


def has_labels(path, label_column, has_header=True):
    """Whether a file to predict holds label sets too (then its predictions are scored):
    a .jsonl whose first row has the key `label_column`; a .tsv / .csv whose header names
    it, or whose first row has the field it numbers (0-based)."""
    ext = os.path.splitext(path)[1].lower()
    text = read_text(path)
    if ext == ".jsonl":
        first = next((line for line in text.splitlines() if line.strip()), None)
        try:
            row = json.loads(first) if first is not None else None
        except json.JSONDecodeError:
            return False                      # the reader names the bad row
        return isinstance(row, dict) and label_column in row
    delimiter = "\t" if ext == ".tsv" else ","
    quoting = csv.QUOTE_NONE if ext == ".tsv" else csv.QUOTE_MINIMAL
    try:
        first = next(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter,
                                quoting=quoting), [])
    except csv.Error:
        return False                          # the reader names the bad row
    if has_header and label_column in first:
        return True
    return str(label_column).isdigit() and int(label_column) < len(first)


def labels_from(examples, path, label_file=None, labels=None):
    """The classes of a training set: `labels` (a label file's) checked against it, or
    its own labels, sorted. A label-file label the data never uses is refused: a class
    without one positive example cannot be learned, nor its threshold chosen."""
    used = {name for e in examples for name in e.labels}
    if labels is None:
        found = sorted(used)
        if len(found) < 2:
            raise DataError(f"{path}: {len(found)} distinct label(s); multi-label "
                            f"classification needs two or more")
        return found
    unused = [name for name in labels if name not in used]
    if unused:
        raise DataError(f"{label_file}: label {unused[0]!r} is not in any row of {path} "
                        f"({len(unused)} such label(s)); the label file and the data "
                        f"disagree")
    return labels


def multi_hot(examples, labels):
    """float32 [N, K]: 1 where example n has label k (zeros for unlabelled examples)."""
    index = {name: k for k, name in enumerate(labels)}
    targets = np.zeros((len(examples), len(labels)), np.float32)
    for n, example in enumerate(examples):
        for name in example.labels or ():
            targets[n, index[name]] = 1.0
    return targets
