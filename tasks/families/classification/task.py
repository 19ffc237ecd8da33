"""GLUE and user-defined sentence (pair) classification and regression: the family's
datasets, loss and metrics, predictions, and `ClassificationTask` for tasks/driver.py
(readers: data.py; model: bert_tf.BertClassifier; serving: serving.py's ClassifierModule;
command line: __main__.py, also `python -m tasks.glue`).

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

What the run leaves in --output_dir (bert_tf/models/run_dir.py): glue_config.json (task, label
names, text inputs, sequence length), bert_config.json, vocab.txt, best/last weights.
`bert_tf.load_task_model(output_dir)` rebuilds the model and `bert_tf.text.preprocessor.BertPreprocessor`
the raw-text -> inputs step from them.
"""

import os

import numpy as np
import tensorflow as tf

from bert_tf.models.task_models import BertClassifier, loss_scaled, window_pooling
from bert_tf.base.files import atomic_write
from tasks import driver, metrics, text_inputs
from tasks.task import Task, family
from tasks.families.classification import config as classification_config
from tasks.families.classification.config import CUSTOM_COLUMNS, ClassificationConfig
# The readers, as tasks.families.classification.<name> too (Example: what they return).
from tasks.families.classification.data import (GLUE_TASKS, TASK_NAMES, DataError,  # noqa: F401
                                      Example, finish_report, glue_split_path,
                                      label_names_from, read_custom_file, read_glue_tfds,
                                      read_glue_tsv, tfds_dataset_dir)
from tasks.families.classification.serving import ClassifierModule
from tasks.keras_metrics import ConfusionMatrixMetric, PearsonMetric
from tasks.outputs import predict_outputs, softmax


# ----------------------------------------------------------------------------- inputs

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
                 repeat=True, config=None):
    """tf.data of (inputs, label[, weight]) batches, tokenized in the pipeline
    (tasks/text_inputs.py's `dataset`: training shuffled and repeated; otherwise in order,
    padded to whole batches with weight-0 examples). Labels are keyed by the model's
    output_name ("logits", or "score" for regression). config: a run's config, whose
    window fields say how a long text is read (None: cut, as google's)."""
    labels = np.zeros(len(examples), np.int32) if label_ids is None else label_ids
    return text_inputs.dataset(
        [e.text_a for e in examples], [e.text_b or "" for e in examples] if pair else None,
        labels, lambda a, b: text_inputs.preprocess(preprocessor, config, a, b)
        if config is not None else preprocessor(a, b), batch_size,
        preprocessor.packer.seq_length, output_name, training, seed, length_batching,
        repeat)


# ----------------------------------------------------------------------------- model

def monitored_metric(task_name, regression, num_classes):
    """The validation metric that picks best.weights.h5: the task's first official GLUE
    metric (accuracy for custom classifiers, Pearson for regression)."""
    if regression:
        return "pearson"
    name = metrics.GLUE_METRICS.get(task_name, ("accuracy",))[0]
    return "accuracy" if name == "f1" and num_classes != 2 else name


def eval_prefix(split):
    """The eval_results.txt prefix of a dev split's scores: eval (dev), eval_matched
    (MNLI's dev_matched), ..."""
    return "eval" if split == "dev" else "eval_" + split.replace("dev_", "")


def compile_classifier(model, optimizer, num_classes, monitor, jit_compile=False):
    """Cross-entropy (MSE when num_classes == 1) plus the monitored metric, weighted (so
    padded evaluation examples count for nothing)."""
    import keras
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


def format_prediction(predictions, i):
    """The text GLUE's submission expects for row i: the label string, or the STS-B
    score clipped to its 0-5 range."""
    if "scores" in predictions:
        return f"{min(max(predictions['scores'][i], 0.0), 5.0):.3f}"
    return predictions["labels"][i]


def write_predictions(path, examples, predictions, labels, header_first="index"):
    """TSV: index, prediction, then one probability column per label (classification).
    Temp name, then rename."""
    with atomic_write(path) as f:
        columns = [header_first, "prediction"]
        if labels is not None:
            columns += [f"probability_{name}" for name in labels]
        f.write("\t".join(columns) + "\n")
        for i, example in enumerate(examples):
            row = [example.guid, format_prediction(predictions, i)]
            if labels is not None:
                row += [f"{p:.6f}" for p in predictions["probabilities"][i]]
            f.write("\t".join(row) + "\n")


def write_submission(path, examples, predictions):
    """GLUE's submission format: header "index<TAB>prediction", one row per test row."""
    with atomic_write(path) as f:
        f.write("index\tprediction\n")
        for i, example in enumerate(examples):
            f.write(f"{example.guid}\t{format_prediction(predictions, i)}\n")


# ----------------------------------------------------------------------------- task

def is_regression(config):
    """Whether the run's model is a regressor: a GLUE task's kind, else --regression."""
    glue = GLUE_TASKS.get(config.task_name)
    return glue.regression if glue else config.regression


