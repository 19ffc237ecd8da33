"""GLUE and user-defined sentence (pair) classification and regression: readers, in-graph
preprocessing, model, metrics, CLI.

    python -m tasks.glue --task_name=mrpc --data_dir=glue_data/MRPC \\
        --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt --output_dir=runs/mrpc \\
        --do_train --do_eval --do_predict
    python -m tasks.glue --task_name=sst2 --tfds_data_dir=~/tensorflow_datasets ...
    python -m tasks.glue --task_name=custom --train_file=train.csv --dev_file=dev.csv \\
        --test_file=test.jsonl --text_a_column=review --label_column=stars ...

Data: the official GLUE TSV files (train.tsv, dev.tsv / dev_matched.tsv +
dev_mismatched.tsv for MNLI, test*.tsv without labels), read by header name, as GLUE
ships them (tab-separated, no quoting: the texts contain bare quote characters); or a
tensorflow-datasets `glue/*` dataset already prepared under --tfds_data_dir (this command
never downloads); or, with --task_name=custom, the user's .tsv/.csv/.jsonl files with
named columns and label names taken from the training file or --labels.

Bad rows (wrong number of fields, empty text, unknown label) are skipped, counted and
reported per file with the first place each problem occurred (--bad_rows=skip, the
default), or stop the run with one line naming file and line (--bad_rows=error).

Model: dropout + dense(K) on the pooled [CLS] output, cross-entropy; STS-B (and
--regression) is one output trained with mean squared error. Metrics are GLUE's own per
task (tasks/metrics.py). --do_predict writes GLUE's submission file (e.g. MNLI-m.tsv:
"index<TAB>prediction") and `<split>_results.tsv` with the class probabilities.

What the run leaves in --output_dir (tasks/task_dir.py): glue_config.json (task, label
names, text inputs, sequence length), bert_config.json, vocab.txt, best/last weights.
`load_classifier(output_dir)` rebuilds the model and `TextClassifierPreprocessor` the
raw-text -> inputs step from them.
"""

import collections
import csv
import dataclasses
import json
import math
import os
import sys

import numpy as np
import tensorflow as tf

from bert_tf import batching
from bert_tf.flags import run_command
from tasks import common, metrics, task_dir

TASK = "glue"
INPUT_NAMES = ("token_ids", "segment_ids", "padding_mask")


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


def _tsv_lines(path):
    """(line number, fields) for each non-empty line of a tab-separated file without
    quoting. Only "\\n" ends a line ("\\r" before it is dropped): GLUE's texts may hold
    other line-break characters that must not split a row."""
    try:
        f = open(path, encoding="utf-8-sig", newline="\n")
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: file not found") from None
    with f:
        try:
            for number, line in enumerate(f, 1):
                line = line.rstrip("\n").rstrip("\r")
                if line:
                    yield number, line.split("\t")
        except UnicodeDecodeError as e:
            raise DataError(f"{path}:{number + 1}: not UTF-8 ({e.reason})") from None


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


def _resolve_column(path, header, column, has_header):
    """A --*_column value: a header name, or a 0-based index."""
    if has_header and column in header:
        return header.index(column)
    if str(column).lstrip("-").isdigit():
        return int(column)
    raise DataError(f"{path}:1: no column {column!r} in the header "
                    f"({', '.join(repr(h) for h in header)})")


def read_custom_file(path, text_a_column, text_b_column=None, label_column=None,
                     labels=None, regression=False, has_header=True, policy="skip"):
    """A user's .tsv / .csv / .jsonl file -> (examples, RowReport).

    TSV: tab-separated, no quoting (GLUE's convention); CSV: standard quoting (RFC 4180);
    JSONL: one object per line, columns are keys. label_column None: no labels (test
    file). labels: the allowed label strings (None: any, e.g. when reading the training
    file to collect them). Test-file guids are the 0-based row number.
    """
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".tsv", ".csv", ".jsonl"):
        raise DataError(f"{path}: unsupported file type {ext!r}; use .tsv, .csv or .jsonl")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: file not found")
    report = RowReport(path, policy)
    pair = text_b_column is not None
    examples = []

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
            if isinstance(raw_label, bool):
                raw_label = str(raw_label).lower()    # JSON true/false as written
            label = _label_value(str(raw_label), labels, regression, where, report)
            if label is None:
                return
        # Test rows are named by their 0-based position among the file's rows.
        guid = where if label_column is not None else str(report.rows - 1)
        examples.append(Example(guid, text_a, text_b, label))

    if ext == ".jsonl":
        with open(path, encoding="utf-8-sig") as f:
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
                add(where, row[text_a_column], row.get(text_b_column) if pair else None,
                    row.get(label_column) if label_column is not None else None)
        return examples, report

    with open(path, encoding="utf-8-sig", newline="") as f:
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
            add(where, text_a, text_b, raw_label)
    return examples, report


