"""GLUE and the user's own sentence (pair) classification files: what each GLUE task's
files look like (`GLUE_TASKS`), and readers for the official TSVs, prepared
tensorflow-datasets `glue/*` directories and custom .tsv/.csv/.jsonl files, with
bad-row reports (task.py trains on what they return; the rows and reports they share with
the other families' readers are tasks/rows.py's).
"""

import dataclasses
import json
import math
import os

# The rows every family's reader shares, as this module's names too.
from tasks.rows import (DataError, RowReport, file_records, finish_report,  # noqa: F401
                        jsonl_rows, table_rows)


# ----------------------------------------------------------------------------- tasks

@dataclasses.dataclass(frozen=True)
class GlueTask:
    """Where one GLUE task's data lives and how its files are laid out.

    Column fields are header names of the official TSVs. `labels` are the label strings
    as written in the files, in class-id order; () means regression. `headerless` is for
    CoLA's train/dev files, the only ones without a header row:
    (number of fields, text_a index, label index).
    """
    name: str
    directory: str                 # GLUE's folder name, also the submission file's stem
    labels: tuple
    text_a: str
    text_b: str = None
    label: str = "label"
    id_column: str = "index"       # in the test files
    dev_splits: tuple = ("dev",)
    test_splits: tuple = ("test",)
    tfds_features: tuple = ()      # tfds glue/* feature names of text_a (, text_b)
    headerless: tuple = None

    @property
    def regression(self):
        return not self.labels

    @property
    def pair(self):
        return self.text_b is not None

    def submission_name(self, split):
        """GLUE's file name for the predictions of a test split."""
        suffix = {"test": "", "test_matched": "-m", "test_mismatched": "-mm"}[split]
        return f"{self.directory}{suffix}.tsv"


_BINARY = ("0", "1")
GLUE_TASKS = {t.name: t for t in (
    GlueTask("cola", "CoLA", _BINARY, "sentence", tfds_features=("sentence",),
             headerless=(4, 3, 1)),
    GlueTask("sst2", "SST-2", _BINARY, "sentence", tfds_features=("sentence",)),
    GlueTask("mrpc", "MRPC", _BINARY, "#1 String", "#2 String", label="Quality",
             tfds_features=("sentence1", "sentence2")),
    GlueTask("stsb", "STS-B", (), "sentence1", "sentence2", label="score",
             tfds_features=("sentence1", "sentence2")),
    GlueTask("qqp", "QQP", _BINARY, "question1", "question2", label="is_duplicate",
             id_column="id", tfds_features=("question1", "question2")),
    GlueTask("mnli", "MNLI", ("contradiction", "entailment", "neutral"), "sentence1",
             "sentence2", label="gold_label", dev_splits=("dev_matched", "dev_mismatched"),
             test_splits=("test_matched", "test_mismatched"),
             tfds_features=("premise", "hypothesis")),
    GlueTask("qnli", "QNLI", ("entailment", "not_entailment"), "question", "sentence",
             tfds_features=("question", "sentence")),
    GlueTask("rte", "RTE", ("entailment", "not_entailment"), "sentence1", "sentence2",
             tfds_features=("sentence1", "sentence2")),
    GlueTask("wnli", "WNLI", _BINARY, "sentence1", "sentence2",
             tfds_features=("sentence1", "sentence2")),
)}
TASK_NAMES = tuple(GLUE_TASKS) + ("custom",)

# Our split names -> tensorflow-datasets' (glue/mnli names its validation splits
# validation_matched / validation_mismatched).
TFDS_SPLITS = {"train": "train", "dev": "validation", "dev_matched": "validation_matched",
               "dev_mismatched": "validation_mismatched", "test": "test",
               "test_matched": "test_matched", "test_mismatched": "test_mismatched"}


# ----------------------------------------------------------------------------- reading

@dataclasses.dataclass
class Example:
    """One row. label: the label string (classification), a float (regression) or None
    (test files). guid: the id GLUE's submission wants (test files) or "file:line"."""
    guid: str
    text_a: str
    text_b: str = None
    label: object = None


def _tsv_lines(path):
    """(line number, fields) for each non-empty line of a tab-separated file without
    quoting (tasks/rows.py's `file_records`: only "\\n" ends a line, "\\r" before it
    dropped; GLUE's texts may hold other line-break characters that must not split a
    row)."""
    for record in file_records(path, ".tsv"):
        yield record.line, record.value


