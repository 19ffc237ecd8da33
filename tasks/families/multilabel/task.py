"""MultiLabelTask for tasks/driver.py: the user's multi-label files (data.py), a
bert_tf.BertClassifier trained with a sigmoid per label and binary cross-entropy, each
label's output bias started at the log-odds of its training frequency (`prior_bias`),
the per-label thresholds chosen on the dev set after training and kept in
multilabel_config.json (export and later --do_predict runs use them), metrics
(metrics.py), predictions as label sets (scored when the file to predict has labels),
and MultiLabelModule for export. The config and the checks of its flags are config.py's.

Why the prior bias: a dense head starts at bias 0, every label at probability 0.5, and
binary cross-entropy over many rare labels then first pulls every logit down together
until each label sits at its frequency. A user's real set (2,000 short texts, 30 labels,
3.4 labels a text; MiniLM, length 64, batch 32, lr 2e-4, 3 epochs) never left that
answer at any learning rate tried (micro F1 26.9, what answering each label's frequency
scores), and HF's head did the same; started at each label's log-odds, the same run
learnt (52.3). docs/benchmarks.md ("Multi-label: the output bias's start") measures
both starts over seeds on a set every machine has.
"""

import json
import os
import sys

import numpy as np

from bert_tf.base.files import atomic_write, write_json
from bert_tf.models.task_models import BertClassifier, loss_scaled, window_pooling
from tasks import driver, text_inputs
from tasks.families.multilabel import config as flags, data
from tasks.families.multilabel.config import MultiLabelConfig
from tasks.families.multilabel.metrics import (below_prior, check_thresholds,
                                               choose_thresholds, label_frequencies,
                                               multilabel_metrics, prior_bias)
from tasks.families.multilabel.serving import MultiLabelModule
from tasks.outputs import predict_outputs
from tasks.task import Task, family


def sigmoid(logits):
    return 1.0 / (1.0 + np.exp(-np.asarray(logits, np.float64)))


