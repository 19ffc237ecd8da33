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
from tasks.families.classification.data import DataError
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


# ----------------------------------------------------------------------------- issue 68

def test_prior_bias_is_each_labels_log_odds_kept_finite():
    """The start of each label's output bias: the log-odds of its smoothed training
    frequency, (positives + 0.5) / (rows + 1), finite for a label on every row or on
    none, at most log(2N + 1) from 0."""
    from tasks.families.multilabel.metrics import label_frequencies, prior_bias
    targets = np.zeros((9, 4))
    targets[:, 0] = 1                      # every row
    targets[:3, 1] = 1                     # a third
    targets[0, 2] = 1                      # one row; label 3 on none
    p = label_frequencies(targets)
    np.testing.assert_allclose(p, [9.5 / 10, 3.5 / 10, 1.5 / 10, 0.5 / 10])
    np.testing.assert_allclose(prior_bias(targets), np.log(p / (1 - p)))
    assert np.all(np.abs(prior_bias(targets)) <= np.log(2 * 9 + 1) + 1e-12)


def test_thresholds_keep_half_unless_tuning_beats_it():
    """A model that learned nothing answers each label's frequency. Tuned per label for
    its F1 alone, a rare label drops to 0.05 and every text gets it (exact match 0, the
    micro F1 below the 0.5 answer's): the rule keeps such a label at 0.5. A label that
    tuning really helps (its F1 and the micro F1 rise) takes its tuned threshold."""
    rng = np.random.default_rng(0)
    n = 400
    gold = np.zeros((n, 4), int)
    gold[:, 0] = rng.random(n) < 0.7       # common: predicted at 0.5
    gold[:, 1] = rng.random(n) < 0.08      # rare
    gold[:, 2] = rng.random(n) < 0.05      # rare
    gold[:, 3] = rng.random(n) < 0.3       # learnt, but under-confident
    frequencies = np.array([0.7, 0.08, 0.05, 0.3])
    probabilities = np.tile(frequencies, (n, 1)) + rng.normal(0, 0.005, (n, 4))
    probabilities[:, 3] = np.where(gold[:, 3], 0.45, 0.1) + rng.normal(0, 0.01, n)
    chosen = choose_thresholds(gold, probabilities)
    assert chosen[:3] == [0.5, 0.5, 0.5]
    assert 0.1 < chosen[3] < 0.45
    at_half = multilabel_metrics(gold, probabilities, [0.5] * 4, list("abcd"))
    tuned = multilabel_metrics(gold, probabilities, chosen, list("abcd"))
    assert tuned["micro_f1"] > at_half["micro_f1"] and tuned["exact_match"] > 0
    # Per-label F1 alone (the rule before) would take 0.05 for the rare labels and lose.
    grid_best = [max(THRESHOLD_GRID, key=lambda t: f1_scores(
        gold[:, k:k + 1], probabilities[:, k:k + 1] >= t)[1]) for k in range(4)]
    assert grid_best[1] < 0.2
    worse = multilabel_metrics(gold, probabilities, grid_best, list("abcd"))
    assert worse["micro_f1"] < tuned["micro_f1"]
    # Labels the model tells nothing apart (on no text twice the odds of their
    # frequency and of the median text) are the ones the run names; a label answered
    # at one level for every text, above its frequency, is one of them.
    from tasks.families.multilabel.metrics import below_prior
    assert below_prior(probabilities, frequencies) == [0, 1, 2]
    assert below_prior(np.tile([0.3, 0.3, 0.3, 0.3], (n, 1)), frequencies) == [0, 1, 2, 3]
    assert below_prior(probabilities, [0.7, 0.08, 0.05, 0.45]) == [0, 1, 2, 3]


