"""GLUE / custom classification: readers for the official TSV layouts of all nine tasks,
tensorflow-datasets glue/* (a prepared directory written here), the user's TSV/CSV/JSONL
files, bad-row reporting, in-graph preprocessing against a Python reference, the model,
post-processing, the CLI end to end (train, evaluate, predict, reload), and learning from
the real MiniLM weights vs random initialisation on data sets made here (a CSV for the
custom classifier, GLUE's STS-B files for regression) whose held-out split uses words the
training split never shows."""

import csv
import json
import os
import random
import re

import numpy as np
import pytest

from bert_tf.base.input_names import INPUT_NAMES
from bert_tf.models.task_models import BertClassifier
from bert_tf.text.preprocessor import BertPreprocessor
from tasks import metrics
from tasks.families.classification import __main__ as glue_command
from tasks.families.classification import task as glue
from tests.testing import reference_pack, tiny_encoder

# ----------------------------------------------------------------------------- layouts

# One row of each official file, as GLUE distributes them: header names and column
# order from the real files (MNLI's train/dev/test differ in their label columns; CoLA's
# train/dev have no header). Texts hold bare quotes, which GLUE's TSVs do not escape.
MNLI_PARSES = ["( ( A b ) )", "( ( C d ) )", "(ROOT (S a))", "(ROOT (S c))"]
LAYOUTS = {
    "cola": {
        "train": (None, ["gj04", "1", "", 'Our friends won\'t buy "this" analysis.']),
        "test": (["index", "sentence"], ["0", "Bill whistled past the house."]),
    },
    "sst2": {
        "train": (["sentence", "label"], ['it \'s a "charming" journey . ', "1"]),
        "test": (["index", "sentence"], ["0", "uneasy mishmash of styles and genres ."]),
    },
    "mrpc": {
        "train": (["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                  ["1", "702876", "702977", 'Amrozi accused "the witness" .',
                   'Referring to him as " the witness " , Amrozi accused him .']),
        "test": (["index", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                 ["0", "1089874", "1089925", "PCCW 's chief operating officer .",
                  "Mr Wu is the COO ."]),
    },
    "stsb": {
        "train": (["index", "genre", "filename", "year", "old_index", "source1", "source2",
                   "sentence1", "sentence2", "score"],
                  ["0", "main-captions", "MSRvid", "2012test", "0001", "none", "none",
                   "A plane is taking off.", "An air plane is taking off.", "5.000"]),
        "test": (["index", "genre", "filename", "year", "old_index", "source1", "source2",
                  "sentence1", "sentence2"],
                 ["0", "main-captions", "MSRvid", "2012test", "0000", "none", "none",
                  "A girl is styling her hair.", "A girl is brushing her hair."]),
    },
    "qqp": {
        "train": (["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
                  ["133273", "213221", "213222", "How is the life of a math student?",
                   "Which level of prepration is enough for the exam jlpt5?", "0"]),
        "test": (["id", "question1", "question2"],
                 ["0", "Why am I mentally very lonely?", "Find 23^24 modulo 24"]),
    },
    "mnli": {
        "train": (["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
                   "sentence2_binary_parse", "sentence1_parse", "sentence2_parse",
                   "sentence1", "sentence2", "label1", "gold_label"],
                  ["0", "31193", "31193n", "government"] + MNLI_PARSES +
                  ["Conceptually cream skimming has two basic dimensions .",
                   "Product and geography make cream skimming work. ", "neutral", "neutral"]),
        "dev_matched": (["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
                         "sentence2_binary_parse", "sentence1_parse", "sentence2_parse",
                         "sentence1", "sentence2", "label1", "label2", "label3", "label4",
                         "label5", "gold_label"],
                        ["0", "63735", "63735n", "slate"] + MNLI_PARSES +
                        ["The new rights are nice enough", "Everyone likes the benefits ",
                         "neutral", "entailment", "neutral", "neutral", "neutral",
                         "neutral"]),
        "test_matched": (["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
                          "sentence2_binary_parse", "sentence1_parse", "sentence2_parse",
                          "sentence1", "sentence2"],
                         ["0", "31493", "31493", "travel"] + MNLI_PARSES +
                         ["Hierbas, ans seco, ans dulce, and frigola .",
                          "Hierbas is a name worth looking out for ."]),
    },
    "qnli": {
        "train": (["index", "question", "sentence", "label"],
                  ["0", "When did the third Digimon series begin?",
                   "Unlike the two seasons before it , the third is darker .",
                   "not_entailment"]),
        "test": (["index", "question", "sentence"],
                 ["0", "What organization is devoted to Jihad?",
                  "For some decades prior to the revolution ."]),
    },
    "rte": {
        "train": (["index", "sentence1", "sentence2", "label"],
                  ["0", "No Weapons of Mass Destruction Found in Iraq Yet.",
                   "Weapons of Mass Destruction Found in Iraq.", "not_entailment"]),
        "test": (["index", "sentence1", "sentence2"],
                 ["0", "Mangla was summoned after Madhumita's sister Nidhi Shukla .",
                  "Shukla is related to Mangla."]),
    },
    "wnli": {
        "train": (["index", "sentence1", "sentence2", "label"],
                  ["0", "I stuck a pin through a carrot. When I pulled it out, it had a hole.",
                   "The carrot had a hole.", "1"]),
        "test": (["index", "sentence1", "sentence2"],
                 ["0", "Maude and Dora had seen the trains rushing across the prairie .",
                  "Horses ran away when Maude and Dora came into sight."]),
    },
}


def layout_of(task_name, split):
    """(header, row) of a split's file: its own layout, else the task's train or test
    one (dev files are laid out like train files, except MNLI's)."""
    layout = LAYOUTS[task_name]
    if split in layout:
        return layout[split]
    if split.startswith("test"):
        return layout["test"] if "test" in layout else layout["test_matched"]
    return layout["dev_matched"] if split.startswith("dev_") else layout["train"]


def write_tsv(path, header, rows):
    with open(path, "w", encoding="utf-8") as f:
        for fields in ([header] if header else []) + list(rows):
            f.write("\t".join(fields) + "\n")
    return path


@pytest.mark.parametrize("task_name", sorted(LAYOUTS))
def test_reads_official_layouts(tmp_path, task_name):
    task = glue.GLUE_TASKS[task_name]
    for split in ("train", task.dev_splits[0], task.test_splits[0]):
        header, row = layout_of(task_name, split)
        path = write_tsv(tmp_path / f"{split}.tsv", header, [row, row])
        examples, report = glue.read_glue_tsv(str(path), task,
                                              with_labels=not split.startswith("test"))
        assert report.rows == 2 and not report.skipped
        assert len(examples) == 2
        example = examples[1]
        if header is None:   # CoLA train/dev: source, label, original label, sentence
            assert (example.text_a, example.label) == (row[3], row[1])
        else:
            assert example.text_a == row[header.index(task.text_a)]
            if task.pair:
                assert example.text_b == row[header.index(task.text_b)]
            if split.startswith("test"):
                assert example.guid == row[0] and example.label is None
            elif task.regression:
                assert example.label == float(row[header.index(task.label)])
            else:
                assert example.label == row[header.index(task.label)]
                assert example.label in task.labels
                assert example.guid == f"{path}:3"      # file:line, header on line 1
        # A GLUE folder or the GLUE root holding it both work.
        assert glue.glue_split_path(str(tmp_path), task, split) == str(path)
    root = tmp_path / "glue_data"
    (root / task.directory).mkdir(parents=True)
    os.replace(tmp_path / "train.tsv", root / task.directory / "train.tsv")
    assert glue.glue_split_path(str(root), task, "train") == str(
        root / task.directory / "train.tsv")


def test_task_table():
    assert set(glue.GLUE_TASKS) == {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli",
                                    "rte", "wnli"}
    assert glue.GLUE_TASKS["stsb"].regression and not glue.GLUE_TASKS["sst2"].pair
    mnli = glue.GLUE_TASKS["mnli"]
    assert [mnli.submission_name(s) for s in mnli.test_splits] == ["MNLI-m.tsv",
                                                                   "MNLI-mm.tsv"]
    assert glue.GLUE_TASKS["sst2"].submission_name("test") == "SST-2.tsv"
    assert glue.GLUE_TASKS["stsb"].submission_name("test") == "STS-B.tsv"
    for task in glue.GLUE_TASKS.values():
        assert len(task.tfds_features) == (2 if task.pair else 1), task.name


# ----------------------------------------------------------------------------- bad rows

def test_bad_rows_counted_and_reported(tmp_path, capsys):
    task = glue.GLUE_TASKS["rte"]
    header = ["index", "sentence1", "sentence2", "label"]
    rows = [["0", "A man sleeps.", "Someone sleeps.", "entailment"],
            ["1", "only three", "fields"],                                    # line 3
            ["2", "A dog barks.", "   ", "not_entailment"],                    # line 4
            ["3", "A cat.", "A cat.", "entailed"],                             # line 5
            ["4", "x", "y", "z", "extra"],                                     # line 6
            ["5", "It rains.", "It is wet.", "entailment"]]
    path = write_tsv(tmp_path / "train.tsv", header, rows)
    examples, report = glue.read_glue_tsv(str(path), task)
    assert [e.text_a for e in examples] == ["A man sleeps.", "It rains."]
    assert report.rows == 6
    assert dict(report.skipped) == {"malformed": 2, "empty_text": 1, "unknown_label": 1}
    summary = report.summary()
    assert summary.startswith(f"{path}: 2 of 6 rows used; skipped 1 empty_text")
    assert f"(first: {path}:3: expected 4 tab-separated fields, found 3)" in summary
    assert f"{path}:4: empty text (text_b)" in summary
    assert f"{path}:5: unknown label 'entailed' (labels: entailment, not_entailment)" in \
        summary
    glue.finish_report(report, examples)
    assert capsys.readouterr().err.strip() == summary

    with pytest.raises(glue.DataError) as e:
        glue.read_glue_tsv(str(path), task, policy="error")
    assert str(e.value) == f"{path}:3: expected 4 tab-separated fields, found 3"

    # Regression labels must be numbers; a file with no usable row is an error.
    stsb = glue.GLUE_TASKS["stsb"]
    header, row = LAYOUTS["stsb"]["train"]
    path = write_tsv(tmp_path / "stsb.tsv", header, [row[:-1] + ["n/a"]])
    examples, report = glue.read_glue_tsv(str(path), stsb)
    assert examples == [] and report.first["unknown_label"].endswith(
        "label 'n/a' is not a number")
    with pytest.raises(glue.DataError, match="no usable rows"):
        glue.finish_report(report, examples)
    # A header without the task's column names the file, line 1 and the columns found.
    path = write_tsv(tmp_path / "wrong.tsv", ["index", "text", "label"], [])
    with pytest.raises(glue.DataError, match=re.escape(
            f"{path}:1: no column 'sentence1' in the header ('index', 'text', 'label')")):
        glue.read_glue_tsv(str(path), task)


def test_cli_bad_input_one_line_and_exit_code(tmp_path, capsys, minilm_dir):
    header = ["sentence", "label"]
    write_tsv(tmp_path / "train.tsv", header, [["good .", "1"], ["bad .", "neutral"]])
    argv = ["--task_name", "sst2", "--data_dir", str(tmp_path), "--output_dir",
            str(tmp_path / "out"), "--do_train", "--bad_rows", "error",
            "--init_checkpoint", str(minilm_dir)]
    with pytest.raises(SystemExit) as e:
        glue_command.main(argv)
    assert e.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {tmp_path / 'train.tsv'}:3: unknown label 'neutral' "
                   f"(labels: 0, 1)"]
    with pytest.raises(SystemExit):
        glue_command.main(argv[:4] + ["--output_dir", str(tmp_path / "out")])   # nothing to do
    assert capsys.readouterr().err.strip() == (
        "error: nothing to do: pass --do_train, --do_eval and/or --do_predict")
    with pytest.raises(SystemExit):
        glue_command.main(["--task_name", "sst2", "--output_dir", str(tmp_path), "--do_eval"])
    assert "needs --data_dir (GLUE TSV files) or --tfds_data_dir" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        glue_command.main(["--task_name", "mrpc", "--output_dir", str(tmp_path / "none"),
                   "--do_eval", "--data_dir", str(tmp_path)])
    assert "glue_config.json: not found" in capsys.readouterr().err


# ----------------------------------------------------------------------------- custom

def test_custom_files_tsv_csv_jsonl(tmp_path):
    rows = [("great film", "a pleasure", "pos"), ("dull", "a bore", "neg"),
            ('said "no"', "x, y", "neu")]
    tsv = tmp_path / "data.tsv"
    write_tsv(tsv, ["premise", "hypothesis", "gold"], [list(r) for r in rows])
    csv_path = tmp_path / "data.csv"
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["premise", "hypothesis", "gold"])
        writer.writerow(rows[0])
        writer.writerow(["two\nlines", "b", "neg"])        # a quoted field over 2 lines
        writer.writerows(rows[1:])
    jsonl = tmp_path / "data.jsonl"
    with open(jsonl, "w", encoding="utf-8") as f:
        for a, b, y in rows:
            f.write(json.dumps({"premise": a, "hypothesis": b, "gold": y}) + "\n")
        f.write("{not json\n")
        f.write(json.dumps({"premise": "p", "gold": "pos"}) + "\n")
        f.write(json.dumps({"premise": "p", "hypothesis": "h", "gold": 1}) + "\n")
    for path in (tsv, csv_path, jsonl):
        examples, report = glue.read_custom_file(str(path), "premise", "hypothesis", "gold",
                                                 labels=["neg", "neu", "pos"])
        texts = [(e.text_a, e.text_b, e.label) for e in examples]
        assert [t for t in texts if t[0] != "two\nlines"] == rows, path
    examples, report = glue.read_custom_file(str(csv_path), "premise", "hypothesis", "gold")
    assert [e.guid for e in examples] == [f"{csv_path}:{n}" for n in (2, 3, 5, 6)]
    _, report = glue.read_custom_file(str(jsonl), "premise", "hypothesis", "gold",
                                      labels=["neg", "neu", "pos"])
    assert dict(report.skipped) == {"malformed": 2, "unknown_label": 1}
    assert report.first["malformed"] == f"{jsonl}:4: not valid JSON (Expecting property " \
        f"name enclosed in double quotes)"
    assert report.first["unknown_label"].startswith(f"{jsonl}:6: unknown label '1'")
    # Columns by 0-based index when the file has no header; test files (no label column)
    # name rows by their position.
    write_tsv(tmp_path / "noheader.tsv", None, [["a", "b"], ["c", "d"]])
    examples, _ = glue.read_custom_file(str(tmp_path / "noheader.tsv"), "1",
                                        has_header=False)
    assert [(e.text_a, e.guid, e.label) for e in examples] == [("b", "0", None),
                                                               ("d", "1", None)]
    with pytest.raises(glue.DataError, match=r"data.txt: unsupported file type '.txt'"):
        glue.read_custom_file(str(tmp_path / "data.txt"), "a")
    with pytest.raises(glue.DataError, match=re.escape(f"{tsv}:1: no column 'text'")):
        glue.read_custom_file(str(tsv), "text")


