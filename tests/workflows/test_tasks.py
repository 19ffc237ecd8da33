"""Fine-tuning workflows that must lose nothing and mix nothing: a resume refused for other
settings leaves the run folder byte for byte as it was; a SQuAD v2.0 file, JSONL labels
of mixed JSON kinds, --do_lower_case=false over an uncased vocabulary and a
--max_seq_length without room for the text are each one `error:` line before anything
is written, as is an input inside --output_dir under a name the family writes there (its
predictions, NER's feature cache); a vocabulary smaller than the embedding table is said
in one note.

A refused command asserts: exit status 1, exactly one line on stderr, starting `error: `
and holding the expected text (the file or flag, and what was expected), and the output
folder's tree_hash unchanged (absent folders stay absent)."""

import json
import os
import random

import pytest

from tests.testing import interrupt_at, run_command, tree_hash

TINY = {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 64}
WORDS = "good great fine bad awful poor film movie plot actor scene music story".split()


def assert_refused(module, argv, out, expect, capsys):
    """`module` refuses `argv` in one line holding every text of `expect`, and leaves
    `out` (a folder, or a path that does not exist) exactly as it was."""
    before = tree_hash(out) if os.path.exists(out) else None
    code, lines = run_command(module, argv, capsys)
    assert code == 1, (code, lines)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    for text in (expect if isinstance(expect, tuple) else (expect,)):
        assert text in lines[0], lines[0]
    after = tree_hash(out) if os.path.exists(out) else None
    assert after == before
    return lines[0]


@pytest.fixture
def files(tmp_path, minilm_dir):
    """A tiny config over MiniLM's (uncased) vocabulary and small training sets."""
    rng = random.Random(0)
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(TINY))
    train = tmp_path / "train.tsv"
    with open(train, "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n")
        for _ in range(16):
            words = [rng.choice(WORDS) for _ in range(rng.randint(2, 8))]
            good = sum(w in ("good", "great", "fine") for w in words)
            f.write(f"{' '.join(words)}\t{int(good >= 1)}\n")
    context = ("The cat sat on the mat. It was a sunny day in the park. Dogs like to run "
               "after balls. She read the whole book in one night. The train left the "
               "station at noon. A small boat crossed the lake.")
    qas = [{"id": f"q{i}", "question": "Where did the cat sit?",
            "answers": [{"text": "on the mat", "answer_start": 12}]} for i in range(3)]
    squad = tmp_path / "squad.json"
    squad.write_text(json.dumps({"version": "v1.1", "data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": qas}]}]}))
    return {"config": str(config), "vocab": os.path.join(minilm_dir, "vocab.txt"),
            "train": str(train), "squad": str(squad), "context": context, "qas": qas,
            "root": tmp_path}


# ------------------------------------------------------------ 1. a refused resume

def glue_argv(files, out, **flags):
    values = dict(task_name="custom", labels="0,1", train_file=files["train"],
                  bert_config_file=files["config"], vocab_file=files["vocab"],
                  output_dir=out, max_seq_length=16, train_batch_size=4,
                  num_train_epochs=1, learning_rate=1e-3)
    values.update(flags)
    return ["--do_train"] + [f"--{k}={v}" for k, v in values.items() if v is not None]


def test_glue_resume_with_other_settings_leaves_the_run_folder_unchanged(
        files, capsys, monkeypatch):
    out = str(files["root"] / "run")
    interrupt_at(monkeypatch, 2)
    code, lines = run_command("tasks.glue", glue_argv(files, out), capsys)
    monkeypatch.undo()
    state = os.path.join(out, "resume", "step-2")
    assert (code, lines[-1:]) == (1, [f"error: SIGTERM at step 2: saved {state}; run the "
                                      f"same command again to resume from it"])
    saved = json.load(open(os.path.join(out, "glue_config.json")))
    assert (saved["labels"], saved["max_seq_length"]) == (["0", "1"], 16)

    # A longer sequence changes the stride it resolves to (half a window) as well.
    for flags, differs in (({"max_seq_length": 64}, "max_seq_length: 16 there, 64 now; "
                                                     "doc_stride: 7 there, 31 now"),
                           ({"learning_rate": 2e-3},
                            "learning_rate: 0.001 there, 0.002 now"),
                           ({"labels": "1,0"}, "labels: ['0', '1'] there, ['1', '0'] "
                                               "now")):
        assert_refused("tasks.glue", glue_argv(files, out, **flags), out,
                       (f"error: {state} is the resumable state of a run with other "
                        f"settings ({differs})", f"delete {os.path.join(out, 'resume')}"),
                       capsys)
    # A flag that only says how the run goes (RESUME_FREE) resumes it; the run ends with
    # the settings it started with.
    code, lines = run_command("tasks.glue", glue_argv(files, out, eval_batch_size=2), capsys)
    assert code == 0, lines
    assert json.load(open(os.path.join(out, "glue_config.json"))) == saved
    assert not os.path.exists(os.path.join(out, "resume"))
    steps = [json.loads(line)["step"] for line in open(os.path.join(out, "train_log.jsonl"))]
    assert steps == [1, 2, 3, 4]