def finish_report(report, examples):
    """Prints the report of a file when rows were skipped; an error when none is left."""
    if report.skipped:
        print(report.summary(), file=sys.stderr, flush=True)
    if not examples:
        raise DataError(f"{report.source}: no usable rows ({report.summary()})")
    return examples


def label_names_from(examples):
    """The label strings of a training set, sorted (numerically when all are integers),
    so the class ids do not depend on row order."""
    names = {e.label for e in examples}
    if all(n.lstrip("-").isdigit() for n in names):
        return sorted(names, key=int)
    return sorted(names)


# ----------------------------------------------------------------------------- inputs

class TextClassifierPreprocessor(tf.Module):
    """Raw text -> the classifier's inputs, in TensorFlow ops only (tf.data maps,
    tf.function, SavedModels; a tf.Module, so a SavedModel holding it tracks the
    tokenizer and its vocab asset):

        preprocessor = TextClassifierPreprocessor(tokenizer, seq_length=128)
        inputs = preprocessor(text_a)            # tf.string [batch]
        inputs = preprocessor(text_a, text_b)    # pair tasks
        # {token_ids, segment_ids, padding_mask}: int32 [batch, seq_length]

    It is the tokenizer (google's FullTokenizer ids) followed by the packer (google's
    fine-tuning truncation), so an exported model that composes the same two objects
    produces the same inputs.
    """

    def __init__(self, tokenizer, seq_length, name=None):
        from bert_tf.packing import BertPacker
        super().__init__(name=name)
        self.tokenizer = tokenizer
        self.packer = BertPacker.from_tokenizer(tokenizer, seq_length)

    def __call__(self, text_a, text_b=None):
        segment_b = None if text_b is None else self.tokenizer(text_b)
        return self.packer(self.tokenizer(text_a), segment_b)


def encode_labels(examples, labels):
    """Label strings -> int32 class ids [N] (labels: class-id order); regression
    (labels None) -> float32 scores [N]; unlabelled -> zeros."""
    if any(e.label is None for e in examples):
        return np.zeros(len(examples), np.float32 if labels is None else np.int32)
    if labels is None:
        return np.asarray([e.label for e in examples], np.float32)
    index = {name: i for i, name in enumerate(labels)}
    return np.asarray([index[e.label] for e in examples], np.int32)