def _column_index(path, header, name):
    if name not in header:
        raise DataError(f"{path}:1: no column {name!r} in the header "
                        f"({', '.join(repr(h) for h in header)})")
    return header.index(name)


def _label_value(raw, labels, regression, where, report):
    """The label of a row, or None after reporting it bad."""
    if regression:
        try:
            value = float(raw)
        except ValueError:
            value = float("nan")
        if not math.isfinite(value):
            report.bad(where, "unknown_label", f"label {raw!r} is not a number")
            return None
        return value
    if labels is not None and raw not in labels:
        report.bad(where, "unknown_label",
                   f"unknown label {raw!r} (labels: {', '.join(labels)})")
        return None
    return raw


def _check_texts(text_a, text_b, pair, where, report):
    if not text_a.strip() or (pair and not (text_b or "").strip()):
        report.bad(where, "empty_text", "empty text" + (
            " (text_a)" if not text_a.strip() else " (text_b)"))
        return False
    return True


def read_glue_tsv(path, task, with_labels=True, policy="skip"):
    """An official GLUE TSV -> (examples, RowReport). with_labels=False for test files
    (their first column, `task.id_column`, becomes the guid)."""
    report = RowReport(path, policy)
    lines = _tsv_lines(path)
    if with_labels and task.headerless:
        width, a, y = task.headerless
        b, id_index = None, None
    else:
        try:
            _, header = next(lines)
        except StopIteration:
            raise DataError(f"{path}: empty file") from None
        width = len(header)
        a = _column_index(path, header, task.text_a)
        b = _column_index(path, header, task.text_b) if task.pair else None
        y = _column_index(path, header, task.label) if with_labels else None
        id_index = None if with_labels else _column_index(path, header, task.id_column)
    examples = []
    for number, fields in lines:
        report.rows += 1
        where = f"{path}:{number}"
        if len(fields) != width:
            report.bad(where, "malformed",
                       f"expected {width} tab-separated fields, found {len(fields)}")
            continue
        text_a, text_b = fields[a], fields[b] if b is not None else None
        if not _check_texts(text_a, text_b, task.pair, where, report):
            continue
        label = None
        if with_labels:
            label = _label_value(fields[y], task.labels or None, task.regression, where,
                                 report)
            if label is None:
                continue
        guid = where if with_labels else fields[id_index]
        examples.append(Example(guid, text_a, text_b, label))
    return examples, report


def glue_split_path(data_dir, task, split):
    """data_dir/<split>.tsv; data_dir may also be the GLUE root holding task folders."""
    for directory in (data_dir, os.path.join(data_dir, task.directory)):
        path = os.path.join(directory, f"{split}.tsv")
        if os.path.exists(path):
            return path
    return os.path.join(data_dir, f"{split}.tsv")


def tfds_dataset_dir(tfds_data_dir, task):
    """The prepared glue/<task> directory (highest version) or a clear error: this never
    downloads or prepares anything."""
    root = os.path.join(os.path.expanduser(tfds_data_dir), "glue", task.name)
    versions = []
    if os.path.isdir(root):
        for v in os.listdir(root):
            if os.path.exists(os.path.join(root, v, "dataset_info.json")):
                try:
                    versions.append((tuple(int(p) for p in v.split(".")), v))
                except ValueError:
                    continue
    if not versions:
        raise DataError(
            f"{root}: glue/{task.name} is not prepared there (no <version>/"
            f"dataset_info.json); this command never downloads: prepare it with "
            f"`tfds build glue/{task.name} --data_dir {tfds_data_dir}` or pass --data_dir "
            f"with GLUE's TSV files")
    return os.path.join(root, max(versions)[1])