def squad_argv(files, out, train_file=None, **flags):
    values = dict(train_file=train_file or files["squad"], bert_config_file=files["config"],
                  vocab_file=files["vocab"], output_dir=out, max_seq_length=32,
                  max_query_length=8, doc_stride=8, train_batch_size=2, num_train_epochs=1)
    values.update(flags)
    return ["--do_train"] + [f"--{k}={v}" for k, v in values.items()]


def test_a_new_training_never_sits_beside_an_earlier_runs_weights(files, capsys,
                                                                  monkeypatch):
    """Run A (labels 0,1) is finished; run B (labels 1,0, a new training, no resumable
    state) starts in the same folder and is killed before it saves any weights. The
    folder then holds B's settings and no weights at all: never A's weights under B's
    labels, which an export would serve with the classes swapped."""
    from tasks import driver
    out = str(files["root"] / "run")
    code, lines = run_command("tasks.glue", glue_argv(files, out), capsys)
    assert code == 0, lines
    assert os.path.exists(os.path.join(out, "last.weights.h5"))

    def killed(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(driver, "fit", killed)
    code, lines = run_command("tasks.glue", glue_argv(files, out, labels="1,0"), capsys)
    assert code == 130, lines
    assert lines[0] == (f"removing {os.path.join(out, 'last.weights.h5')} of an earlier "
                        f"run (a new training starts here)")
    assert json.load(open(os.path.join(out, "glue_config.json")))["labels"] == ["1", "0"]
    assert not any(name.endswith(".weights.h5") for name in os.listdir(out))


def test_squad_resume_with_other_doc_stride_leaves_the_run_folder_unchanged(
        files, capsys, monkeypatch):
    out = str(files["root"] / "squad_run")
    interrupt_at(monkeypatch, 1)
    code, lines = run_command("tasks.squad", squad_argv(files, out), capsys)
    monkeypatch.undo()
    state = os.path.join(out, "resume", "step-1")
    assert code == 1 and lines[-1].startswith(f"error: SIGTERM at step 1: saved {state}"), \
        lines
    assert_refused("tasks.squad", squad_argv(files, out, doc_stride=4), out,
                   f"error: {state} is the resumable state of a run with other settings "
                   f"(doc_stride: 8 there, 4 now; steps_per_epoch: 6 there, 10 now)", capsys)
    assert_refused("tasks.squad", squad_argv(files, out, max_query_length=6), out,
                   "(max_query_length: 8 there, 6 now", capsys)
    assert json.load(open(os.path.join(out, "squad_config.json")))["doc_stride"] == 8


@pytest.mark.slow
def test_ner_resume_with_other_windows_or_line_unit_leaves_the_run_folder_unchanged(
        files, capsys, monkeypatch):
    """NER's --doc_stride and --line_unit shape what a run learns from (the windows of
    long sentences, the words of a file): a resume with another value of either is
    refused, the folder as it was; the run's doc_stride (half a window) stays recorded."""
    train = files["root"] / "ner.txt"
    sentence = "\n".join(f"{w} {'B-LOC' if w == 'paris' else 'O'}" for w in
                         "we went to paris and then to the park near the river".split())
    train.write_text((sentence + "\n\n") * 12, encoding="utf-8")
    out = str(files["root"] / "ner_run")
    argv = ["--do_train", f"--train_file={train}", f"--bert_config_file={files['config']}",
            f"--vocab_file={files['vocab']}", f"--output_dir={out}", "--max_seq_length=10",
            "--train_batch_size=4", "--num_train_epochs=1"]
    interrupt_at(monkeypatch, 1)
    code, lines = run_command("tasks.ner", argv, capsys)
    monkeypatch.undo()
    state = os.path.join(out, "resume", "step-1")
    assert code == 1 and lines[-1].startswith(f"error: SIGTERM at step 1: saved {state}"), \
        lines
    assert_refused("tasks.ner", argv + ["--doc_stride=2"], out,
                   f"error: {state} is the resumable state of a run with other settings "
                   f"(doc_stride: 4 there, 2 now", capsys)
    assert_refused("tasks.ner", argv + ["--line_unit=character"], out,
                   "(line_unit: 'word' there, 'character' now", capsys)
    assert json.load(open(os.path.join(out, "ner_config.json")))["doc_stride"] == 4
    # The stride and the unit named at what they resolved to (half a window; the file's
    # own words under auto): the same run, resumed to its end.
    code, lines = run_command("tasks.ner", argv + ["--doc_stride=4", "--line_unit=word"],
                              capsys)
    assert code == 0, lines
    assert not os.path.exists(os.path.join(out, "resume"))


def test_resume_compares_settings_as_they_resolved(files, capsys, monkeypatch):
    """A classifier in windows started without --doc_stride or --labels (half a window:
    7 pieces at --max_seq_length=16; the training file's labels, sorted) resumes when
    the same run is given them explicitly at those values: the state compares the
    settings as glue_config.json keeps them, not as the flags were spelled. Another
    stride is still refused, the folder as it was."""
    out = str(files["root"] / "windows_run")
    argv = glue_argv(files, out, labels=None, max_windows=3)
    interrupt_at(monkeypatch, 2)
    code, lines = run_command("tasks.glue", argv, capsys)
    monkeypatch.undo()
    state = os.path.join(out, "resume", "step-2")
    assert code == 1 and lines[-1].startswith(f"error: SIGTERM at step 2: saved {state}"), \
        lines
    saved = json.load(open(os.path.join(out, "glue_config.json")))
    assert (saved["labels"], saved["doc_stride"], saved["window_pooling"]) == \
        (["0", "1"], 7, "mean")
    assert_refused("tasks.glue", argv + ["--doc_stride=5"], out,
                   f"error: {state} is the resumable state of a run with other settings "
                   f"(doc_stride: 7 there, 5 now)", capsys)
    explicit = glue_argv(files, out, labels="0, 1", max_windows=3, doc_stride=7,
                         window_pooling="mean")
    code, lines = run_command("tasks.glue", explicit, capsys)
    assert code == 0, lines
    assert json.load(open(os.path.join(out, "glue_config.json"))) == saved
    steps = [json.loads(line)["step"] for line in open(os.path.join(out, "train_log.jsonl"))]
    assert steps == [1, 2, 3, 4]


@pytest.mark.parametrize("module,flags", [
    ("tasks.glue", ["--max_windows=3"]),
    ("tasks.families.multilabel.__main__", ["--max_windows=0"]),
    ("tasks.ner", []),
    ("bert_tf.extract_features", []),
])
def test_a_doc_stride_past_the_window_is_refused(files, capsys, module, flags):
    """--doc_stride more than a window's pieces (--max_seq_length=16: 14) in every
    command whose window has that room: one line naming the flag, its value and the
    largest it may be, before anything is written; 14 itself is accepted as far as
    that check goes (windows end to end)."""
    out = str(files["root"] / "out")
    if module == "bert_tf.extract_features":
        text = files["root"] / "lines.txt"
        text.write_text("good film\n", encoding="utf-8")
        argv = [f"--input_file={text}", f"--output_file={out}",
                f"--init_checkpoint={os.path.dirname(files['vocab'])}"]
    else:
        train = files["train"]
        if module == "tasks.ner":
            train = files["root"] / "ner.txt"
            train.write_text("paris B-LOC\nis O\n\n", encoding="utf-8")
        elif module == "tasks.families.multilabel.__main__":
            train = files["root"] / "multi.jsonl"
            train.write_text('{"text": "good film", "labels": ["a"]}\n', encoding="utf-8")
        argv = ["--do_train", f"--train_file={train}", f"--output_dir={out}",
                f"--bert_config_file={files['config']}", f"--vocab_file={files['vocab']}"]
        if module == "tasks.glue":
            argv += ["--task_name=custom"]
    argv += ["--max_seq_length=16"] + flags
    assert_refused(module, argv + ["--doc_stride=15"], out,
                   "error: --doc_stride=15: more than a window holds (14 pieces: "
                   "--max_seq_length=16 less [CLS] and [SEP]); windows would start 14 "
                   "pieces apart, not 15, leaving no overlap: give at most 14", capsys)
    assert not os.path.exists(out)
    from bert_tf.text.windows import check_doc_stride
    check_doc_stride(14, 16)


@pytest.mark.parametrize("module", ["tasks.glue", "tasks.families.multilabel.__main__"])
def test_window_flags_of_a_run_that_cuts_its_texts_are_refused(files, capsys, module):
    """--doc_stride or --window_pooling without --max_windows (a classifier that cuts a
    long text, google's default) would be ignored, the rest of the text never read: one
    line says so and how to have windows, before anything is written."""
    out = str(files["root"] / "out")
    train = files["train"]
    if module != "tasks.glue":
        train = files["root"] / "multi.jsonl"
        train.write_text('{"text": "good film", "labels": ["a"]}\n', encoding="utf-8")
    argv = ["--do_train", f"--train_file={train}", f"--output_dir={out}",
            f"--bert_config_file={files['config']}", f"--vocab_file={files['vocab']}",
            "--max_seq_length=16"] + (["--task_name=custom"] if module == "tasks.glue" else [])
    for flag in ("--doc_stride=7", "--window_pooling=max"):
        assert_refused(module, argv + [flag], out,
                       f"error: {flag}: only texts read in windows have it, and this run "
                       f"cuts a text at max_seq_length - 2 pieces (max_windows 1): add "
                       f"--max_windows (0: every window), or drop {flag.split('=')[0]}",
                       capsys)
        assert_refused(module, argv + [flag, "--max_windows=1"], out,
                       "this run cuts a text", capsys)
    assert not os.path.exists(out)


# ------------------------------------------------- 2. a SQuAD v2.0 file read as v1.1

def test_squad_v2_file_without_the_flag_is_refused(files, capsys):
    from tasks.families.squad.data import read_squad_examples
    qas = files["qas"] + [{"id": "x", "question": "What colour is the cat?",
                           "answers": [], "is_impossible": True}]
    path = files["root"] / "v2.json"
    path.write_text(json.dumps({"version": "v2.0", "data": [{"paragraphs": [
        {"context": files["context"], "qas": qas}]}]}))
    out = str(files["root"] / "v2_run")
    assert_refused("tasks.squad", squad_argv(files, out, train_file=str(path)), out,
                   f"error: {path}: 1 of 4 questions are unanswerable (is_impossible); pass "
                   f"--version_2_with_negative to train on SQuAD v2.0", capsys)
    assert not os.path.exists(out)
    # With the flag it trains on all four; predicting keeps every question, as before.
    examples = read_squad_examples(str(path), version_2_with_negative=True,
                                   is_training=True)[0]
    assert [e.is_impossible for e in examples] == [False] * 3 + [True]
    assert len(read_squad_examples(str(path), is_training=False)[0]) == 4
    # A v1.1 file whose question merely lacks an answer is no v2.0 file: counted, skipped.
    qas[-1].pop("is_impossible")
    path.write_text(json.dumps({"data": [{"paragraphs": [
        {"context": files["context"], "qas": qas}]}]}))
    examples, _, _, report = read_squad_examples(str(path), is_training=True)
    assert len(examples) == 3 and report["no_answer"] == 1


# ------------------------------------------------------- 3. JSONL labels of mixed kinds

def test_jsonl_labels_of_mixed_json_kinds_are_refused(files, capsys):
    from tasks.families.classification.data import DataError, read_custom_file
    root = files["root"]

    def jsonl(name, labels):
        path = root / name
        path.write_text("".join(json.dumps({"sentence": f"row {i}", "label": label}) + "\n"
                                for i, label in enumerate(labels)))
        return str(path)
    for labels, line, first in (([1, 0, "1"], 3, '"1" (string) where line 1 has 1 '
                                                   '(whole number)'),
                                (["1", "0", 1.0], 3, '1.0 (decimal number) where line 1 has '
                                                     '"1" (string)'),
                                ([1, 0, True], 3, "true (true/false) where line 1 has 1 "
                                                  "(whole number)"),
                                ([1.0, 0.0, 1], 3, "1 (whole number) where line 1 has 1.0 "
                                                   "(decimal number)")):
        path = jsonl("mixed.jsonl", labels)
        with pytest.raises(DataError) as error:
            read_custom_file(path, "sentence", label_column="label")
        assert str(error.value) == (f"{path}:{line}: label {first}: write every label of "
                                    f"the file the same way")
    # The command: one line, nothing written.
    out = str(root / "mixed_run")
    assert_refused("tasks.glue", glue_argv(files, out, train_file=path, labels=None), out,
                   f"error: {path}:3: label 1 (whole number) where line 1 has 1.0", capsys)
    assert not os.path.exists(out)
    # Against given names a label is found or not, whatever its kind (an unknown one is
    # a bad row); one kind per file reads as before; regression's numbers may be whole
    # or decimal.
    examples, report = read_custom_file(path, "sentence", label_column="label",
                                        labels=["0", "1"])
    assert [e.label for e in examples] == ["1"] and report.skipped["unknown_label"] == 2
    for labels, names in (([1, 0, 1], {"1", "0"}), (["a", "b", "a"], {"a", "b"}),
                          ([True, False], {"true", "false"}), ([1.0, 0.5], {"1.0", "0.5"})):
        examples, _ = read_custom_file(jsonl("clean.jsonl", labels), "sentence",
                                       label_column="label")
        assert {e.label for e in examples} == names
    examples, _ = read_custom_file(jsonl("scores.jsonl", [1, 2.5, "3"]), "sentence",
                                   label_column="label", regression=True)
    assert [e.label for e in examples] == [1.0, 2.5, 3.0]


# ------------------------------------------ 4. --do_lower_case=false, uncased vocabulary

def test_uncased_vocabulary_with_do_lower_case_false_is_refused(files, tmp_path, capsys):
    from bert_tf.text.tokenization import check_case_matches_vocab
    vocab = files["vocab"]                                   # bert-base-uncased's
    expect = (f"--do_lower_case=false with {vocab}, an uncased vocabulary (lowercase a-z, "
              f"no token with an uppercase A-Z): every word with a capital letter would "
              f"become [UNK]; pass --do_lower_case=true")
    with pytest.raises(ValueError) as error:
        check_case_matches_vocab(vocab, False)
    assert str(error.value) == expect
    check_case_matches_vocab(vocab, True)

    def vocab_of(name, tokens):
        path = tmp_path / name
        path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + tokens)
                        + "\n", encoding="utf-8")
        return str(path)
    check_case_matches_vocab(vocab_of("cased.txt", ["the", "The", "##s"]), False)
    check_case_matches_vocab(vocab_of("chinese.txt", ["的", "是", "##中", "1"]), False)
    # Markers' capitals are no cased words.
    with pytest.raises(ValueError, match="an uncased vocabulary"):
        check_case_matches_vocab(vocab_of("markers.txt", ["[unused0]", "the", "##s"]), False)

    out = str(tmp_path / "run")
    assert_refused("tasks.glue", glue_argv(files, out, do_lower_case="false"), out,
                   "error: " + expect, capsys)
    assert not os.path.exists(out)
    lines = tmp_path / "lines.txt"
    lines.write_text("The cat sat.\n")
    # Beside the checkpoint's folder (tmp_path): never inside it.
    features = str(tmp_path.parent / f"{tmp_path.name}-features.jsonl")
    assert_refused("bert_tf.extract_features",
                   [f"--input_file={lines}", f"--output_file={features}",
                    f"--init_checkpoint={files['root']}", f"--vocab_file={vocab}",
                    "--do_lower_case=false"], features, "error: " + expect, capsys)