def test_label_names_and_ids():
    examples = [glue.Example(str(i), "t", label=y) for i, y in enumerate("10 2 1 10".split())]
    assert glue.label_names_from(examples) == ["1", "2", "10"]       # numeric order
    assert glue.label_names_from([glue.Example("0", "t", label=y) for y in
                                  ("pos", "neg", "neu")]) == ["neg", "neu", "pos"]
    np.testing.assert_array_equal(glue.encode_labels(examples, ["1", "2", "10"]),
                                  [2, 1, 0, 2])
    assert glue.encode_labels([glue.Example("0", "t", label=2.5)], None).dtype == np.float32


# ----------------------------------------------------------------------------- tfds

def write_prepared_tfds(root, config, features, splits):
    """A tensorflow-datasets directory as `tfds build` leaves it: records + metadata."""
    import tensorflow as tf
    import tensorflow_datasets as tfds
    directory = os.path.join(root, "glue", config, "2.0.0")
    os.makedirs(directory)
    features = tfds.features.FeaturesDict(features)
    for split, rows in splits.items():
        with tf.io.TFRecordWriter(os.path.join(
                directory, f"glue-{split}.tfrecord-00000-of-00001")) as writer:
            for row in rows:
                writer.write(features.serialize_example(row))
    tfds.folder_dataset.write_metadata(data_dir=directory, features=features)
    return directory