def make_dataset(examples, preprocessor, batch_size, pair, label_ids=None,
                 training=False, seed=0, output_name="logits", length_batching="off",
                 repeat=True):
    """tf.data of (inputs, label[, weight]) batches, tokenized in the pipeline.

    training: shuffled, repeated, full batches of (inputs, label).
    otherwise: in order, padded with empty examples of weight 0 to whole batches, as
    google's run_classifier pads for TPUs: every batch has one shape, so a jit-compiled
    model compiles once; yields (inputs, label, weight) and the padded tail is sliced
    off predictions (`predict_outputs`). Labels are keyed by the model's output_name
    ("logits", or "score" for regression). length_batching: a bert_tf.batching mode.
    repeat=False (training): one pass, each example exactly once (length buckets flush
    their last, smaller batches at the end).
    """
    n = len(examples)
    labels = np.zeros(n, np.int32) if label_ids is None else np.asarray(label_ids)
    texts_a = [e.text_a for e in examples]
    texts_b = [e.text_b or "" for e in examples] if pair else None
    weights = np.ones(n, np.float32)
    if not training:
        pad = -n % batch_size
        # Keras averages a loss over batch slots, padding included; weighting the real
        # examples by slots / n makes its val_loss the mean over real examples. (The
        # count-based metrics are ratios, unchanged by a common factor.)
        weights *= (n + pad) / n
        texts_a += [""] * pad
        texts_b = texts_b + [""] * pad if pair else None
        labels = np.concatenate([labels, np.zeros(pad, labels.dtype)])
        weights = np.concatenate([weights, np.zeros(pad, np.float32)])
    texts = {"text_a": tf.constant(texts_a, tf.string)}
    if pair:
        texts["text_b"] = tf.constant(texts_b, tf.string)
    ds = tf.data.Dataset.from_tensor_slices((texts, labels, weights))
    if training:
        ds = ds.shuffle(n, seed=seed, reshuffle_each_iteration=True)
        ds = ds.repeat() if repeat else ds
    ds = ds.batch(batch_size, drop_remainder=repeat)

    def pack(texts, label, weight):
        inputs = preprocessor(texts["text_a"], texts.get("text_b"))
        label = {output_name: label}
        return (inputs, label) if training else (inputs, label, {output_name: weight})
    ds = ds.map(pack, num_parallel_calls=tf.data.AUTOTUNE)
    ds = batching.rebatch(ds, batch_size, length_batching, preprocessor.packer.seq_length,
                          drop_remainder=repeat, seed=seed)
    return ds.prefetch(tf.data.AUTOTUNE)


# ----------------------------------------------------------------------------- model

def encoder_policy(encoder):
    """The dtype policy the encoder computes in. Read from one of its layers: a Keras
    functional model ignores its own dtype argument, so `encoder.dtype_policy` says
    float32 even when every layer runs mixed_bfloat16."""
    return encoder.pooler.dtype_policy


def loss_scaled(model, optimizer):
    """The optimizer, wrapped in a LossScaleOptimizer when the model's head computes in
    float16. Keras' compile() wraps it only when the model's own policy says
    mixed_float16, which a functional task model's never does (see encoder_policy)."""
    import keras
    try:
        policy = model.get_layer("classifier").dtype_policy.name
    except ValueError:
        return optimizer
    if policy == "mixed_float16" and \
            not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def build_classifier_model(encoder, num_classes, dropout=None, output_bias=0.0):
    """encoder + dropout + dense on the pooled [CLS] output -> keras.Model:
    {token_ids, segment_ids, padding_mask} int32 [B, S] ->
      {"logits": float32 [B, K]}   classification (num_classes = K >= 2)
      {"score":  float32 [B]}      regression (num_classes = 1)
    Dropout defaults to the encoder's hidden_dropout_prob (google's classifier does the
    same); the kernel is initialised like the encoder (truncated normal,
    initializer_range). output_bias: the initial bias; regression runs pass the mean
    training score, so the first steps need not learn STS-B's offset of ~2.5 (with a zero
    bias, a few hundred steps go to that alone). The head computes in the encoder's dtype
    policy; the output is cast to float32 so the loss and softmax stay exact under mixed
    precision.
    """
    import keras
    config = encoder.bert_config
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    rate = config.hidden_dropout_prob if dropout is None else dropout
    inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
              for name in INPUT_NAMES}
    pooled = encoder(inputs)["pooled_output"]                               # [B, H]
    x = keras.layers.Dropout(rate, name="head_dropout")(pooled)
    x = keras.layers.Dense(
        num_classes, kernel_initializer=keras.initializers.TruncatedNormal(
            stddev=config.initializer_range),
        bias_initializer=keras.initializers.Constant(output_bias),
        dtype=encoder_policy(encoder), name="classifier")(x)                # [B, K]
    x = keras.layers.Activation("linear", dtype="float32", name="float32_output")(x)
    if num_classes == 1:
        outputs = {"score": keras.layers.Reshape((), name="score")(x)}     # [B]
    else:
        outputs = {"logits": keras.layers.Identity(name="logits")(x)}      # [B, K]
    return keras.Model(inputs, outputs, name="classifier")