@family
class MultiLabelTask(Task):
    """Multi-label classification of a text or a text pair for tasks.driver."""

    export_name = "multilabel"        # python -m export.saved_model --task multilabel
    run_name = "multilabel"           # multilabel_config.json
    model_class = BertClassifier
    config_class = MultiLabelConfig
    serving_module = MultiLabelModule

    def check(self, config):
        flags.check(config)

    @classmethod
    def check_saved(cls, saved, path):
        """ValueError naming `path` (a run's multilabel_config.json, edited by hand) when
        its labels are not distinct names free of its label delimiter, or its thresholds
        not one number in (0, 1) per label: at a later run's load and at export, before
        the model loads."""
        labels, delimiter = saved.get("labels"), saved.get("label_delimiter")
        if not isinstance(delimiter, str) or not delimiter:
            raise ValueError(f"{path}: label_delimiter: expected a non-empty string, got "
                             f"{delimiter!r}")
        if not isinstance(labels, list) or len(labels) < 2 or \
                not all(isinstance(name, str) and name for name in labels) or \
                len(set(labels)) != len(labels):
            raise ValueError(f"{path}: labels: expected a list of two or more distinct "
                             f"names, got {labels!r}")
        joined = next((name for name in labels if delimiter in name), None)
        if joined is not None:
            raise data.delimiter_error(path, joined, delimiter)
        check_thresholds(saved.get("thresholds"), labels, path)

    def restore(self, config, saved):
        self.check_saved(saved, os.path.join(config.output_dir, f"{self.name}_config.json"))
        config = super().restore(config, saved)
        if config.label_file is not None and \
                data.read_label_file(config.label_file) != saved["labels"]:
            raise ValueError(f"--label_file {config.label_file}: {config.output_dir} was "
                             f"trained on other labels ({', '.join(saved['labels'])}); "
                             f"drop --label_file, or train anew with it")
        pair = len(saved["text_inputs"]) == 2
        if pair != (config.text_b_column is not None):
            raise ValueError(f"{config.output_dir} holds a "
                             f"{'sentence-pair' if pair else 'single-text'} model; "
                             f"--text_b_column must {'name' if pair else 'not name'} a "
                             f"second text column")
        text_inputs.check(config, pair)
        self.labels = saved["labels"]
        return text_inputs.restored_config(
            config.replace(label_delimiter=saved["label_delimiter"]), saved)

    def training_config(self, config):
        return text_inputs.training_config(config)

    def text_segments(self, config):
        return 2 if config.text_b_column is not None else 1

    def read(self, config, path, with_labels=True):
        return data.read_file(path, config.text_a_column, config.text_b_column,
                              config.label_column if with_labels else None, self.labels,
                              config.label_delimiter, config.has_header,
                              config.allow_empty_labels)

    def read_train(self, config, tokenizer):
        given = data.read_label_file(config.label_file, config.label_delimiter) \
            if config.label_file else None
        self.labels = given
        train = self.read(config, config.train_file)
        self.labels = data.labels_from(train, config.train_file, config.label_file, given)
        if given is None:
            print(f"labels (class-id order): {', '.join(self.labels)}", flush=True)
            train = self.read(config, config.train_file)     # label sets in class-id order
        self.priors = label_frequencies(data.multi_hot(train, self.labels))
        return train

    def training_files(self, config):
        return super().training_files(config) + (
            [("--label_file", config.label_file)] if config.label_file else [])

    def settings(self, config, train):
        return dict(task=self.run_name, model=BertClassifier.__name__,
                    labels=list(self.labels), num_classes=len(self.labels),
                    thresholds=[0.5] * len(self.labels),
                    text_inputs=["text_a", "text_b"] if config.text_b_column else ["text_a"],
                    label_delimiter=config.label_delimiter,
                    max_seq_length=int(config.max_seq_length),
                    do_lower_case=bool(config.do_lower_case), dropout=None,
                    **text_inputs.settings(config, 2 if config.text_b_column else 1))

    def read_eval(self, config, settings, tokenizer):
        # The file to predict is read here too, before training or writing anything: a
        # bad row (or a label not among the classes, in a file with labels) is refused
        # first. With labels, its predictions are scored (`predict`).
        self.test = None
        if config.do_predict:
            labelled = data.has_labels(config.test_file, config.label_column,
                                       config.has_header)
            self.test = (self.read(config, config.test_file, with_labels=labelled),
                         labelled)
        return self.read(config, config.dev_file) if config.do_eval else None

    def build_model(self, encoder, config, settings, train=None):
        settings = text_inputs.config_settings(config, settings)
        if train is None:              # a trained run's weights are loaded over it
            return BertClassifier.from_settings(encoder, settings)
        # Each label starts at its training frequency (see the module docstring), or at
        # 0 (probability 0.5) with --label_prior_bias=false.
        bias = prior_bias(data.multi_hot(train, self.labels)) \
            if config.label_prior_bias else 0.0
        return BertClassifier(encoder, settings["num_classes"], settings.get("dropout"),
                              output_bias=bias,
                              window_pooling=window_pooling(settings))

    def main_metric(self, config):
        return "eval_micro_f1", "max"    # at the thresholds tuned on dev

    def dev_file_flag(self, config):
        return "dev_file"

    def written_files(self, config):
        return ("test_results.jsonl",)

    def compile(self, model, optimizer, config, jit_compile):
        import keras
        model.compile(optimizer=loss_scaled(model, optimizer),
                      loss={"logits": keras.losses.BinaryCrossentropy(from_logits=True)},
                      jit_compile=jit_compile)

    def dataset(self, examples, config, settings, training, batch_size=None):
        """tf.data of (inputs, {"logits": multi-hot [B, K]}[, weights]) batches, tokenized
        in the pipeline (tasks/text_inputs.py); evaluation padded to whole batches with
        weight-0 rows."""
        preprocessor = self.preprocessor(config)        # made here, not in the pipeline
        return text_inputs.dataset(
            [e.text_a for e in examples],
            [e.text_b for e in examples] if config.text_b_column else None,
            data.multi_hot(examples, self.labels),
            lambda a, b: text_inputs.preprocess(preprocessor, config, a, b),
            batch_size or driver.batch_size(config, training), config.max_seq_length,
            "logits", training, config.seed, driver.length_batching(config, training))

    def probabilities(self, model, examples, config, settings, batch_size=None):
        outputs = predict_outputs(model, self.dataset(examples, config, settings, False,
                                                      batch_size), len(examples))
        return sigmoid(outputs["logits"])

    def scores(self, gold, probabilities, thresholds, prefix):
        """{prefix_micro_f1, ..._at_0.5, prefix_f1_<label>, ...} of one labelled set."""
        results = {f"{prefix}_{k}_at_0.5": v for k, v in multilabel_metrics(
            gold, probabilities, [0.5] * len(self.labels), self.labels).items()
            if k in ("micro_f1", "macro_f1", "exact_match")}
        results.update({f"{prefix}_{k}": v for k, v in multilabel_metrics(
            gold, probabilities, thresholds, self.labels).items()})
        results[f"{prefix}_num_examples"] = len(gold)
        return results

    def evaluate(self, model, dev, config, settings):
        probabilities = self.probabilities(model, dev, config, settings)
        gold = data.multi_hot(dev, self.labels)
        if config.do_train:
            # The thresholds tuned on dev are the ones to predict and export with (each
            # 0.5 unless tuning beats it there); the run names the labels the model
            # tells nothing apart.
            silent = below_prior(probabilities, self.priors)
            if silent:
                names = [self.labels[k] for k in silent]
                print(f"note: {len(silent)} of {len(self.labels)} labels never rise above "
                      f"their training frequency on {config.dev_file} (no text reaches "
                      f"twice its odds: the model learned nothing of them): "
                      f"{', '.join(names)}", file=sys.stderr, flush=True)
            settings["thresholds"] = choose_thresholds(gold, probabilities)
            tuned = sum(t != 0.5 for t in settings["thresholds"])
            print(f"thresholds: {tuned} of {len(self.labels)} labels tuned on "
                  f"{config.dev_file} (their F1 and the micro F1 rose there); the others "
                  f"keep 0.5", flush=True)
            write_json(os.path.join(config.output_dir, f"{self.name}_config.json"),
                       settings)
        return self.scores(gold, probabilities, settings["thresholds"], "eval")

    def predict(self, model, config, settings, tokenizer, evaluation):
        """test_results.jsonl: per row its index, predicted label set and every label's
        probability. A file to predict that has the label column is scored too: its
        metrics (test_micro_f1, ...: evaluation's, named for the test set) go to
        eval_results.txt."""
        examples, labelled = self.test
        probabilities = self.probabilities(model, examples, config, settings,
                                           config.predict_batch_size)
        thresholds = np.asarray(settings["thresholds"])
        path = os.path.join(config.output_dir, "test_results.jsonl")
        with atomic_write(path) as f:
            for index, (example, p) in enumerate(zip(examples, probabilities)):
                chosen = [name for name, pk, t in zip(self.labels, p, thresholds) if pk >= t]
                f.write(json.dumps({"index": index, "labels": chosen,
                                    "probabilities": {name: round(float(pk), 6) for name, pk
                                                      in zip(self.labels, p)}}) + "\n")
        print(f"test: {len(examples)} predictions written to {path}", flush=True)
        if not labelled:
            return {}
        return self.scores(data.multi_hot(examples, self.labels), probabilities,
                           settings["thresholds"], "test")