def test_tfds_glue_prepared_directory(tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    root = str(tmp_path)
    # glue/mnli orders its classes entailment, neutral, contradiction; GLUE's TSVs (and
    # our class ids) contradiction, entailment, neutral: names must be mapped, not ids.
    write_prepared_tfds(root, "mnli", {
        "premise": tfds.features.Text(), "hypothesis": tfds.features.Text(),
        "label": tfds.features.ClassLabel(names=["entailment", "neutral", "contradiction"]),
        "idx": np.int32}, {
        "train": [{"premise": "A cat sat.", "hypothesis": "A cat is sitting.", "label": 0,
                   "idx": 0},
                  {"premise": "It is dark.", "hypothesis": "It is noon.", "label": 2,
                   "idx": 1},
                  {"premise": "", "hypothesis": "Empty premise.", "label": 1, "idx": 2}],
        "test_mismatched": [{"premise": "p", "hypothesis": "h", "label": -1, "idx": 7}]})
    # glue/cola names its classes; the TSVs write 0/1 in the same order.
    write_prepared_tfds(root, "cola", {
        "sentence": tfds.features.Text(),
        "label": tfds.features.ClassLabel(names=["unacceptable", "acceptable"]),
        "idx": np.int32}, {"validation": [{"sentence": "Him saw she.", "label": 0, "idx": 0},
                                          {"sentence": "She saw him.", "label": 1, "idx": 1}]})
    mnli = glue.GLUE_TASKS["mnli"]
    directory = glue.tfds_dataset_dir(root, mnli)
    examples, report = glue.read_glue_tfds(directory, mnli, "train")
    assert [(e.text_a, e.text_b, e.label) for e in examples] == [
        ("A cat sat.", "A cat is sitting.", "entailment"),
        ("It is dark.", "It is noon.", "contradiction")]
    assert dict(report.skipped) == {"empty_text": 1}
    test, _ = glue.read_glue_tfds(directory, mnli, "test_mismatched", with_labels=False)
    assert [(e.guid, e.label) for e in test] == [("7", None)]
    cola = glue.GLUE_TASKS["cola"]
    examples, _ = glue.read_glue_tfds(glue.tfds_dataset_dir(root, cola), cola, "dev")
    assert [e.label for e in examples] == ["0", "1"]
    with pytest.raises(glue.DataError, match="no split 'validation_matched'"):
        glue.read_glue_tfds(directory, mnli, "dev_matched")
    with pytest.raises(glue.DataError, match=r"glue/rte is not prepared there .* never "
                                             r"downloads"):
        glue.tfds_dataset_dir(root, glue.GLUE_TASKS["rte"])


# ----------------------------------------------------------------------------- inputs

def test_preprocessing_matches_google_packing_and_dataset(tokenizer):
    import tensorflow as tf
    pairs = [("The quick brown fox jumps over the lazy dog again and again .", "Short ."),
             ("A", "An unusually long second sentence that must lose its tail first ."),
             ("Héllo wörld , naïve café !", ""),
             ("", "")]
    seq = 12
    pre = BertPreprocessor(tokenizer, seq)
    got = pre(tf.constant([a for a, _ in pairs]), tf.constant([b for _, b in pairs]))
    single = pre(tf.constant([a for a, _ in pairs]))
    for i, (a, b) in enumerate(pairs):
        want = reference_pack(tokenizer, a, b, seq)
        for name, values in zip(INPUT_NAMES, want):
            assert got[name][i].numpy().tolist() == values, (i, name)
        assert single["token_ids"][i].numpy().tolist() == reference_pack(
            tokenizer, a, None, seq)[0]

    # The dataset tokenizes in the pipeline; evaluation is padded to whole batches with
    # weight-0 rows, real rows weighted slots / n.
    examples = [glue.Example(str(i), a, b, label=str(i % 2)) for i, (a, b) in
                enumerate(pairs + pairs[:1])]
    ids = glue.encode_labels(examples, ["0", "1"])
    batches = list(glue.make_dataset(examples, pre, 3, pair=True, label_ids=ids))
    assert len(batches) == 2
    inputs, labels, weights = batches[1]
    assert inputs["token_ids"].shape == (3, seq)
    np.testing.assert_allclose(weights["logits"].numpy(), [1.2, 1.2, 0])
    assert labels["logits"].numpy().tolist() == [1, 0, 0]
    assert inputs["token_ids"][:2].numpy().tolist() == [
        reference_pack(tokenizer, *pairs[3], seq)[0], reference_pack(tokenizer, *pairs[0], seq)[0]]
    train = glue.make_dataset(examples, pre, 4, pair=True, label_ids=ids, training=True)
    x, y = next(iter(train))
    assert x["token_ids"].shape == (4, seq) and set(y) == {"logits"}


# ----------------------------------------------------------------------------- model

def test_model_outputs_and_postprocess():
    import keras
    from tests.testing import random_inputs
    inputs = random_inputs(3, 10, 64)
    keras.utils.set_random_seed(0)
    model = BertClassifier(tiny_encoder(), 3)
    logits = model(inputs)["logits"]
    assert logits.shape == (3, 3) and logits.dtype == "float32"
    # The head is dense(K) on the encoder's pooled output (dropout is off at inference).
    from bert_tf.models.encoder import BertEncoder
    encoder = [layer for layer in model.layers if isinstance(layer, BertEncoder)][0]
    pooled = encoder(inputs)["pooled_output"]
    head = model.get_layer("classifier")
    np.testing.assert_allclose(np.asarray(logits), np.asarray(pooled) @ np.asarray(
        head.kernel) + np.asarray(head.bias), atol=1e-5)

    regression = BertClassifier(tiny_encoder(), 1, output_bias=2.5)
    score = regression(inputs)["score"]
    assert score.shape == (3,)
    assert np.asarray(regression.get_layer("classifier").bias).tolist() == [2.5]

    low = BertClassifier(tiny_encoder("mixed_bfloat16"), 2)
    out = low(inputs)["logits"]
    assert out.dtype == "float32" and low.get_layer("classifier").compute_dtype == "bfloat16"
    # float16 needs loss scaling, which Keras adds only for models whose own policy is
    # mixed_float16 (never a functional model's): compile_classifier adds it.
    half = BertClassifier(tiny_encoder("mixed_float16"), 2)
    glue.compile_classifier(half, keras.optimizers.AdamW(1e-3), 2, "accuracy")
    assert isinstance(half.optimizer, keras.optimizers.LossScaleOptimizer)
    glue.compile_classifier(model, keras.optimizers.AdamW(1e-3), 3, "accuracy")
    assert not isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)

    predictions = glue.postprocess({"logits": np.array([[0.0, np.log(3)], [2.0, 0.0]])},
                                   ["neg", "pos"])
    np.testing.assert_allclose(predictions["probabilities"][0], [0.25, 0.75])
    assert predictions["labels"] == ["pos", "neg"]
    assert predictions["label_ids"].tolist() == [1, 0]
    scores = glue.postprocess({"score": np.array([-0.4, 2.25, 7.0])}, None)
    assert [glue.format_prediction(scores, i) for i in range(3)] == ["0.000", "2.250",
                                                                     "5.000"]
    assert glue.format_prediction(predictions, 1) == "neg"
    # Loss and metrics of the predictions, with numbers worked out by hand.
    values = glue.score_predictions("mrpc", predictions, np.array([1, 1]), 2)
    assert values["accuracy"] == 0.5 and values["f1"] == pytest.approx(2 / 3)
    assert values["loss"] == pytest.approx(-(np.log(0.75) + np.log(1 / (1 + np.e ** 2))) / 2)
    # Regression: the official STS-B pair plus the loss (mean squared error).
    values = glue.score_predictions("stsb", {"scores": np.array([0.5, 0.8, 3.0, 4.0])},
                                    np.array([0.0, 1.0, 2.5, 5.0]), 1)
    assert set(values) == {"pearson", "spearman", "score", "loss"}
    assert values["loss"] == pytest.approx((0.25 + 0.04 + 0.25 + 1.0) / 4)
    assert values["spearman"] == pytest.approx(1.0)
    assert values["score"] == pytest.approx((values["pearson"] + 1.0) / 2)