def _keras_metric_classes():
    """Keras metrics that accumulate over a whole validation pass (Keras' own
    PearsonCorrelation averages per-batch correlations), so `fit` can keep the checkpoint
    with the best official score. Defined lazily: tasks.metrics stays numpy-only."""
    import keras
    from keras import ops

    class ConfusionMatrixMetric(keras.metrics.Metric):
        """accuracy, mcc or f1 (binary of class 1 when K == 2, else macro) of argmax
        predictions, from a [K, K] count matrix (rows true, columns predicted). Sample
        weights 0 leave padding examples out."""

        def __init__(self, metric, num_classes, name=None, **kwargs):
            super().__init__(name=name or metric, **kwargs)
            self.metric, self.num_classes = metric, num_classes
            self.matrix = self.add_variable((num_classes, num_classes), "zeros",
                                            dtype="float32", name="matrix")

        def update_state(self, y_true, y_pred, sample_weight=None):
            k = self.num_classes
            true = ops.one_hot(ops.reshape(ops.cast(y_true, "int32"), (-1,)), k)   # [B, K]
            pred = ops.one_hot(ops.argmax(ops.reshape(y_pred, (-1, k)), -1), k)   # [B, K]
            if sample_weight is not None:
                true = true * ops.reshape(ops.cast(sample_weight, "float32"), (-1, 1))
            self.matrix.assign_add(ops.matmul(ops.transpose(true), pred))

        def result(self):
            c = ops.convert_to_tensor(self.matrix)
            t, p, n = ops.sum(c, 1), ops.sum(c, 0), ops.sum(c)
            correct = ops.trace(c)
            if self.metric == "accuracy":
                return ops.divide_no_nan(correct, n)
            if self.metric == "mcc":
                cov = correct * n - ops.sum(t * p)
                den = ops.sqrt((n * n - ops.sum(t * t)) * (n * n - ops.sum(p * p)))
                return ops.divide_no_nan(cov, den)
            # f1 per class = 2 tp / (predicted + true)
            f1 = ops.divide_no_nan(2.0 * ops.diagonal(c), t + p)
            if self.num_classes == 2:
                return f1[1]
            present = ops.cast((t + p) > 0, "float32")
            return ops.divide_no_nan(ops.sum(f1 * present), ops.sum(present))

        def reset_state(self):
            self.matrix.assign(ops.zeros_like(self.matrix))

        def get_config(self):
            return {"metric": self.metric, "num_classes": self.num_classes,
                    "name": self.name}

    class PearsonMetric(keras.metrics.Metric):
        """Pearson correlation over everything seen, from running sums (weights 0 leave
        padding out)."""

        def __init__(self, name="pearson", **kwargs):
            super().__init__(name=name, **kwargs)
            self.sums = self.add_variable((6,), "zeros", dtype="float32", name="sums")

        def update_state(self, y_true, y_pred, sample_weight=None):
            x = ops.reshape(ops.cast(y_true, "float32"), (-1,))
            y = ops.reshape(ops.cast(y_pred, "float32"), (-1,))
            w = ops.ones_like(x) if sample_weight is None else \
                ops.reshape(ops.cast(sample_weight, "float32"), (-1,))
            self.sums.assign_add(ops.stack([ops.sum(w), ops.sum(w * x), ops.sum(w * y),
                                            ops.sum(w * x * x), ops.sum(w * y * y),
                                            ops.sum(w * x * y)]))

        def result(self):
            n, sx, sy, sxx, syy, sxy = [self.sums[i] for i in range(6)]
            cov = n * sxy - sx * sy
            return ops.divide_no_nan(cov, ops.sqrt(ops.maximum(n * sxx - sx * sx, 0.0) *
                                                   ops.maximum(n * syy - sy * sy, 0.0)))

        def reset_state(self):
            self.sums.assign(ops.zeros_like(self.sums))

    return ConfusionMatrixMetric, PearsonMetric


def resolve_jit_compile(requested, strategy):
    """--jit_compile, except under a strategy mirrored over several CPU devices
    (--cpu_devices): XLA compiles the whole step for one device and fails on variables
    that live on the others."""
    devices = getattr(strategy.extended, "worker_devices", ())
    if requested and strategy.num_replicas_in_sync > 1 and devices and \
            all("CPU" in d.upper() for d in devices):
        print("note: --jit_compile is off: XLA cannot compile one step over several CPU "
              "devices", file=sys.stderr, flush=True)
        return False
    return requested