def read_glue_tfds(directory, task, split, with_labels=True, policy="skip"):
    """A prepared tfds glue/<task> split -> (examples, RowReport). The guid of test
    examples is tfds' `idx` (the row index of GLUE's test file, as the submission
    wants); tfds' class ids are mapped to the TSV label strings."""
    import tensorflow_datasets as tfds
    builder = tfds.builder_from_directory(directory)
    tfds_split = TFDS_SPLITS[split]
    if tfds_split not in builder.info.splits:
        raise DataError(f"{directory}: no split {tfds_split!r} "
                        f"(has {', '.join(sorted(builder.info.splits))})")
    if not task.regression:
        names = builder.info.features["label"].names
        # glue/cola etc. name their classes ("unacceptable", "acceptable") where the TSVs
        # write 0/1 in the same order; glue/mnli, qnli and rte use the TSV strings.
        to_label = [name if name in task.labels else task.labels[i]
                    for i, name in enumerate(names)]
    source = f"{directory}[{tfds_split}]"
    report = RowReport(source, policy)
    examples = []
    for row in tfds.as_numpy(builder.as_dataset(split=tfds_split, shuffle_files=False)):
        report.rows += 1
        where = f"{source} idx {int(row['idx'])}"
        text_a = row[task.tfds_features[0]].decode("utf-8")
        text_b = row[task.tfds_features[1]].decode("utf-8") if task.pair else None
        if not _check_texts(text_a, text_b, task.pair, where, report):
            continue
        label = None
        if with_labels:
            raw = row["label"]
            if task.regression:
                label = float(raw)
            elif 0 <= int(raw) < len(to_label):
                label = to_label[int(raw)]
            else:
                report.bad(where, "unknown_label", f"label id {int(raw)} (no label)")
                continue
        guid = str(int(row["idx"])) if not with_labels else where
        examples.append(Example(guid, text_a, text_b, label))
    return examples, report


def _label_kind(value):
    """How a JSON label is written: text, a whole number, a decimal number or true/false."""
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "whole number"
    if isinstance(value, float):
        return "decimal number"
    return "string" if isinstance(value, str) else type(value).__name__


def _check_label_kind(value, where, first):
    """DataError when a class label is written in another JSON kind than an earlier row's
    (`first`: kind -> (where, value), filled here). The names are compared as text, so
    1, "1", 1.0 and true would be three or four classes of one meaning; which one the
    file meant is for its writer to say."""
    kind = _label_kind(value)
    first.setdefault(kind, (where, value))
    other = next((k for k in first if k != kind), None)
    if other is not None:
        there, seen = first[other]
        raise DataError(f"{where}: label {json.dumps(value)} ({kind}) where line "
                        f"{there.rsplit(':', 1)[-1]} has {json.dumps(seen)} ({other}): "
                        f"write every label of the file the same way")


def read_custom_file(path, text_a_column, text_b_column=None, label_column=None,
                     labels=None, regression=False, has_header=True, policy="skip"):
    """A user's .tsv / .csv / .jsonl file -> (examples, RowReport).

    TSV: tab-separated, no quoting (GLUE's convention); CSV: standard quoting (RFC 4180);
    JSONL: one object per line, columns are keys. label_column None: no labels (test
    file). labels: the allowed label strings (None: any, e.g. when reading the training
    file to collect them). Test-file guids are the 0-based row number. A JSONL file whose
    labels are collected (labels None, classification) and mix JSON kinds (1, "1", 1.0,
    true) is refused at the first row that differs; against given labels, a label not
    among them is an unknown label.
    """
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".tsv", ".csv", ".jsonl"):
        raise DataError(f"{path}: unsupported file type {ext!r}; use .tsv, .csv or .jsonl")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: file not found")
    report = RowReport(path, policy)
    pair = text_b_column is not None
    examples = []
    first_spelling = {}     # JSON label kind -> (line, the label as written)

    def add(where, text_a, text_b, raw_label):
        report.rows += 1
        if not isinstance(text_a, str) or (pair and not isinstance(text_b, str)):
            report.bad(where, "malformed", "text is not a string")
            return
        if not _check_texts(text_a, text_b, pair, where, report):
            return
        label = None
        if label_column is not None:
            if raw_label is None:
                report.bad(where, "malformed", f"no label ({label_column!r})")
                return
            if labels is None and not regression:
                # The file's labels become the class names: one meaning, one name.
                _check_label_kind(raw_label, where, first_spelling)
            if isinstance(raw_label, bool):
                raw_label = str(raw_label).lower()    # JSON true/false as written
            label = _label_value(str(raw_label), labels, regression, where, report)
            if label is None:
                return
        # Test rows are named by their 0-based position among the file's rows.
        guid = where if label_column is not None else str(report.rows - 1)
        examples.append(Example(guid, text_a, text_b, label))

    rows = jsonl_rows(path, text_a_column, text_b_column, label_column, report) \
        if ext == ".jsonl" else \
        table_rows(path, ext, text_a_column, text_b_column, label_column, has_header, report)
    for where, text_a, text_b, raw_label in rows:
        add(where, text_a, text_b, raw_label)
    return examples, report


def label_names_from(examples):
    """The label strings of a training set, sorted (numerically when all are integers),
    so the class ids do not depend on row order."""
    names = {e.label for e in examples}
    if all(n.lstrip("-").isdigit() for n in names):
        return sorted(names, key=int)
    return sorted(names)