def test_evaluation_names_the_labels_that_never_rise_above_their_prior(tmp_path, capsys):
    """--do_train --do_eval: the labels whose dev probabilities never pass their training
    frequency are named in one note and keep 0.5; the thresholds written are the rule's."""
    from tasks.families.multilabel.task import MultiLabelConfig, MultiLabelTask
    task = MultiLabelTask()
    task.labels, task.priors = ["json", "mail", "os"], np.array([0.5, 0.1, 0.2])
    dev = [data.Example(f"d:{i}", "t", labels=labels) for i, labels in
           enumerate([("json",), ("json", "os"), ("mail",), ()])]
    p = np.array([[0.9, 0.1, 0.6], [0.8, 0.05, 0.7], [0.2, 0.08, 0.1], [0.1, 0.1, 0.1]])
    task.probabilities = lambda *args, **kwargs: p
    settings = {"thresholds": [0.5] * 3, "labels": task.labels}
    config = MultiLabelConfig(output_dir=str(tmp_path), dev_file="dev.jsonl",
                              do_train=True, do_eval=True)
    capsys.readouterr()
    results = task.evaluate(None, dev, config, settings)
    captured = capsys.readouterr()
    assert captured.err.strip() == (
        "note: 1 of 3 labels never rise above their training frequency on dev.jsonl (no "
        "text reaches twice its odds: the model learned nothing of them): mail")
    # "os" at 0.5 also takes row 0 (0.6); tuned to (0.6, 0.7] it finds row 1 alone.
    assert "thresholds: 1 of 3 labels tuned on dev.jsonl" in captured.out
    saved = json.loads((tmp_path / "multilabel_config.json").read_text())
    assert saved["thresholds"][:2] == [0.5, 0.5] and 0.6 < saved["thresholds"][2] <= 0.7
    assert results["eval_micro_f1"] == pytest.approx(2 * 3 / (2 * 3 + 0 + 1))
    assert results["eval_micro_f1_at_0.5"] == pytest.approx(2 * 3 / (2 * 3 + 1 + 1))


def test_help_describes_every_flag_once(capsys):
    """Every flag of the multi-label command has a help text, and none says its default
    twice ("(default: the training file's, sorted) (default: None)")."""
    import re

    from tasks.families.multilabel.__main__ import add_flags
    from tasks import common
    parser = add_flags(common.parser("multi-label"))
    for action in parser._actions:
        if action.dest == "help":
            continue
        text = parser.formatter_class("x")._get_help_string(action) or ""
        assert action.help, f"--{action.dest} has no help text"
        assert len(re.findall(r"\(default:", text)) <= 1, (action.dest, text)
    text = " ".join(parser.format_help().split())
    assert "(default: the training file's, sorted)" in text
    assert "(default: the training file's, sorted) (default: None)" not in text
    assert "without --do_train it is only scored, with the thresholds the run tuned" in text


TINY = {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64}
SIXTEEN = [f"tag{k:02d}" for k in range(16)]


def tiny_init(folder, minilm_dir):
    """A randomly initialised tiny encoder over MiniLM's vocabulary: the flags."""
    from bert_tf.base.config import BertConfig
    config = os.path.join(folder, "tiny_config.json")
    BertConfig(**TINY).to_json_file(config)
    return ["--bert_config_file", config, "--vocab_file",
            os.path.join(minilm_dir, "vocab.txt")]


def sixteen_label_rows(count, seed):
    rng = np.random.default_rng(seed)
    words = ["parse", "json", "send", "mail", "open", "file", "read", "socket", "time"]
    rows = []
    for i in range(count):
        text = " ".join(rng.choice(words, size=3 + i % 4))
        labels = sorted({SIXTEEN[i % 16]} | {SIXTEEN[k] for k in
                                            rng.choice(16, size=i % 3, replace=False)})
        rows.append({"text": text, "labels": labels})
    return rows