def monitored_metric(task_name, regression, num_classes):
    """The validation metric that picks best.weights.h5: the task's first official GLUE
    metric (accuracy for custom classifiers, Pearson for regression)."""
    if regression:
        return "pearson"
    name = metrics.GLUE_METRICS.get(task_name, ("accuracy",))[0]
    return "accuracy" if name == "f1" and num_classes != 2 else name


def compile_classifier(model, optimizer, num_classes, monitor, jit_compile=False):
    """Cross-entropy (MSE when num_classes == 1) plus the monitored metric, weighted (so
    padded evaluation examples count for nothing)."""
    import keras
    ConfusionMatrixMetric, PearsonMetric = _keras_metric_classes()
    if num_classes == 1:
        loss = {"score": keras.losses.MeanSquaredError()}
        weighted = {"score": [PearsonMetric(name=monitor)]}
    else:
        loss = {"logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)}
        weighted = {"logits": [ConfusionMatrixMetric(monitor, num_classes, name=monitor)]}
    model.compile(optimizer=loss_scaled(model, optimizer), loss=loss,
                  weighted_metrics=weighted, jit_compile=jit_compile)
    return model


# ----------------------------------------------------------------------------- outputs

def softmax(logits):
    """Row-wise softmax of float logits [N, K] (numpy, max-subtracted)."""
    z = np.asarray(logits, np.float64)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def postprocess(outputs, labels):
    """Model outputs (numpy) -> predictions.

    classification (labels: names in class-id order): {"label_ids": int [N],
      "labels": [N] names, "probabilities": float [N, K]}
    regression (labels None): {"scores": float [N]}
    """
    if labels is None:
        return {"scores": np.asarray(outputs["score"], np.float64).reshape(-1)}
    probabilities = softmax(outputs["logits"])
    ids = probabilities.argmax(axis=-1)
    return {"label_ids": ids, "labels": [labels[i] for i in ids],
            "probabilities": probabilities}


def score_predictions(task_name, predictions, gold, num_classes):
    """Official metrics (GLUE tasks) or the custom set, plus the loss."""
    if "scores" in predictions:
        values = metrics.regression_metrics(gold, predictions["scores"])
        if task_name in metrics.GLUE_METRICS:
            values.update(metrics.glue_metrics(task_name, gold, predictions["scores"]))
        values["loss"] = values.pop("mse")
        return values
    ids = predictions["label_ids"]
    if task_name in metrics.GLUE_METRICS:
        values = metrics.glue_metrics(task_name, gold, ids)
        values.setdefault("accuracy", metrics.accuracy(gold, ids))
    else:
        values = metrics.classification_metrics(gold, ids, num_classes)
    p = predictions["probabilities"][np.arange(len(gold)), np.asarray(gold, np.int64)]
    values["loss"] = float(-np.mean(np.log(np.maximum(p, 1e-12))))
    return values


def predict_outputs(model, dataset, num_examples):
    """Runs the model over an evaluation dataset (padded to whole batches) -> numpy
    outputs of the first num_examples rows."""
    outputs = model.predict(dataset, verbose=0)
    return {k: np.asarray(v)[:num_examples] for k, v in outputs.items()}


def format_prediction(predictions, i):
    """The text GLUE's submission expects for row i: the label string, or the STS-B
    score clipped to its 0-5 range."""
    if "scores" in predictions:
        return f"{min(max(predictions['scores'][i], 0.0), 5.0):.3f}"
    return predictions["labels"][i]


def write_predictions(path, examples, predictions, labels, header_first="index"):
    """TSV: index, prediction, then one probability column per label (classification).
    Temp name, then rename."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        columns = [header_first, "prediction"]
        if labels is not None:
            columns += [f"probability_{name}" for name in labels]
        f.write("\t".join(columns) + "\n")
        for i, example in enumerate(examples):
            row = [example.guid, format_prediction(predictions, i)]
            if labels is not None:
                row += [f"{p:.6f}" for p in predictions["probabilities"][i]]
            f.write("\t".join(row) + "\n")
    os.replace(tmp, path)


def write_submission(path, examples, predictions):
    """GLUE's submission format: header "index<TAB>prediction", one row per test row."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("index\tprediction\n")
        for i, example in enumerate(examples):
            f.write(f"{example.guid}\t{format_prediction(predictions, i)}\n")
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- task dir

CUSTOM_COLUMNS = {"text_a_column": "sentence", "text_b_column": None,
                  "label_column": "label"}


def task_config(args, labels, pair, regression):
    """What glue_config.json records: enough to rebuild preprocessing, model and
    post-processing without the flags (and, for custom data, to read files the same way
    in a later --do_eval/--do_predict run)."""
    text_names = ("text_a", "text_b") if pair else ("text_a",)
    config = {"task": TASK, "task_name": args.task_name, "labels": labels,
              "regression": regression, "num_classes": 1 if regression else len(labels),
              "text_inputs": list(text_names), "max_seq_length": args.max_seq_length,
              "do_lower_case": args.do_lower_case, "dropout": None}
    if args.task_name == "custom":
        config["columns"] = {name: getattr(args, name) for name in CUSTOM_COLUMNS}
    return config


def _resolve_columns(args, saved=None):
    """Custom column flags not given: the trained run's (saved), else the defaults."""
    for name, default in CUSTOM_COLUMNS.items():
        if getattr(args, name) is None:
            setattr(args, name, ((saved or {}).get("columns") or {}).get(name, default))


def remove_stale_best(output_dir):
    """Deletes best.weights.h5 before a run without an evaluation set: one left by an
    earlier run in the same directory would otherwise be taken for this run's
    (task_dir.weights_file prefers best over last)."""
    path = os.path.join(output_dir, "best.weights.h5")
    if os.path.exists(path):
        print(f"removing {path} of an earlier run (this run has no evaluation set)",
              file=sys.stderr, flush=True)
        os.remove(path)


def load_classifier(output_dir, dtype=None, weights=None):
    """(model, config, tokenizer) of a fine-tuned run in output_dir: the model rebuilt
    from glue_config.json + bert_config.json with its best (else last) weights loaded,
    and the BertTokenizer of its vocab.txt."""
    return task_dir.load_task_model(
        output_dir, TASK, lambda encoder, config: build_classifier_model(
            encoder, config["num_classes"], config["dropout"]), dtype, weights)


# ----------------------------------------------------------------------------- CLI

def add_flags(parser):
    common.add_common_flags(parser)
    f = parser.add_argument
    f("--task_name", required=True, choices=TASK_NAMES)
    f("--data_dir", default=None,
      help="GLUE task folder (train.tsv, dev.tsv, test.tsv; MNLI: dev_matched.tsv ...) "
           "or the GLUE root holding it")
    f("--tfds_data_dir", default=None,
      help="read tensorflow-datasets glue/<task> prepared under this directory instead "
           "(never downloads)")
    f("--train_file", default=None, help="custom: training .tsv/.csv/.jsonl")
    f("--dev_file", default=None, help="custom: evaluation file (with labels)")
    f("--test_file", default=None, help="custom: file to predict (labels not needed)")
    f("--text_a_column", default=None,
      help="custom: column/key of the first text (default: sentence, or the trained "
           "run's)")
    f("--text_b_column", default=None,
      help="custom: column/key of the second text, for sentence pairs (default: none, or "
           "the trained run's)")
    f("--label_column", default=None,
      help="custom: column/key of the label (default: label, or the trained run's)")
    f("--has_header", type=common.str2bool, nargs="?", const=True, default=True,
      help="custom .tsv/.csv: first row names the columns (else columns are 0-based "
           "indices)")
    f("--labels", default=None,
      help="custom: comma-separated label names in class-id order (default: the sorted "
           "labels of --train_file)")
    f("--regression", type=common.str2bool, nargs="?", const=True, default=False,
      help="custom: the label is a number (MSE loss, Pearson/Spearman)")
    f("--bad_rows", default="skip", choices=("skip", "error"),
      help="skip: count bad rows (malformed, empty text, unknown label) and report them; "
           "error: stop at the first with its file and line")
    f("--jit_compile", type=common.str2bool, nargs="?", const=True, default=False,
      help="XLA-compile the train/eval steps (compiling takes a minute or more; on "
           "CPU the steps measured slower with it: docs/benchmarks.md, Fine-tuning)")
    return parser


def _check_args(args):
    if not (args.do_train or args.do_eval or args.do_predict):
        raise ValueError("nothing to do: pass --do_train, --do_eval and/or --do_predict")
    if args.task_name == "custom":
        for flag, name in (("do_train", "train_file"), ("do_eval", "dev_file"),
                           ("do_predict", "test_file")):
            if getattr(args, flag) and not getattr(args, name):
                raise ValueError(f"--task_name=custom --{flag} needs --{name}")
    elif not (args.data_dir or args.tfds_data_dir):
        raise ValueError(f"--task_name={args.task_name} needs --data_dir (GLUE TSV files) "
                         f"or --tfds_data_dir (prepared tfds glue/{args.task_name})")


class _Reader:
    """Reads the splits of the task the flags name."""

    def __init__(self, args, labels, regression, pair):
        self.args, self.labels, self.regression, self.pair = args, labels, regression, pair
        self.glue = GLUE_TASKS.get(args.task_name)
        self.tfds_dir = tfds_dataset_dir(args.tfds_data_dir, self.glue) \
            if self.glue and args.tfds_data_dir and not args.data_dir else None

    def splits(self, kind):
        """Split names of kind "train", "dev" or "test"."""
        if self.glue is None or kind == "train":
            return [kind]
        return list(self.glue.dev_splits if kind == "dev" else self.glue.test_splits)

    def read(self, split, with_labels=True):
        args = self.args
        if self.glue is None:
            path = {"train": args.train_file, "dev": args.dev_file,
                    "test": args.test_file}[split]
            examples, report = read_custom_file(
                path, args.text_a_column, args.text_b_column,
                args.label_column if with_labels else None, self.labels, self.regression,
                args.has_header, args.bad_rows)
        elif self.tfds_dir:
            examples, report = read_glue_tfds(self.tfds_dir, self.glue, split, with_labels,
                                              args.bad_rows)
        else:
            examples, report = read_glue_tsv(glue_split_path(args.data_dir, self.glue, split),
                                             self.glue, with_labels, args.bad_rows)
        return finish_report(report, examples)


def _result_prefix(split):
    """eval_results.txt key prefix: dev -> eval, dev_matched -> eval_matched."""
    return "eval" if split == "dev" else "eval_" + split.replace("dev_", "")


def run(args):
    """The CLI's work on parsed flags. Returns the evaluation metrics ({} without eval)."""
    from bert_tf.tokenization import BertTokenizer
    _check_args(args)
    # First: splitting the CPU into logical devices (--cpu_devices) must happen before
    # any TensorFlow op runs, and the tokenizer below runs some.
    strategy = common.create_strategy(args)
    os.makedirs(args.output_dir, exist_ok=True)
    task = GLUE_TASKS.get(args.task_name)        # None for custom data
    if args.do_train:
        common.resolve_paths(args)
        _resolve_columns(args)
        regression = task.regression if task else args.regression
        pair = task.pair if task else args.text_b_column is not None
        labels = None
        if not regression:
            labels = list(task.labels) if task else \
                [s.strip() for s in args.labels.split(",")] if args.labels else None
        reader = _Reader(args, labels, regression, pair)
        train = reader.read("train")
        if labels is None and not regression:
            labels = label_names_from(train)
            reader.labels = labels
            print(f"labels (class-id order): {', '.join(labels)}", flush=True)
        if not regression and len(labels) < 2:
            raise DataError(f"{reader.args.train_file or args.data_dir}: one label only "
                            f"({labels[0]!r}); a classifier needs two or more")
    else:
        saved = task_dir.read_task_config(args.output_dir, TASK)
        if saved["task_name"] != args.task_name:
            raise ValueError(f"{args.output_dir} holds a {saved['task_name']} model, not "
                             f"{args.task_name}")
        labels, regression = saved["labels"], saved["regression"]
        pair = len(saved["text_inputs"]) == 2
        _resolve_columns(args, saved)
        if task is None and pair != (args.text_b_column is not None):
            raise ValueError(f"{args.output_dir} holds a "
                             f"{'sentence-pair' if pair else 'single-sentence'} model; "
                             f"--text_b_column must {'name' if pair else 'not name'} a "
                             f"second text column")
        args.do_lower_case, args.max_seq_length = saved["do_lower_case"], \
            saved["max_seq_length"]
        args.vocab_file = os.path.join(args.output_dir, "vocab.txt")
        reader = _Reader(args, labels, regression, pair)
    num_classes = 1 if regression else len(labels)

    tokenizer = BertTokenizer(args.vocab_file, do_lower_case=args.do_lower_case)
    preprocessor = TextClassifierPreprocessor(tokenizer, args.max_seq_length)
    dev = {split: reader.read(split) for split in reader.splits("dev")} \
        if args.do_eval else {}
    monitor = monitored_metric(args.task_name, regression, num_classes)
    with strategy.scope():
        encoder = common.task_encoder(args)
        # Regression starts from the mean training score (see build_classifier_model).
        bias = float(np.mean([e.label for e in train])) if regression and args.do_train \
            else 0.0
        model = build_classifier_model(encoder, num_classes, output_bias=bias)

    output_name = "score" if regression else "logits"

    def eval_dataset(examples, batch_size, with_labels=True):
        ids = encode_labels(examples, labels) if with_labels else None
        return make_dataset(examples, preprocessor, batch_size, pair, ids,
                            output_name=output_name,
                            length_batching=common.length_batching(args, training=False))

    if args.do_train:
        with strategy.scope():
            optimizer, num_steps = common.create_optimizer(args, len(train),
                                                           model.trainable_variables)
            compile_classifier(model, optimizer, num_classes, monitor,
                               resolve_jit_compile(args.jit_compile, strategy))
        task_dir.save_task_files(args.output_dir, TASK,
                                 task_config(args, labels, pair, regression),
                                 encoder.bert_config, args.vocab_file)
        train_ds = make_dataset(train, preprocessor, args.train_batch_size, pair,
                                encode_labels(train, labels), training=True, seed=args.seed,
                                output_name=output_name,
                                length_batching=common.length_batching(args, training=True))
        eval_ds = None
        if dev:
            first = next(iter(dev.values()))
            eval_ds = eval_dataset(first, args.eval_batch_size)
        else:
            remove_stale_best(args.output_dir)
        common.fit(model, train_ds, eval_ds, args, num_steps,
                   monitor=f"val_{monitor}" if eval_ds is not None else None, mode="max")
    model.load_weights(task_dir.weights_file(args.output_dir))

    results = {}
    for split, examples in dev.items():
        outputs = predict_outputs(model, eval_dataset(examples, args.eval_batch_size),
                                  len(examples))
        predictions = postprocess(outputs, labels)
        values = score_predictions(args.task_name, predictions,
                                   encode_labels(examples, labels), num_classes)
        prefix = _result_prefix(split)
        results.update({f"{prefix}_{k}": v for k, v in values.items()})
        results[f"{prefix}_num_examples"] = len(examples)
    if results:
        common.write_results(os.path.join(args.output_dir, "eval_results.txt"), results)
        for key in sorted(results):
            print(f"{key} = {results[key]:.4f}", flush=True)

    if args.do_predict:
        for split in reader.splits("test"):
            examples = reader.read(split, with_labels=False)
            outputs = predict_outputs(
                model, eval_dataset(examples, args.predict_batch_size, with_labels=False),
                len(examples))
            predictions = postprocess(outputs, labels)
            write_predictions(os.path.join(args.output_dir, f"{split}_results.tsv"),
                              examples, predictions, labels)
            if task is not None:
                path = os.path.join(args.output_dir, task.submission_name(split))
                write_submission(path, examples, predictions)
            print(f"{split}: {len(examples)} predictions written to {args.output_dir}",
                  flush=True)
    return results


def main(argv=None):
    parser = add_flags(common.parser(
        "Fine-tune, evaluate and predict GLUE tasks or your own sentence (pair) "
        "classification / regression data with BERT."))
    return run_command(run, parser.parse_args(argv))


if __name__ == "__main__":
    main()
