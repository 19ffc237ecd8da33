"""A new task family from the pieces (tasks/driver.py + bert_tf's models and run
directories + export's serving modules): word-polarity classification read from a
JSON-lines file, trained, evaluated and predicted by the shared driver; its run directory
loads like any tasks.* run, and exports through export.saved_model as a SavedModel that
answers like the Keras model."""

import dataclasses
import json
import os

import h5py
import numpy as np
import pytest

import bert_tf
from export.saved_model import PRETRAINED, build_module, export, tasks
from tasks import driver
from tasks.families.classification.serving import ClassifierModule
from tasks.task import Task, family
from tests.testing import texts_and_labels

LABELS = ["negative", "positive"]


# ------------------------------------------------------- the task: under 100 lines

@dataclasses.dataclass(frozen=True)
class PolarityConfig(driver.FineTuneConfig):
    train_file: str = None
    eval_file: str = None


@family
class PolarityTask(Task):
    export_name = "polarity"                # build_module("polarity", run directory)
    model_class = bert_tf.BertClassifier    # its run directory: glue_config.json
    serving_module = ClassifierModule       # text_a -> probabilities, label

    def _read(self, path):
        with open(path, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
        return [r["text"] for r in rows], np.array([LABELS.index(r["label"]) for r in rows])

    def read_train(self, config, tokenizer):
        return self._read(config.train_file)

    def num_examples(self, train):
        return len(train[0])

    def settings(self, config, train):
        return self.model_class.settings(LABELS, config.max_seq_length,
                                         config.do_lower_case)

    def read_eval(self, config, settings, tokenizer):
        self.tokenizer = tokenizer
        return self._read(config.eval_file) if config.do_eval else None

    def build_model(self, encoder, config, settings, train=None):
        return bert_tf.BertClassifier(encoder, len(LABELS))

    def compile(self, model, optimizer, config, jit_compile):
        import keras
        model.compile(optimizer=optimizer, loss={
            "logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)},
            metrics={"logits": ["accuracy"]})

    def monitor(self, settings):
        return "accuracy", "max"

    def dataset(self, data, config, settings, training):
        import tensorflow as tf
        packer = bert_tf.BertPacker.from_tokenizer(self.tokenizer, config.max_seq_length)
        texts, labels = data
        ds = tf.data.Dataset.from_tensor_slices((list(texts), labels))
        if training:
            ds = ds.shuffle(len(texts), seed=config.seed).repeat()
        size = config.train_batch_size if training else config.eval_batch_size
        return ds.batch(size).map(lambda t, y: (packer(self.tokenizer(t)), {"logits": y}))

    def evaluate(self, model, data, config, settings):
        logits = model.predict(self.dataset(data, config, settings, False), verbose=0)
        return {"eval_accuracy": float((logits["logits"].argmax(-1) == data[1]).mean())}


# ------------------------------------------------------------------------- the test

def test_a_new_task_runs_on_the_driver(tmp_path, minilm_dir):
    def write(name, n, seed):
        texts, labels = texts_and_labels(n, seed)
        with open(tmp_path / name, "w", encoding="utf-8") as f:
            for text, label in zip(texts, labels):
                f.write(json.dumps({"text": text, "label": LABELS[label]}) + "\n")
        return str(tmp_path / name)

    out = str(tmp_path / "run")
    config = PolarityConfig(
        output_dir=out, init_checkpoint=str(minilm_dir), max_seq_length=16, do_train=True,
        do_eval=True, train_batch_size=16, eval_batch_size=16, learning_rate=1e-4,
        num_train_epochs=3, train_file=write("train.jsonl", 64, 0),
        eval_file=write("dev.jsonl", 32, 7), seed=1)
    results = driver.run(PolarityTask(), config)
    assert results["eval_accuracy"] >= 0.9
    assert open(os.path.join(out, "eval_results.txt")).read().startswith("eval_accuracy = ")
    assert {"glue_config.json", "best.weights.h5", "last.weights.h5"} <= set(os.listdir(out))
    for name in ("best.weights.h5", "last.weights.h5"):   # the weights, not AdamW's slots
        with h5py.File(os.path.join(out, name), "r") as f:
            assert "optimizer" not in f and "layers" in f, (name, list(f))

    # Evaluate again from the run directory alone (no --do_train): the same score.
    again = driver.run(PolarityTask(), dataclasses.replace(config, do_train=False))
    assert again == results
    model, saved, tokenizer = bert_tf.load_task_model(out)
    assert isinstance(model, bert_tf.BertClassifier) and saved["labels"] == LABELS

    # Export the run as the family says (its serving module, from the run's settings):
    # the SavedModel gives the Keras model's probabilities for raw text.
    import tensorflow as tf

    from bert_tf.text.preprocessor import BertPreprocessor
    path = export(build_module("polarity", out), str(tmp_path / "models" / "polarity"))
    assert path == str(tmp_path / "models" / "polarity" / "1")
    texts, _ = texts_and_labels(8, 11)
    served = tf.saved_model.load(path).signatures["serving_default"](
        text_a=tf.constant(texts))
    logits = model(BertPreprocessor(tokenizer, 16)(tf.constant(texts)))["logits"]
    np.testing.assert_allclose(served["probabilities"].numpy(),
                               tf.nn.softmax(logits).numpy(), atol=1e-5)
    assert [label.decode() for label in served["label"].numpy()] == \
        [LABELS[i] for i in np.argmax(logits, -1)]


def test_export_names_the_project_families():
    """export.saved_model's --task choices are the pretrained exports and tasks/families'
    registry names, read without TensorFlow; each registered module defines the family
    of its name, a model class and a serving module."""
    import subprocess
    import sys

    from tasks.families import REGISTRY, family_class
    assert tasks() == PRETRAINED + tuple(REGISTRY) == PRETRAINED + (
        "classification", "swag", "ner", "squad", "multilabel")
    for name, module in REGISTRY.items():
        task = family_class(name)
        assert task.export_name == name and task.__module__.startswith(module), name
        assert task.model_class is not None and task.serving_module is not None, name
    with pytest.raises(ValueError, match="unknown task family 'nope'; expected one of "
                                         "classification, swag"):
        family_class("nope")
    code = ("import sys, export.saved_model, tasks.families; "
            "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]", out