# ----------------------------------------------------------------------------- windows

LONG_TEXTS = ["", "one short line .",
              " ".join(f"sentence {i} of a report about item{i} ." for i in range(12)),
              "北京大学的Google研究员在2024年发表了30%的论文。" * 4,
              "héllo\u00a0wörld " * 20]


def test_windows_follow_the_windows_rule(tokenizer):
    """BertPreprocessor.windows: each text's pieces in windows of seq - 2 pieces, stride
    apart, as bert_tf/text/windows.py's rule (SQuAD's) makes them for one-piece units,
    at most max_windows of them; window 1 is __call__'s cut; windowed() pads the rest of
    a row with windows of padding_mask 0."""
    import tensorflow as tf
    from tests.span_oracles import windows
    seq = 12
    pre = BertPreprocessor(tokenizer, seq)
    pieces = tokenizer.encode(LONG_TEXTS)
    assert max(len(p) for p in pieces) > 4 * (seq - 2)
    for max_windows in (0, 1, 3):
        for stride in (None, 1, 4, 10, 25):
            features, splits = pre.windows(tf.constant(LONG_TEXTS), max_windows, stride)
            ids, splits = features["token_ids"].numpy(), splits.numpy()
            for i, p in enumerate(pieces):
                spans = windows(np.ones(len(p), np.int64), seq - 2, stride)
                spans = spans[:max_windows] if max_windows else spans
                got = ids[splits[i]:splits[i + 1]]
                assert [row[row > 0][1:-1].tolist() for row in got] == \
                    [p[a:b] for a, b in spans], (max_windows, stride, i)
                assert (got[:, 0] == tokenizer.cls_id).all()
    cut = pre(tf.constant(LONG_TEXTS))
    first, splits = pre.windows(tf.constant(LONG_TEXTS), 1, 4)
    assert splits.numpy().tolist() == list(range(len(LONG_TEXTS) + 1))
    for name in INPUT_NAMES:
        assert first[name].numpy().tolist() == cut[name].numpy().tolist()
    padded = pre.windowed(tf.constant(LONG_TEXTS), 0, 4)
    features, splits = pre.windows(tf.constant(LONG_TEXTS), 0, 4)
    counts = np.diff(splits.numpy())
    assert padded["token_ids"].shape == (len(LONG_TEXTS), counts.max(), seq)
    for i, n in enumerate(counts):
        for name in INPUT_NAMES:
            assert padded[name][i, :n].numpy().tolist() == \
                features[name][splits[i]:splits[i + 1]].numpy().tolist()
        assert not padded["padding_mask"][i, n:].numpy().any()
    with pytest.raises(ValueError, match="stride must be >= 1"):
        pre.windows(tf.constant(LONG_TEXTS), 0, 0)


