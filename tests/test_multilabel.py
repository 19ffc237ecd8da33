"""Multi-label classification (tasks/families/multilabel/): the reader (label lists and
delimited label sets, the label file, one error line per bad input), the metrics against
scikit-learn, the thresholds, and a learning run on real text: standard-library docstring
sentences, one or two per example, labelled with every package they come from, learnt
from MiniLM and not from random init; its export answers like the Keras model."""

import json
import os

import numpy as np
import pytest

from tasks.families.multilabel import data
from tasks.families.multilabel.metrics import (THRESHOLD_GRID, choose_thresholds,
                                               f1_scores, multilabel_metrics)
from tasks.glue_data import DataError
from tests.testing import run_command

COMMAND = "tasks.families.multilabel.__main__"


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


# ----------------------------------------------------------------------------- reader

def test_reads_label_lists_and_delimited_label_sets(tmp_path):
    jsonl = write(tmp_path / "a.jsonl", "\n".join(json.dumps(row) for row in (
        {"text": "parse json", "labels": ["json", "io"]},
        {"text": "no topic", "labels": []},
        {"text": "send mail", "labels": ["email", " email "]})) + "\n")
    tsv = write(tmp_path / "a.tsv", "text\tlabels\nparse json\tjson|io\nno topic\t\n"
                                    "send mail\temail\n")
    csv = write(tmp_path / "a.csv", 'text,labels\n"parse json","json,io"\nno topic,\n'
                                    'send mail,email\n')
    want = [("parse json", ("json", "io")), ("no topic", ()), ("send mail", ("email",))]
    for path, delimiter in ((jsonl, ","), (tsv, "|"), (csv, ",")):
        examples = data.read_file(path, "text", None, "labels", delimiter=delimiter)
        assert [(e.text_a, e.labels) for e in examples] == want, path
        assert examples[0].guid == f"{path}:2" if path != jsonl else f"{path}:1"
    labels = data.labels_from(examples, csv)
    assert labels == ["email", "io", "json"]
    # Read against the classes: label sets in class-id order, multi-hot targets.
    examples = data.read_file(jsonl, "text", None, "labels", labels)
    assert [e.labels for e in examples] == [("io", "json"), (), ("email",)]
    np.testing.assert_array_equal(data.multi_hot(examples, labels),
                                  [[0, 1, 1], [0, 0, 0], [1, 0, 0]])
    # A file to predict: no label column read; rows named by position.
    test = data.read_file(tsv, "text")
    assert [(e.guid, e.labels) for e in test] == [("0", None), ("1", None), ("2", None)]


@pytest.mark.parametrize("case, content, options, message", [
    ("unknown", '{"text": "a", "labels": ["json", "yaml"]}\n', dict(labels=["json", "io"]),
     ":1: label 'yaml' is not one of the 2 labels (json, io)"),
    ("empty", '{"text": "a", "labels": ["json"]}\n{"text": "b", "labels": []}\n',
     dict(allow_empty=False), ":2: no labels (--allow_empty_labels=false)"),
    ("kind", '{"text": "a", "labels": {"json": 1}}\n', {},
     ":1: 'labels' must be a list of label names or a string of them separated by ',', "
     "got {'json': 1}"),
    ("text", '{"text": "  ", "labels": ["json"]}\n', {}, ":1: empty text"),
    ("key", '{"sentence": "a", "labels": ["json"]}\n', {}, ":1: no key 'text'"),
])
def test_bad_rows_are_one_line_naming_file_and_line(tmp_path, case, content, options,
                                                    message):
    path = write(tmp_path / f"{case}.jsonl", content)
    with pytest.raises(DataError) as e:
        data.read_file(path, "text", None, "labels", **options)
    assert str(e.value) == path + message


def test_label_file_checks(tmp_path):
    assert data.read_label_file(write(tmp_path / "ok.txt", "json\nio\n\n")) == ["json", "io"]
    blank = write(tmp_path / "blank.txt", "json\n\nio\n")
    with pytest.raises(DataError, match=r"blank.txt:2: empty label \(one label per line\)"):
        data.read_label_file(blank)
    twice = write(tmp_path / "twice.txt", "json\nio\njson\n")
    with pytest.raises(DataError, match=r"twice.txt:3: label 'json' again \(first on line 1\)"):
        data.read_label_file(twice)
    with pytest.raises(DataError, match="1 label"):
        data.read_label_file(write(tmp_path / "one.txt", "json\n"))
    # A label file that the data disagrees with: a class no row has.
    examples = [data.Example("f:1", "a", labels=("json",)), data.Example("f:2", "b",
                                                                        labels=("io",))]
    with pytest.raises(DataError, match=r"labels.txt: label 'os' is not in any row of "
                                        r"train.jsonl \(1 such label\(s\)\)"):
        data.labels_from(examples, "train.jsonl", "labels.txt", ["json", "io", "os"])


