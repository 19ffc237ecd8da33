"""MultiLabelTask for tasks/driver.py: the user's multi-label files (data.py), a
bert_tf.BertClassifier trained with a sigmoid per label and binary cross-entropy, the
per-label thresholds chosen on the dev set after training and kept in
multilabel_config.json (export and later --do_predict runs use them), metrics
(metrics.py), predictions as label sets, and MultiLabelModule for export."""

import dataclasses
import json
import os

import numpy as np
import tensorflow as tf

from bert_tf.base.files import atomic_write, write_json
from bert_tf.text.preprocessor import BertPreprocessor
from bert_tf.models.task_models import BertClassifier, loss_scaled
from tasks import driver, text_inputs
from tasks.families.multilabel import data
from tasks.families.multilabel.metrics import choose_thresholds, multilabel_metrics
from tasks.families.multilabel.serving import MultiLabelModule
from tasks.outputs import predict_outputs
from tasks.task import Task, family


@dataclasses.dataclass(frozen=True)
class MultiLabelConfig(text_inputs.WindowConfig):
    """FineTuneConfig + how a long text is read (tasks/text_inputs.py) + the files, their
    columns and the labels."""
    train_file: str = None
    dev_file: str = None
    test_file: str = None
    text_a_column: str = "text"
    text_b_column: str = None
    label_column: str = "labels"
    label_file: str = None
    label_delimiter: str = ","
    has_header: bool = True
    allow_empty_labels: bool = True


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
        super().check(config)
        for flag, name in (("do_train", "train_file"), ("do_eval", "dev_file"),
                           ("do_predict", "test_file")):
            if getattr(config, flag) and not getattr(config, name):
                raise ValueError(f"--{flag} needs --{name}")
        if not config.label_delimiter:
            raise ValueError("--label_delimiter must not be empty")
        if config.do_train:        # a later run's pairs are the trained run's (restore)
            text_inputs.check(config, config.text_b_column is not None)

    def restore(self, config, saved):
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
        given = data.read_label_file(config.label_file) if config.label_file else None
        self.labels = given
        train = self.read(config, config.train_file)
        self.labels = data.labels_from(train, config.train_file, config.label_file, given)
        if given is None:
            print(f"labels (class-id order): {', '.join(self.labels)}", flush=True)
            train = self.read(config, config.train_file)     # label sets in class-id order
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
        self.preprocessor = BertPreprocessor(tokenizer, config.max_seq_length)
        return self.read(config, config.dev_file) if config.do_eval else None

    def build_model(self, encoder, config, settings, train=None):
        return BertClassifier.from_settings(encoder,
                                            text_inputs.config_settings(config, settings))

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
        return text_inputs.dataset(
            [e.text_a for e in examples],
            [e.text_b for e in examples] if config.text_b_column else None,
            data.multi_hot(examples, self.labels),
            lambda a, b: text_inputs.preprocess(self.preprocessor, config, a, b),
            batch_size or driver.batch_size(config, training), config.max_seq_length,
            "logits", training, config.seed, driver.length_batching(config, training))

    def probabilities(self, model, examples, config, settings, batch_size=None):
        outputs = predict_outputs(model, self.dataset(examples, config, settings, False,
                                                      batch_size), len(examples))
        return sigmoid(outputs["logits"])

    def evaluate(self, model, dev, config, settings):
        probabilities = self.probabilities(model, dev, config, settings)
        gold = data.multi_hot(dev, self.labels)
        thresholds = settings["thresholds"]
        results = {f"eval_{k}_at_0.5": v for k, v in multilabel_metrics(
            gold, probabilities, [0.5] * len(self.labels), self.labels).items()
            if k in ("micro_f1", "macro_f1", "exact_match")}
        if config.do_train:
            # The thresholds tuned on dev are the ones to predict and export with.
            thresholds = choose_thresholds(gold, probabilities)
            settings["thresholds"] = thresholds
            write_json(os.path.join(config.output_dir, f"{self.name}_config.json"),
                       settings)
        results.update({f"eval_{k}": v for k, v in multilabel_metrics(
            gold, probabilities, thresholds, self.labels).items()})
        results["eval_num_examples"] = len(dev)
        return results

    def predict(self, model, config, settings, tokenizer):
        """test_results.jsonl: per row its index, predicted label set and every label's
        probability."""
        examples = self.read(config, config.test_file, with_labels=False)
        probabilities = self.probabilities(model, examples, config, settings,
                                           config.predict_batch_size)
        thresholds = np.asarray(settings["thresholds"])
        path = os.path.join(config.output_dir, "test_results.jsonl")
        with atomic_write(path) as f:
            for example, p in zip(examples, probabilities):
                chosen = [name for name, pk, t in zip(self.labels, p, thresholds) if pk >= t]
                f.write(json.dumps({"index": int(example.guid), "labels": chosen,
                                    "probabilities": {name: round(float(pk), 6) for name, pk
                                                      in zip(self.labels, p)}}) + "\n")
        print(f"test: {len(examples)} predictions written to {path}", flush=True)
        return {}