def windowed_classifier(tokenizer, num_classes, pooling):
    import keras
    from bert_tf.base.config import BertConfig
    from bert_tf.models.encoder import BertEncoder
    keras.utils.set_random_seed(3)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=16,
                        num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=32)
    return BertClassifier(BertEncoder.from_config_object(config), num_classes,
                          window_pooling=pooling)


@pytest.mark.parametrize("pooling", ["mean", "max"])
def test_windowed_classifier_pools_its_windows(tokenizer, pooling, tmp_path):
    """BertClassifier(window_pooling=...) on [batch, windows, seq]: each text's logits
    are the mean / max of its own windows' (window_model, one window at a time), padding
    windows change nothing, and its weights are the plain classifier's (a run's weights
    load into either)."""
    import tensorflow as tf
    pre = BertPreprocessor(tokenizer, 16)
    for k in (3, 1):
        model = windowed_classifier(tokenizer, k, pooling)
        name = "score" if k == 1 else "logits"
        batch = pre.windowed(tf.constant(LONG_TEXTS), 0, 5)
        got = model(batch)[name].numpy().reshape(len(LONG_TEXTS), -1)
        features, splits = pre.windows(tf.constant(LONG_TEXTS), 0, 5)
        each = model.window_model()(features)[name].numpy().reshape(len(features["token_ids"]), -1)
        reduce = np.mean if pooling == "mean" else np.max
        splits = splits.numpy()
        want = np.stack([reduce(each[a:b], axis=0) for a, b in zip(splits, splits[1:])])
        np.testing.assert_allclose(got, want, atol=1e-6)
        assert (np.diff(splits) > 1).sum() >= 3           # texts of several windows
        # Five more windows of padding on every text: the same answers.
        wider = {n: tf.pad(v, [[0, 0], [0, 5], [0, 0]]) for n, v in batch.items()}
        np.testing.assert_allclose(model(wider)[name].numpy().reshape(got.shape), got,
                                   atol=1e-6)
        plain = BertClassifier(model.encoder, k)
        path = str(tmp_path / f"w{k}.weights.h5")
        model.save_weights(path)
        plain.load_weights(path)
        np.testing.assert_allclose(plain(features)[name].numpy().reshape(each.shape), each,
                                   atol=1e-6)
    assert BertClassifier.from_config(model.get_config()).window_pooling == pooling


def test_windowed_signatures_equal_the_keras_aggregate(tokenizer):
    """A run read in windows is served in windows: classification and multi-label
    signatures on texts of several windows answer as the Keras model on those windows
    does (probabilities within 1e-6); serve_tokenized reads a row as one window."""
    import tensorflow as tf
    from tasks.families.classification.serving import ClassifierModule
    from tasks.families.multilabel.serving import MultiLabelModule
    pre = BertPreprocessor(tokenizer, 16)
    texts = tf.constant(LONG_TEXTS)
    for pooling in ("mean", "max"):
        model = windowed_classifier(tokenizer, 3, pooling)
        logits = model(pre.windowed(texts, 4, 6))["logits"]
        module = ClassifierModule(model, tokenizer, 16, ["a", "b", "c"],
                                  windows=(4, 6, pooling))
        out = module.signatures()["serving_default"](text_a=texts)
        np.testing.assert_allclose(out["probabilities"].numpy(),
                                   tf.nn.softmax(logits).numpy(), atol=1e-6)
        assert out["label"].numpy().tolist() == [
            "abc"[i].encode() for i in np.argmax(logits.numpy(), -1)]
        labels = MultiLabelModule(model, tokenizer, 16, ["a", "b", "c"], [0.5] * 3,
                                  windows=(4, 6, pooling))
        multi = labels.signatures()["serving_default"](text_a=texts)
        np.testing.assert_allclose(multi["probabilities"].numpy(),
                                   tf.sigmoid(logits).numpy(), atol=1e-6)
        one = pre(texts)
        tokenized = module.signatures()["serve_tokenized"](**one)
        np.testing.assert_allclose(tokenized["probabilities"].numpy(), tf.nn.softmax(
            model.window_model()(one)["logits"]).numpy(), atol=1e-6)
    score = windowed_classifier(tokenizer, 1, "mean")
    module = ClassifierModule(score, tokenizer, 16, None, windows=(0, 6, "mean"))
    np.testing.assert_allclose(
        module.signatures()["serving_default"](text_a=texts)["score"].numpy(),
        score(pre.windowed(texts, 0, 6))["score"].numpy(), atol=1e-6)