# ------------------------------------------------ 5. a vocabulary smaller than the table

def test_smaller_vocabulary_than_the_embedding_table_is_noted(tmp_path, capsys):
    from bert_tf.text.tokenization import check_vocab_fits
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"t{i}\n" for i in range(60)))
    capsys.readouterr()
    check_vocab_fits(str(vocab), 64)
    assert capsys.readouterr().err == (f"note: {vocab} has 60 tokens, the model's embedding "
                                       f"table 64 rows: ids 60..63 are never produced\n")
    check_vocab_fits(str(vocab), 60)
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="60 tokens, more than the model's vocab_size 59"):
        check_vocab_fits(str(vocab), 59)


# ------------------------------------------------ 6. no room for the text of a pair

def test_max_seq_length_without_room_for_the_texts_is_refused(files, tmp_path, capsys):
    from tasks import driver
    from tasks.families.classification import task as glue
    pair = tmp_path / "pairs.tsv"
    pair.write_text("sentence\tother\tlabel\n" + "".join(
        f"good film {i}\tbad plot\t{i % 2}\n" for i in range(8)))
    out = str(tmp_path / "run")
    assert_refused("tasks.glue", glue_argv(files, out, train_file=str(pair),
                                           text_b_column="other", max_seq_length=4), out,
                   "error: --max_seq_length must be >= 5 ([CLS] A [SEP] B [SEP] with one "
                   "token of each text), got 4", capsys)
    assert_refused("tasks.glue", glue_argv(files, out, max_seq_length=2), out,
                   "error: --max_seq_length must be >= 3 ([CLS] A [SEP] with one token of "
                   "each text), got 2", capsys)
    swag = tmp_path / "swag.csv"
    swag.write_text("sent1,sent2,ending0,ending1,ending2,ending3,label\n" + "".join(
        f"The cat sat {i},Then,it ended.,it rained.,it stopped.,it grew.,{i % 4}\n"
        for i in range(8)))
    assert_refused("tasks.swag", [
        "--do_train", f"--train_file={swag}", f"--bert_config_file={files['config']}",
        f"--vocab_file={files['vocab']}", f"--output_dir={out}", "--max_seq_length=4"], out,
        "error: --max_seq_length must be >= 5 ([CLS] A [SEP] B [SEP]", capsys)
    # SQuAD's own rule is stricter (the question's room is kept whole).
    assert_refused("tasks.squad", squad_argv(files, out, max_seq_length=11), out,
                   "error: --max_seq_length (11) must be greater than --max_query_length "
                   "(8) + 3", capsys)
    assert not os.path.exists(out)
    # Which tasks pack pairs; the shortest lengths that fit are accepted.
    task = glue.ClassificationTask()
    config = glue.ClassificationConfig(output_dir=out)
    assert [task.text_segments(config.replace(task_name=name)) for name in
            ("mrpc", "mnli", "stsb", "sst2", "cola")] == [2, 2, 2, 1, 1]
    assert task.text_segments(config.replace(text_b_column="other")) == 2
    driver.check_seq_length(5, 2)
    driver.check_seq_length(3, 1)