# ----------------------------------------------------------------------------- metrics

def test_metrics_equal_scikit_learn():
    from sklearn import metrics as sk
    rng = np.random.default_rng(0)
    gold = (rng.random((200, 5)) < 0.3).astype(int)
    gold[:, 4] = 0                                 # a label no example has
    probabilities = np.clip(gold * 0.6 + rng.random((200, 5)) * 0.5, 0, 1)
    thresholds = [0.5, 0.4, 0.6, 0.5, 0.99]
    predicted = probabilities >= np.asarray(thresholds)
    values = multilabel_metrics(gold, probabilities, thresholds, list("abcde"))
    assert values["micro_f1"] == pytest.approx(sk.f1_score(gold, predicted, average="micro"))
    assert values["macro_f1"] == pytest.approx(
        sk.f1_score(gold, predicted, average="macro", zero_division=1.0))
    per_label = sk.f1_score(gold, predicted, average=None, zero_division=1.0)
    assert [values[f"f1_{k}"] for k in "abcde"] == pytest.approx(per_label)
    assert values["exact_match"] == pytest.approx(sk.accuracy_score(gold, predicted))
    assert values["loss"] == pytest.approx(sk.log_loss(gold.ravel(), np.clip(
        probabilities.ravel(), 1e-12, 1 - 1e-12)), rel=1e-6)
    assert f1_scores(np.zeros((3, 2)), np.zeros((3, 2)))[1] == 1.0


def test_thresholds_maximise_each_labels_f1():
    gold = np.array([[1, 0], [1, 0], [0, 0], [0, 1]])
    probabilities = np.array([[0.30, 0.9], [0.22, 0.1], [0.10, 0.2], [0.05, 0.8]])
    # Label 0: its positives at 0.30 and 0.22; every threshold in (0.10, 0.22] finds
    # both and nothing else (F1 1), the nearest to 0.5 of those is 0.20. Label 1: F1 1
    # for thresholds in (0.2, 0.8]: 0.5.
    assert choose_thresholds(gold, probabilities) == [0.2, 0.5]
    assert choose_thresholds(np.zeros((2, 1)), np.ones((2, 1)) * 0.7) == [0.5]
    assert set(THRESHOLD_GRID) >= {0.05, 0.5, 0.95}


# ----------------------------------------------------------------------------- command

def test_command_refuses_bad_input_in_one_line(tmp_path, minilm_dir, capsys):
    train = write(tmp_path / "train.jsonl", '{"text": "a", "labels": ["json"]}\n'
                                            '{"text": "b", "labels": ["mail"]}\n')
    labels = write(tmp_path / "labels.txt", "json\nio\n")
    out = tmp_path / "run"
    code, lines = run_command(COMMAND, ["--train_file", train, "--label_file", labels,
                               "--init_checkpoint", str(minilm_dir), "--output_dir", str(out),
                               "--do_train"], capsys)
    assert code == 1 and len(lines) == 1, lines
    assert lines[0] == f"error: {train}:2: label 'mail' is not one of the 2 labels (json, io)"
    code, lines = run_command(COMMAND, ["--init_checkpoint", str(minilm_dir), "--output_dir", str(out),
                               "--do_train"], capsys)
    assert (code, lines) == (1, ["error: --do_train needs --train_file"])


# ----------------------------------------------------------------------------- learning

PACKAGES = ("asyncio", "email", "logging", "unittest")


def write_package_sets(folder):
    """train/dev/test .jsonl of docstring first sentences (bert_tf.base.corpus.package_topics):
    each example one sentence, or two from different packages joined, labelled with
    their packages; held-out examples use sentences training never shows."""
    from bert_tf.base.corpus import package_topics
    topics = package_topics(PACKAGES, 60)
    rng = np.random.default_rng(0)
    splits = {"train": range(0, 36), "dev": range(36, 48), "test": range(48, 60)}
    gold = {}
    for split, indexes in splits.items():
        pool = [(package, topics[package][i]) for package in PACKAGES for i in indexes]
        order = rng.permutation(len(pool))
        rows, used = [], set()
        for position in order:
            if position in used:
                continue
            used.add(position)
            first = pool[position]
            partner = next((p for p in order if p not in used and
                            pool[p][0] != first[0]), None) if rng.random() < 0.5 else None
            parts = [first] if partner is None else [first, pool[partner]]
            if partner is not None:
                used.add(partner)
            rows.append({"text": " ".join(s for _, s in parts),
                         "labels": sorted({p for p, _ in parts})})
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
        gold[split] = rows
    return gold