@pytest.mark.slow
def test_cli_windows_train_predict_export_and_refusals(tmp_path, minilm_dir, capsys):
    """--max_windows: the run keeps its windows in glue_config.json, its predictions of
    long texts are the Keras aggregate of their windows, the export answers the same, a
    later run reads the trained windows unless told otherwise; windows with pairs, sort
    or bucket batching or --jit_compile are refused with one line, writing nothing."""
    import tensorflow as tf
    from bert_tf.models.run_dir import load_task_model
    from tests.testing import refused
    rng = random.Random(0)
    rows = [(" ".join(rng.choice(["report", "data", "of", "the", "with"]) for _ in range(40))
             + (" excellent work ." if i % 2 else " terrible work ."), "pos" if i % 2 else
             "neg") for i in range(24)]
    with open(tmp_path / "train.csv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([("sentence", "label")] + rows)
    config = tmp_path / "tiny_config.json"
    config.write_text(json.dumps({"vocab_size": 30522, "hidden_size": 16,
                                  "num_hidden_layers": 1, "num_attention_heads": 2,
                                  "intermediate_size": 32, "max_position_embeddings": 32}))
    out = tmp_path / "run"
    common = ["--task_name", "custom", "--output_dir", str(out), "--max_seq_length", "16",
              "--predict_batch_size", "4", "--test_file", str(tmp_path / "train.csv")]
    train = ["--do_train", "--train_file", str(tmp_path / "train.csv"),
             "--bert_config_file", str(config), "--vocab_file",
             os.path.join(minilm_dir, "vocab.txt"), "--train_batch_size", "8",
             "--num_train_epochs", "1", "--learning_rate", "1e-3"]
    for flags, expect in (
            (["--text_b_column", "label"], "sentence pairs are cut"),
            (["--length_batching", "sort"], "use longest or off"),
            (["--jit_compile"], "--jit_compile compiles fixed shapes")):
        refused(glue_command.main, common + train + ["--max_windows", "3"] + flags, capsys,
                [expect], tmp_path)
    glue_command.main(common + train + ["--max_windows", "3", "--window_pooling", "max",
                                        "--do_predict"])
    saved = json.loads((out / "glue_config.json").read_text())
    assert (saved["max_windows"], saved["doc_stride"], saved["window_pooling"]) == \
        (3, 7, "max")
    model, settings, tokenizer = load_task_model(str(out))
    assert model.window_pooling == "max"
    pre = BertPreprocessor(tokenizer, 16)
    texts = tf.constant([text for text, _ in rows])
    assert pre.windowed(texts, 3, 7)["token_ids"].shape[1] == 3
    probs = np.loadtxt(out / "test_results.tsv", skiprows=1, usecols=(2, 3))
    want = glue.softmax(model.predict_on_batch(pre.windowed(texts, 3, 7))["logits"])
    np.testing.assert_allclose(probs, want, atol=2e-6)
    from export.saved_model import main as export_main
    export_main(["--task", "classification", "--checkpoint_dir", str(out),
                 "--output_dir", str(tmp_path / "export")])
    loaded = tf.saved_model.load(str(tmp_path / "export" / "1"))
    served = loaded.signatures["serving_default"](text_a=texts)["probabilities"].numpy()
    np.testing.assert_allclose(served, want, atol=2e-6)
    # A later run reads the trained windows; --max_windows=1 reads the cut text instead.
    glue_command.main(common + ["--do_predict"])
    np.testing.assert_allclose(np.loadtxt(out / "test_results.tsv", skiprows=1,
                                          usecols=(2, 3)), probs, atol=1e-6)
    glue_command.main(common + ["--do_predict", "--max_windows", "1"])
    cut = np.loadtxt(out / "test_results.tsv", skiprows=1, usecols=(2, 3))
    np.testing.assert_allclose(cut, glue.softmax(
        model.window_model().predict_on_batch(pre(texts))["logits"]), atol=2e-6)


# ----------------------------------------------------------------------------- CLI

def test_cli_mnli_train_eval_predict_reload(tmp_path, minilm_dir):
    """Train a tiny random model on MNLI-format files, evaluate both dev sets, write both
    submission files; then the model rebuilt from the output directory alone reproduces
    the predictions."""
    import tensorflow as tf
    data = tmp_path / "MNLI"
    data.mkdir()
    rng = random.Random(0)
    labels = glue.GLUE_TASKS["mnli"].labels
    for split in ("train", "dev_matched", "dev_mismatched", "test_matched",
                  "test_mismatched"):
        header, row = layout_of("mnli", split)
        rows = []
        for i in range({"train": 24, "dev_matched": 7, "dev_mismatched": 5}.get(split, 6)):
            r = list(row)
            r[0] = str(100 + i)
            r[8], r[9] = f"premise number {i} .", f"hypothesis {rng.random():.3f}"
            if not split.startswith("test"):
                r[-1] = labels[i % 3]
            rows.append(r)
        write_tsv(data / f"{split}.tsv", header, rows)
    config = tmp_path / "tiny_config.json"
    config.write_text(json.dumps({"vocab_size": 30522, "hidden_size": 16,
                                  "num_hidden_layers": 1, "num_attention_heads": 2,
                                  "intermediate_size": 32, "max_position_embeddings": 32}))
    out = tmp_path / "out"
    common = ["--task_name", "mnli", "--data_dir", str(tmp_path), "--output_dir", str(out),
              "--max_seq_length", "16", "--eval_batch_size", "4", "--predict_batch_size", "4",
              "--jit_compile=false"]
    results = glue_command.main(common + [
        "--do_train", "--do_eval", "--do_predict", "--bert_config_file", str(config),
        "--vocab_file", os.path.join(minilm_dir, "vocab.txt"), "--train_batch_size", "8",
        "--num_train_epochs", "1", "--learning_rate", "1e-3"])
    assert results["eval_matched_num_examples"] == 7
    assert results["eval_mismatched_num_examples"] == 5
    for key in ("eval_matched_accuracy", "eval_mismatched_accuracy"):
        assert results[key] in [k / 7 for k in range(8)] + [k / 5 for k in range(6)]
    written = dict(line.split(" = ") for line in
                   (out / "eval_results.txt").read_text().splitlines())
    assert float(written["eval_matched_accuracy"]) == results["eval_matched_accuracy"]
    for name in ("MNLI-m.tsv", "MNLI-mm.tsv"):
        lines = (out / name).read_text().splitlines()
        assert lines[0] == "index\tprediction"
        assert [line.split("\t")[0] for line in lines[1:]] == [str(100 + i) for i in range(6)]
        assert all(line.split("\t")[1] in labels for line in lines[1:])
    probs = np.loadtxt(out / "test_matched_results.tsv", skiprows=1, usecols=(2, 3, 4))
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-5)
    saved = json.loads((out / "glue_config.json").read_text())
    assert saved["labels"] == list(labels) and saved["text_inputs"] == ["text_a", "text_b"]
    assert {"bert_config.json", "vocab.txt", "best.weights.h5", "last.weights.h5",
            "logs"} <= set(os.listdir(out))
    assert not [f for f in os.listdir(out) if f.endswith(".tmp")]

    # The directory alone rebuilds the model (best weights), and preprocessing + model +
    # postprocess reproduce the CLI's predictions: what an exporter composes.
    from bert_tf.models.run_dir import load_task_model
    model, config, tokenizer = load_task_model(str(out))
    assert config["num_classes"] == 3 and config["max_seq_length"] == 16
    examples, _ = glue.read_glue_tsv(str(data / "test_matched.tsv"),
                                     glue.GLUE_TASKS["mnli"], with_labels=False)
    pre = BertPreprocessor(tokenizer, config["max_seq_length"])
    inputs = pre(tf.constant([e.text_a for e in examples]),
                 tf.constant([e.text_b for e in examples]))
    again = glue.postprocess({"logits": model.predict_on_batch(inputs)["logits"]},
                             config["labels"])
    np.testing.assert_allclose(again["probabilities"], probs, atol=2e-6)