def given_labels(config):
    """The label names the flags fix in class-id order: a GLUE task's, or --labels; None
    for regression, or when the training file's are to be found."""
    glue = GLUE_TASKS.get(config.task_name)
    if is_regression(config):
        return None
    return list(glue.labels) if glue else \
        [s.strip() for s in config.labels.split(",")] if config.labels else None


def train_labels(config, train):
    """A training run's label names in class-id order: the flags' (given_labels), else
    the training examples' sorted; None for regression."""
    if is_regression(config):
        return None
    return given_labels(config) or label_names_from(train)


def tfds_dir(config):
    """The prepared tfds glue/<task> folder a GLUE task reads (--tfds_data_dir without
    --data_dir), else None; DataError when it is not prepared."""
    glue = GLUE_TASKS.get(config.task_name)
    if glue and config.tfds_data_dir and not config.data_dir:
        return tfds_dataset_dir(config.tfds_data_dir, glue)
    return None


def splits_of(config, kind):
    """Split names of kind "train", "dev" or "test" (MNLI: two dev and two test)."""
    glue = GLUE_TASKS.get(config.task_name)
    if glue is None or kind == "train":
        return [kind]
    return list(glue.dev_splits if kind == "dev" else glue.test_splits)


@family
class ClassificationTask(Task):
    """GLUE tasks and the user's sentence (pair) classification/regression files, for
    tasks.driver. glue_config.json keeps the label names, the text inputs and, for custom
    data, the columns, so later runs and export read files and outputs the same way."""

    export_name = "classification"           # python -m export.saved_model --task classification
    model_class = BertClassifier
    config_class = ClassificationConfig
    serving_module = ClassifierModule

    def check(self, config):
        classification_config.check(config)

    def _columns(self, config, saved=None):
        """Custom column flags not given: the trained run's (saved), else the defaults."""
        columns = (saved or {}).get("columns") or {}
        return config.replace(**{name: columns.get(name, default)
                                 for name, default in CUSTOM_COLUMNS.items()
                                 if getattr(config, name) is None})

    def restore(self, config, saved):
        if saved["task_name"] != config.task_name:
            raise ValueError(f"{config.output_dir} holds a {saved['task_name']} model, not "
                             f"{config.task_name}")
        # What the model learned decides its outputs: a flag that says otherwise is
        # refused, not ignored.
        trained = "regression" if saved["regression"] else \
            f"--labels={','.join(saved['labels'])}"
        if config.regression and not saved["regression"]:
            raise ValueError(f"--regression: {config.output_dir} holds a classifier "
                             f"({trained}); drop --regression, or train a regression model")
        if config.labels is not None and (saved["regression"] or [
                label.strip() for label in config.labels.split(",")] != saved["labels"]):
            raise ValueError(f"--labels={config.labels}: {config.output_dir} was trained "
                             f"with {trained} (in class-id order); drop --labels, or "
                             f"train anew with them")
        config = self._columns(super().restore(config, saved), saved)
        pair = len(saved["text_inputs"]) == 2
        if config.task_name == "custom" and pair != (config.text_b_column is not None):
            raise ValueError(f"{config.output_dir} holds a "
                             f"{'sentence-pair' if pair else 'single-sentence'} model; "
                             f"--text_b_column must {'name' if pair else 'not name'} a "
                             f"second text column")
        text_inputs.check(config, pair)
        tfds_dir(config)                # a GLUE task's prepared tfds folder, or its error
        return text_inputs.restored_config(config, saved)

    def training_config(self, config):
        return text_inputs.training_config(self._columns(config))

    def text_segments(self, config):
        return classification_config.text_segments(config)

    def read(self, config, split, labels, regression, with_labels=True):
        """The examples of `split` ("train", or a dev or test split of `splits`): a GLUE
        task's, or custom data's with its labels (None: any, at training; regression: a
        number)."""
        glue, prepared = GLUE_TASKS.get(config.task_name), tfds_dir(config)
        if glue is None:
            path = {"train": config.train_file, "dev": config.dev_file,
                    "test": config.test_file}[split]
            examples, report = read_custom_file(
                path, config.text_a_column, config.text_b_column,
                config.label_column if with_labels else None, labels, regression,
                config.has_header, config.bad_rows)
        elif prepared:
            examples, report = read_glue_tfds(prepared, glue, split, with_labels,
                                              config.bad_rows)
        else:
            examples, report = read_glue_tsv(
                glue_split_path(config.data_dir, glue, split), glue, with_labels,
                config.bad_rows)
        return finish_report(report, examples)

    def read_train(self, config, tokenizer):
        given = given_labels(config)
        train = self.read(config, "train", given, is_regression(config))
        labels = train_labels(config, train)
        if given is None and labels is not None:
            print(f"labels (class-id order): {', '.join(labels)}", flush=True)
        if labels is not None and len(labels) < 2:
            raise DataError(f"{config.train_file or config.data_dir}: one label only "
                            f"({labels[0]!r}); a classifier needs two or more")
        return train

    def input_files(self, config):
        glue = GLUE_TASKS.get(config.task_name)
        files = super().input_files(config)
        if glue is not None and config.data_dir:
            files += [("--data_dir", glue_split_path(config.data_dir, glue, split))
                      for split in ["train", *glue.dev_splits, *glue.test_splits]]
        return files

    def written_files(self, config):
        glue = GLUE_TASKS.get(config.task_name)
        splits = glue.test_splits if glue is not None else ("test",)
        return tuple(f"{split}_results.tsv" for split in splits) + (
            tuple(glue.submission_name(split) for split in splits) if glue else ())

    def training_files(self, config):
        glue = GLUE_TASKS.get(config.task_name)
        if glue is None:
            return super().training_files(config)
        prepared = tfds_dir(config)
        if prepared:
            return [("--tfds_data_dir", prepared)]
        splits = ["train"] + (splits_of(config, "dev") if config.do_eval else [])
        return [("--data_dir", glue_split_path(config.data_dir, glue, split))
                for split in splits]

    def settings(self, config, train):
        extra = {}
        if config.task_name == "custom":
            extra["columns"] = {name: getattr(config, name) for name in CUSTOM_COLUMNS}
        pair = self.text_segments(config) == 2
        return BertClassifier.settings(
            train_labels(config, train), config.max_seq_length,
            config.do_lower_case, ("text_a", "text_b") if pair else ("text_a",),
            config.task_name, **text_inputs.settings(config, 2 if pair else 1), **extra)

    def read_eval(self, config, settings, tokenizer):
        return {split: self.read(config, split, settings["labels"], settings["regression"])
                for split in splits_of(config, "dev")} if config.do_eval else None

    def validation(self, evaluation):
        return next(iter(evaluation.values()))

    def build_model(self, encoder, config, settings, train=None):
        # Regression starts from the mean training score (see BertClassifier).
        bias = float(np.mean([e.label for e in train])) \
            if settings["regression"] and train else 0.0
        settings = text_inputs.config_settings(config, settings)
        return BertClassifier(encoder, settings["num_classes"], output_bias=bias,
                              window_pooling=window_pooling(settings))

    def monitor(self, settings):
        return monitored_metric(settings["task_name"], settings["regression"],
                                settings["num_classes"]), "max"

    def main_metric(self, config):
        # The metric that picks best.weights.h5, on the first dev split (MNLI: matched).
        glue = GLUE_TASKS.get(config.task_name)
        split = glue.dev_splits[0] if glue else "dev"
        name = monitored_metric(config.task_name, is_regression(config),
                                len(glue.labels or ()) if glue else 0)
        return f"{eval_prefix(split)}_{name}", "max"

    def dev_file_flag(self, config):
        return "dev_file" if config.task_name == "custom" else None

    def compile(self, model, optimizer, config, jit_compile):
        compile_classifier(model, optimizer, model.num_classes,
                           monitored_metric(config.task_name, model.num_classes == 1,
                                            model.num_classes), jit_compile)

    def dataset(self, examples, config, settings, training, batch_size=None,
                with_labels=True):
        batch_size = batch_size or driver.batch_size(config, training)
        return make_dataset(
            examples, self.preprocessor(config), batch_size,
            len(settings["text_inputs"]) == 2,
            encode_labels(examples, settings["labels"]) if with_labels else None,
            training=training, seed=config.seed,
            output_name="score" if settings["regression"] else "logits",
            length_batching=driver.length_batching(config, training), config=config)

    def evaluate(self, model, evaluation, config, settings):
        results = {}
        for split, examples in evaluation.items():
            outputs = predict_outputs(model, self.dataset(examples, config, settings, False),
                                      len(examples))
            labels = settings["labels"]
            values = score_predictions(config.task_name, postprocess(outputs, labels),
                                       encode_labels(examples, labels),
                                       settings["num_classes"])
            prefix = eval_prefix(split)
            results.update({f"{prefix}_{k}": v for k, v in values.items()})
            results[f"{prefix}_num_examples"] = len(examples)
        return results

    def predict(self, model, config, settings, tokenizer, evaluation):
        labels, glue = settings["labels"], GLUE_TASKS.get(config.task_name)
        for split in splits_of(config, "test"):
            examples = self.read(config, split, labels, settings["regression"],
                                 with_labels=False)
            outputs = predict_outputs(
                model, self.dataset(examples, config, settings, False,
                                    config.predict_batch_size, with_labels=False),
                len(examples))
            predictions = postprocess(outputs, labels)
            write_predictions(os.path.join(config.output_dir, f"{split}_results.tsv"),
                              examples, predictions, labels)
            if glue is not None:
                write_submission(os.path.join(config.output_dir,
                                              glue.submission_name(split)),
                                 examples, predictions)
            print(f"{split}: {len(examples)} predictions written to {config.output_dir}",
                  flush=True)
        return {}