@pytest.fixture(scope="module")
def package_runs(tmp_path_factory, minilm_dir):
    """{"minilm" | "random": run directory} of the command trained on the package sets
    (dev: best weights and thresholds; test: predicted), and the held-out rows."""
    import keras

    from tasks.families.multilabel.__main__ import main
    folder = tmp_path_factory.mktemp("packages")
    gold = write_package_sets(folder)
    runs = {}
    for name in ("minilm", "random"):
        init = ["--init_checkpoint", str(minilm_dir)] if name == "minilm" else [
            "--bert_config_file", os.path.join(minilm_dir, "config.json"),
            "--vocab_file", os.path.join(minilm_dir, "vocab.txt")]
        keras.backend.clear_session()
        runs[name] = folder / name
        main(init + ["--train_file", str(folder / "train.jsonl"),
                     "--dev_file", str(folder / "dev.jsonl"),
                     "--test_file", str(folder / "test.jsonl"),
                     "--output_dir", str(runs[name]), "--max_seq_length", "64",
                     "--train_batch_size", "16", "--learning_rate", "2e-4",
                     "--num_train_epochs", "12", "--seed", "1", "--do_train", "--do_eval",
                     "--do_predict"])
    return runs, gold


@pytest.mark.slow
def test_minilm_learns_package_sets_and_random_init_does_not(package_runs):
    runs, gold = package_runs
    scores = {}
    for name, out in runs.items():
        saved = json.loads((out / "multilabel_config.json").read_text())
        assert saved["labels"] == list(PACKAGES) and saved["model"] == "BertClassifier"
        assert len(saved["thresholds"]) == 4 and all(0 < t < 1 for t in saved["thresholds"])
        rows = [json.loads(line) for line in (out / "test_results.jsonl").read_text()
                .splitlines()]
        assert [r["index"] for r in rows] == list(range(len(gold["test"])))
        assert all(set(r["probabilities"]) == set(PACKAGES) for r in rows)
        truth = data.multi_hot([data.Example("", "", labels=tuple(r["labels"]))
                                for r in gold["test"]], list(PACKAGES))
        predicted = data.multi_hot([data.Example("", "", labels=tuple(r["labels"]))
                                    for r in rows], list(PACKAGES))
        scores[name] = f1_scores(truth, predicted)[1]
    print(f"held-out micro F1 of package sets: MiniLM {scores['minilm']:.4f}, "
          f"random init {scores['random']:.4f}")
    assert scores["minilm"] >= 0.75
    assert scores["minilm"] - scores["random"] >= 0.25


@pytest.mark.slow
def test_export_answers_like_the_keras_model_and_the_predictions(package_runs, tmp_path):
    import tensorflow as tf

    import bert_tf
    from bert_tf.text.preprocessor import BertPreprocessor
    from export.saved_model import build_module, export
    runs, gold = package_runs
    out = runs["minilm"]
    model, saved, tokenizer = bert_tf.load_task_model(str(out))
    assert isinstance(model, bert_tf.BertClassifier)
    path = export(build_module("multilabel", str(out)), str(tmp_path / "models"))
    texts = [r["text"] for r in gold["test"]]
    served = tf.saved_model.load(path).signatures["serving_default"](
        text_a=tf.constant(texts))
    logits = model(BertPreprocessor(tokenizer, saved["max_seq_length"])(
        tf.constant(texts)))["logits"]
    np.testing.assert_allclose(served["probabilities"].numpy(),
                               tf.sigmoid(logits).numpy(), atol=1e-5)
    rows = [json.loads(line) for line in (out / "test_results.jsonl").read_text()
            .splitlines()]
    assert [s.decode() for s in served["labels"].numpy()] == \
        [",".join(r["labels"]) for r in rows]
    chosen = served["predicted"].numpy()
    assert chosen.dtype == np.int32 and chosen.shape == (len(texts), 4)


def test_a_label_file_the_run_would_write_over_is_refused(tmp_path, minilm_dir, capsys):
    """--label_file inside --output_dir under a name the run writes (eval_results.txt):
    refused in one line before anything is written; the folder stays as it was."""
    import importlib

    from tests.testing import refused
    out = tmp_path / "run"
    out.mkdir()
    labels = write(out / "eval_results.txt", "json\nio\n")
    train = write(tmp_path / "train.jsonl", '{"text": "a", "labels": ["json"]}\n'
                                            '{"text": "b", "labels": ["io"]}\n')
    refused(importlib.import_module(COMMAND).main,
            ["--train_file", train, "--label_file", labels, "--init_checkpoint",
             str(minilm_dir), "--output_dir", str(out), "--do_train"], capsys,
            ["--label_file", "eval_results.txt"], str(out))