# ------------------------------------------------------------ an input the run would write over

@pytest.mark.parametrize("module,flags,written", [
    ("tasks.glue", ["--task_name=custom", "--labels=0,1", "--test_file=@/test_results.tsv"],
     "test_results.tsv"),
    ("tasks.squad", ["--predict_file=@/predictions.json"], "predictions.json"),
    ("tasks.ner", ["--predict_file=@/predictions.txt"], "predictions.txt"),
    ("tasks.ner", ["--feature_based", "--cache_features", "--predict_file=@/../dev.txt",
                   "--extracted_features=@/feature_cache/*.tfrecord"], "feature_cache"),
    ("tasks.swag", ["--test_file=@/test_results.tsv"], "test_results.tsv"),
    ("tasks.families.multilabel.__main__", ["--test_file=@/test_results.jsonl"],
     "test_results.jsonl"),
], ids=["glue", "squad", "ner", "ner-extracted_features", "swag", "multilabel"])
def test_an_input_named_as_the_runs_predictions_is_refused(tmp_path, capsys, module, flags,
                                                           written):
    """An input inside --output_dir under a name the family writes there (its predictions,
    NER's feature cache, which --extracted_features may point into) would be overwritten
    by the run: refused in one line naming both before anything is read or written."""
    out = tmp_path / "run"
    os.makedirs(out / "feature_cache")
    for name in ("test_results.tsv", "predictions.json", "predictions.txt",
                 "test_results.jsonl", "feature_cache/part-0.tfrecord", "../dev.txt"):
        (out / name).write_text("kept\n")
    argv = [f.replace("@", str(out)) for f in flags]
    line = assert_refused(module, ["--do_predict", f"--output_dir={out}", *argv], str(out),
                          (f"--output_dir={out} holds the input --",
                           f"the command writes {out / written} there"), capsys)
    assert "choose another --output_dir" in line