# ----------------------------------------------------------------------------- learning

TOPIC_TEMPLATES = ["everyone talked about the {} today .", "my brother loves {} .",
                   "there was a story about {} in the paper .",
                   "we spent the afternoon on {} ."]
TOPIC_TRAIN = {"sports": ["football", "tennis", "basketball", "golf"],
               "food": ["pizza", "pasta", "soup", "cheese"],
               "weather": ["rain", "snow", "storms", "fog"]}
TOPIC_HELD_OUT = {"sports": ["hockey", "baseball", "volleyball", "boxing"],
                  "food": ["sandwiches", "noodles", "burgers", "salad"],
                  "weather": ["hail", "thunder", "wind", "sunshine"]}


def topic_rows(words, seed):
    rows = [(t.format(w), y) for y, ws in words.items() for w in ws for t in TOPIC_TEMPLATES]
    random.Random(seed).shuffle(rows)
    return rows


# STS-B: "a NOUN is VERB-ing ." pairs scored 2.5 per slot (noun, verb) whose two words
# mean the same; the two words of a slot always differ (synonyms), so string matching
# gives nothing, and the held-out synonym groups are all new words.
STS_TRAIN = {"nouns": [("car", "automobile"), ("kid", "child"), ("man", "guy"),
                       ("couch", "sofa"), ("film", "movie"), ("shop", "store")],
             "verbs": [("running", "jogging"), ("sleeping", "napping"),
                       ("talking", "speaking"), ("shouting", "yelling"),
                       ("laughing", "giggling"), ("cooking", "baking")]}
STS_HELD_OUT = {"nouns": [("dog", "puppy"), ("boat", "ship"), ("doctor", "physician"),
                          ("woman", "lady"), ("gift", "present"), ("cop", "policeman")],
                "verbs": [("crying", "weeping"), ("eating", "dining"), ("jumping", "leaping"),
                          ("walking", "strolling"), ("smiling", "grinning"),
                          ("fighting", "brawling")]}


def write_stsb(path, groups, n, seed, split="train"):
    """An STS-B file in GLUE's layout of `split` (test: no score column). Returns the
    gold scores."""
    rng = random.Random(seed)
    header, template = LAYOUTS["stsb"][split]
    rows, scores = [], []
    for i in range(n):
        same_noun, same_verb = [(1, 1), (1, 0), (0, 1), (0, 0)][i % 4]
        words = []
        for kind, same in (("nouns", same_noun), ("verbs", same_verb)):
            group = rng.randrange(len(groups[kind]))
            first, second = rng.sample(groups[kind][group], 2)
            if not same:
                other = rng.choice([g for g in range(len(groups[kind])) if g != group])
                second = rng.choice(groups[kind][other])
            words.append((first, second))
        (n1, n2), (v1, v2) = words
        row = list(template)
        row[0], row[7], row[8] = str(i), f"a {n1} is {v1} .", f"a {n2} is {v2} ."
        scores.append(2.5 * (same_noun + same_verb))
        if split == "train":
            row[9] = f"{scores[-1]:.3f}"
        rows.append(row)
    write_tsv(path, header, rows)
    return scores


def write_topic_files(tmp_path):
    """train.csv (id, text, topic) and held_out.jsonl (text) of the topic sentences;
    returns the held-out (text, topic) rows."""
    with open(tmp_path / "train.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text", "topic"])
        writer.writerows([i, s, y] for i, (s, y) in enumerate(topic_rows(TOPIC_TRAIN, 0)))
    held_out = topic_rows(TOPIC_HELD_OUT, 1)
    with open(tmp_path / "held_out.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": text}) + "\n" for text, _ in held_out)
    return held_out