@pytest.fixture(scope="module")
def sixteen_run(tmp_path_factory, minilm_dir):
    """A tiny run with 16 labels at --max_seq_length=16 (the labels' count equals the
    length: length batching cut the targets before), trained with --do_eval and
    --do_predict on a test file that has labels; learning rate 1e-9, so the saved head
    still holds the bias it started with. (folder, argv, results)."""
    import keras

    from tasks.families.multilabel.__main__ import main
    folder = tmp_path_factory.mktemp("sixteen")
    for name, count, seed in (("train", 48, 0), ("dev", 16, 1), ("test", 16, 2)):
        with open(folder / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for row in sixteen_label_rows(count, seed):
                f.write(json.dumps(row) + "\n")
    argv = tiny_init(str(folder), minilm_dir) + [
        "--train_file", str(folder / "train.jsonl"), "--dev_file", str(folder / "dev.jsonl"),
        "--test_file", str(folder / "test.jsonl"), "--max_seq_length=16",
        "--train_batch_size=16", "--eval_batch_size=16", "--predict_batch_size=16",
        "--learning_rate=1e-9", "--num_train_epochs=1", "--seed=1"]
    keras.backend.clear_session()
    results = main(argv + ["--output_dir", str(folder / "run"), "--do_train", "--do_eval",
                           "--do_predict"])
    return folder, argv, results


@pytest.mark.slow
def test_sixteen_labels_at_length_sixteen_train_from_the_prior_bias(sixteen_run, tmp_path):
    """16 labels at --max_seq_length=16 train (the length batching's crash: `Incompatible
    shapes: [16,16] vs. [16,8]`), each label's output bias starting at its training
    log-odds; with --label_prior_bias=false at 0."""
    import keras

    import bert_tf
    from tasks.families.multilabel.__main__ import main
    from tasks.families.multilabel.metrics import prior_bias
    folder, argv, results = sixteen_run
    train = data.read_file(str(folder / "train.jsonl"), "text", None, "labels", SIXTEEN)
    want = prior_bias(data.multi_hot(train, SIXTEEN))
    model, saved, _ = bert_tf.load_task_model(str(folder / "run"))
    assert saved["labels"] == SIXTEEN
    bias = model.get_layer("classifier").bias.numpy()
    np.testing.assert_allclose(bias, want, atol=1e-5)
    assert np.ptp(want) > 0.5                     # the labels' frequencies differ
    keras.backend.clear_session()
    main(argv + ["--output_dir", str(tmp_path / "plain"), "--do_train",
                 "--label_prior_bias=false"])
    model, _, _ = bert_tf.load_task_model(str(tmp_path / "plain"))
    np.testing.assert_allclose(model.get_layer("classifier").bias.numpy(), 0, atol=1e-5)


@pytest.mark.slow
def test_a_test_file_with_labels_is_scored(sixteen_run):
    """--do_predict on a test file that has the label column: its predictions are written
    and scored, the metrics of evaluation named test_* (eval_results.txt), equal to the
    metrics of the predictions written."""
    folder, _, results = sixteen_run
    lines = (folder / "run" / "eval_results.txt").read_text().splitlines()
    written = dict(line.split(" = ") for line in lines)
    for name in ("micro_f1", "macro_f1", "exact_match", "loss", "num_examples",
                 "micro_f1_at_0.5", "f1_tag00"):
        assert f"test_{name}" in written and f"eval_{name}" in written, name
    rows = [json.loads(line) for line in
            (folder / "run" / "test_results.jsonl").read_text().splitlines()]
    gold = data.read_file(str(folder / "test.jsonl"), "text", None, "labels", SIXTEEN)
    truth = data.multi_hot(gold, SIXTEEN)
    predicted = data.multi_hot([data.Example("", "", labels=tuple(r["labels"]))
                                for r in rows], SIXTEEN)
    assert results["test_micro_f1"] == pytest.approx(f1_scores(truth, predicted)[1])
    assert results["test_num_examples"] == len(gold) == 16
    assert float(written["test_micro_f1"]) == pytest.approx(results["test_micro_f1"],
                                                            abs=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("value, shown", [("x", "'x'"), (float("nan"), "nan"),
                                          (1.5, "1.5"), (-1, "-1"), ("labels", "")])
def test_thresholds_read_back_are_checked_at_load_and_export(sixteen_run, tmp_path, capsys,
                                                             value, shown):
    """A hand-edited multilabel_config.json whose threshold is not a number in (0, 1):
    a --do_predict run and the export each refuse it in one line naming the file and the
    label, before the model loads; the run folder and the export folder stay as they
    were (the export's not made)."""
    import shutil

    from export.saved_model import main as export_main
    from tasks.families.multilabel.__main__ import main
    from tests.testing import refused
    folder, argv, _ = sixteen_run
    run = tmp_path / "run"
    shutil.copytree(folder / "run", run)
    path = run / "multilabel_config.json"
    saved = json.loads(path.read_text())
    if value == "labels":      # a label holding the run's delimiter
        saved["labels"][3] = "tag03,tag04"
        expect = [str(path), "label 'tag03,tag04' contains the label delimiter ','"]
    else:
        saved["thresholds"][3] = value
        expect = [str(path), "threshold of label 'tag03' is " + shown]
    path.write_text(json.dumps(saved))
    refused(main, argv + ["--output_dir", str(run), "--do_predict"], capsys, expect,
            str(run))
    refused(export_main, ["--task", "multilabel", "--checkpoint_dir", str(run),
                          "--output_dir", str(tmp_path / "models")], capsys, expect,
            str(run), str(tmp_path / "models"))


@pytest.mark.parametrize("case", ["train_file", "label_file"])
def test_a_label_holding_the_delimiter_is_refused(tmp_path, minilm_dir, capsys, case):
    """A label "C, C++" under --label_delimiter "," would be served joined as "C, C++,rust"
    and read back as three labels: refused at training in one line naming the file, its
    line and the label; nothing written."""
    from tasks.families.multilabel.__main__ import main
    from tests.testing import refused
    train = write(tmp_path / "train.jsonl", '{"text": "a", "labels": ["rust"]}\n'
                                            '{"text": "b", "labels": ["C, C++", "rust"]}\n')
    argv = tiny_init(str(tmp_path), minilm_dir) + ["--train_file", train, "--output_dir",
                                                   str(tmp_path / "run"), "--do_train"]
    where = f"{train}:2"
    if case == "label_file":
        labels = write(tmp_path / "labels.txt", "rust\nC, C++\n")
        argv += ["--label_file", labels]
        where = f"{labels}:2"
    refused(main, argv, capsys, [f"error: {where}: label 'C, C++' contains the label "
                                 f"delimiter ','"], str(tmp_path))
    assert not (tmp_path / "run").exists()


def test_flag_refusals_come_before_tensorflow_loads(tmp_path):
    """Refusals that need only the flags (or the label file) are made before TensorFlow
    is imported: an empty --label_delimiter, --do_predict without --test_file, a bad
    label file."""
    import subprocess
    import sys
    labels = write(tmp_path / "labels.txt", "json\n\nio\n")
    cases = [["--label_delimiter="], ["--do_predict"], ["--label_file", labels]]
    script = ("import sys, json\nfrom tasks.families.multilabel.__main__ import main\n"
              "try:\n    main(json.loads(sys.argv[1]))\nexcept SystemExit as e:\n"
              "    print(e.code, 'tensorflow' in sys.modules, 'keras' in sys.modules)\n")
    for extra in cases:
        argv = ["--train_file", "t.jsonl", "--output_dir", str(tmp_path / "run"),
                "--do_train", *extra]
        done = subprocess.run([sys.executable, "-c", script, json.dumps(argv)],
                              capture_output=True, text=True, cwd=tmp_path)
        assert done.stdout.split() == ["1", "False", "False"], (extra, done.stderr)
        assert done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == ["labels.txt"]


def test_a_test_file_with_unknown_labels_is_refused_before_training(tmp_path, minilm_dir,
                                                                    capsys):
    """A --test_file with the label column is scored, so its labels must be the run's: a
    label the training data never had is refused before anything is trained or
    written."""
    from tasks.families.multilabel.__main__ import main
    from tests.testing import refused
    train = write(tmp_path / "train.jsonl", '{"text": "a", "labels": ["json"]}\n'
                                            '{"text": "b", "labels": ["io"]}\n')
    test = write(tmp_path / "test.jsonl", '{"text": "c", "labels": ["io"]}\n'
                                          '{"text": "d", "labels": ["yaml"]}\n')
    refused(main, tiny_init(str(tmp_path), minilm_dir) + [
        "--train_file", train, "--test_file", test, "--output_dir", str(tmp_path / "run"),
        "--do_train", "--do_predict"], capsys,
        [f"error: {test}:2: label 'yaml' is not one of the 2 labels (io, json)"],
        str(tmp_path))
    assert not (tmp_path / "run").exists()