def fine_tune(tmp_path, minilm_dir, pretrained, argv):
    """One CLI call that trains, then predicts the held-out file given as the test
    split: a run without an evaluation set predicts with its last weights, so the
    held-out numbers come from no checkpoint chosen on them. Returns the output dir."""
    import keras
    out = tmp_path / ("minilm" if pretrained else "random")
    init = ["--init_checkpoint", str(minilm_dir)] if pretrained else [
        "--bert_config_file", os.path.join(minilm_dir, "config.json"),
        "--vocab_file", os.path.join(minilm_dir, "vocab.txt")]
    keras.backend.clear_session()
    glue_command.main(argv + init + ["--output_dir", str(out), "--do_train", "--do_predict",
                             "--jit_compile=false", "--seed", "1",
                             "--predict_batch_size", "64"])
    return out


def read_results(path):
    """The rows of a predictions TSV as dicts keyed by its header."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    return header, [dict(zip(header, line.split("\t"))) for line in lines[1:]]


@pytest.fixture(scope="module")
def topic_run(tmp_path_factory, minilm_dir):
    """run(pretrained, length_batching) -> output dir of the topic classifier fine-tuned
    by the CLI at max_seq_length 64 (the sentences take 8-16 pieces); and the held-out
    (text, topic) rows. Each run is made once per module: MiniLM's with sorted batches
    serves both the learning test and the length-batching test, since a
    CLI run costs ~30 s, most of it building and tracing the model."""
    data = tmp_path_factory.mktemp("topics")
    held_out = write_topic_files(data)
    outputs = {}

    def run(pretrained, length_batching):
        key = (pretrained, length_batching)
        if key not in outputs:
            run_dir = data / length_batching
            run_dir.mkdir(exist_ok=True)
            outputs[key] = fine_tune(run_dir, minilm_dir, pretrained, [
                "--task_name", "custom", "--text_a_column", "text", "--label_column",
                "topic", "--max_seq_length", "64", "--train_batch_size", "16",
                "--learning_rate", "1e-4", "--num_train_epochs", "3", "--train_file",
                str(data / "train.csv"), "--test_file", str(data / "held_out.jsonl"),
                "--length_batching", length_batching])
        return outputs[key]

    return run, held_out


@pytest.mark.slow
def test_custom_csv_topics_learn_from_minilm_not_from_random(topic_run):
    """The custom classifier: three named labels from a CSV, 48 training sentences; the
    48 held-out sentences (a JSONL file to predict) use topic words training never
    shows. Batches sorted by length are cut to the sentences' 16 pieces.
    Chance is 1/3."""
    run, held_out = topic_run
    accuracy = {}
    for name in ("minilm", "random"):
        out = run(name == "minilm", "sort")
        saved = json.loads((out / "glue_config.json").read_text())
        assert saved["labels"] == ["food", "sports", "weather"]
        header, rows = read_results(out / "test_results.tsv")
        assert header == ["index", "prediction", "probability_food", "probability_sports",
                          "probability_weather"]
        assert [r["index"] for r in rows] == [str(i) for i in range(len(held_out))]
        accuracy[name] = metrics.accuracy([y for _, y in held_out],
                                          [r["prediction"] for r in rows])
    print(f"custom topics held-out accuracy: MiniLM {accuracy['minilm']:.4f}, "
          f"random init {accuracy['random']:.4f}")
    assert accuracy["minilm"] >= 0.8
    assert accuracy["random"] <= 0.55
    assert accuracy["minilm"] - accuracy["random"] >= 0.3


@pytest.mark.slow
def test_stsb_regression_learns_from_minilm_not_from_random(tmp_path, minilm_dir):
    """Sentence-pair regression (scores 0 / 2.5 / 5) from GLUE's STS-B files; the
    held-out pairs (test.tsv, scored through the STS-B.tsv submission file) use only new
    words."""
    data = tmp_path / "STS-B"
    data.mkdir()
    write_stsb(data / "train.tsv", STS_TRAIN, 128, 0)
    gold = write_stsb(data / "test.tsv", STS_HELD_OUT, 64, 1, split="test")
    # Regression needs its outputs at full scale (MSE on 0-5), which takes more steps
    # than classification: 32 steps of 16 at 3e-4 (18 steps of 16, or 32 of 8, leave
    # Pearson ~0.2).
    argv = ["--task_name", "stsb", "--data_dir", str(data), "--max_seq_length", "16",
            "--train_batch_size", "16", "--learning_rate", "3e-4", "--num_train_epochs", "4"]
    results = {}
    for name in ("minilm", "random"):
        out = fine_tune(tmp_path, minilm_dir, name == "minilm", argv)
        header, rows = read_results(out / "STS-B.tsv")
        assert header == ["index", "prediction"]
        assert [r["index"] for r in rows] == [str(i) for i in range(len(gold))]
        scores = [float(r["prediction"]) for r in rows]
        assert all(0.0 <= s <= 5.0 for s in scores)
        results[name] = metrics.glue_metrics("stsb", gold, scores)
    print("stsb held-out Pearson / Spearman: MiniLM {pearson:.4f} / {spearman:.4f}".format(
        **results["minilm"]) + ", random init {pearson:.4f} / {spearman:.4f}".format(
        **results["random"]))
    assert results["minilm"]["pearson"] >= 0.6
    assert results["random"]["pearson"] <= 0.3
    assert results["minilm"]["pearson"] - results["random"]["pearson"] >= 0.4


@pytest.mark.slow
def test_length_batching_keeps_held_out_accuracy(topic_run):
    """The topic classifier from MiniLM at max_seq_length 64 (the sentences take 8-16
    pieces): batches grouped by length and cut to their longest (sort and bucket) reach
    the held-out accuracy of batches padded to 64 (google's way) on this easy set. The
    default (longest) trains on off's batches (tests/text/test_batching.py); grouping can
    cost accuracy on small templated sets (docs/benchmarks.md)."""
    run, held_out = topic_run
    accuracy = {}
    for mode in ("off", "sort", "bucket"):
        _, rows = read_results(run(True, mode) / "test_results.tsv")
        accuracy[mode] = metrics.accuracy([y for _, y in held_out],
                                          [r["prediction"] for r in rows])
    print(f"custom topics held-out accuracy at seq 64: padded to 64 {accuracy['off']:.4f}, "
          f"sorted {accuracy['sort']:.4f}, bucketed {accuracy['bucket']:.4f}")
    for mode in ("sort", "bucket"):
        assert accuracy[mode] >= 0.8
        assert abs(accuracy["off"] - accuracy[mode]) <= 0.1
