"""The data workflows end to end, as a user runs them: the README's pretraining recipe
(shards, then `--input_file='DIR/train*'`), input names that look like globs, stopping
create_pretraining_data with SIGTERM, and quickstart reruns into the same --work_dir.
Every refusal is one `error:` line, exit status 1, and leaves the files as they were."""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from bert_tf import create_pretraining_data as cpd
from bert_tf.base import file_patterns
from bert_tf import quickstart
from bert_tf.training.data import expand_gfile_patterns
from bert_tf.data import pipeline
from tests import ROOT

try:
    from tests.testing import tree_hash
except ImportError:  # pytest run without the repository root on sys.path
    from testing import tree_hash

REPO = ROOT
TINY_SHARDS = ["--max_seq_length", 32, "--max_predictions_per_seq", 5, "--dupe_factor", 1,
               "--num_workers", 1, "--quiet"]


@pytest.fixture(scope="module")
def vocab_file(minilm_dir):
    return os.path.join(str(minilm_dir), "vocab.txt")


def _slice(stdlib_corpus, path, start, size):
    """Whole documents of the stdlib corpus from about `start`, about `size` bytes."""
    text = open(stdlib_corpus, encoding="utf-8").read()
    begin = text.index("\n\n", start) + 2 if start else 0
    end = text.index("\n\n", begin + size) + 2
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[begin:end])
    return str(path)


def _refused(capsys, call, *expected):
    """Runs `call` (a command's main), which must stop with exit status 1 and exactly
    one stderr line, `error: ...`, holding each of `expected`; returns that line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        call()
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    for text in expected:
        assert text in err[0], (text, err[0])
    return err[0]


# ------------------------------------------------------------------ what a pattern names

def test_a_glob_skips_side_files_and_an_existing_name_is_literal(tmp_path):
    names = ["train-00000-of-00002", "train-00001-of-00002", "train.summary.json",
             "train-00001-of-00002.tmp", "train-00001-of-00002.tmp-part0000003",
             "train.part", "train.lock", "corpus [2020].txt", "corpus 2.txt"]
    for name in names:
        (tmp_path / name).write_text("x")
    d = str(tmp_path)
    shards = [os.path.join(d, n) for n in names[:2]]
    for expand in (lambda p, **kw: file_patterns.match(p, **kw),
                   lambda p, **kw: expand_gfile_patterns(p, **kw),
                   lambda p, **kw: file_patterns.expand_file_patterns(p)):
        assert expand(os.path.join(d, "train*")) == shards
    # Named without glob characters, a side file is what the user asked for.
    summary = os.path.join(d, "train.summary.json")
    assert file_patterns.match(summary) == [summary]
    assert expand_gfile_patterns(summary) == [summary]
    # `[2020]` is a character class as a glob ("corpus 2.txt" matches it): the file that
    # exists under exactly that name wins.
    literal = os.path.join(d, "corpus [2020].txt")
    assert file_patterns.match(literal) == [literal]
    assert expand_gfile_patterns(literal) == [literal]
    assert pipeline.expand_inputs(literal) == [literal]
    assert file_patterns.match(os.path.join(d, "corpus [2].txt")) == \
        [os.path.join(d, "corpus 2.txt")]
    # A run's own outputs in its output folder (skip) are left out of a glob.
    (tmp_path / "train_log.jsonl").write_text("{}")
    (tmp_path / "train").mkdir()
    assert len(expand_gfile_patterns(os.path.join(d, "train*"), skip=[
        os.path.join(d, "train"), os.path.join(d, "train_log.jsonl")])) == 2
    with pytest.raises(ValueError, match="is a directory"):
        expand_gfile_patterns(os.path.join(d, "train*"))


def test_a_file_named_like_a_glob_is_read_by_every_command(tmp_path, stdlib_corpus,
                                                           vocab_file, capsys):
    from bert_tf import build_vocab
    corpus = _slice(stdlib_corpus, tmp_path / "corpus [2020].txt", 0, 30_000)
    summary = cpd.main(["--input_file", corpus, "--output_file", str(tmp_path / "s" / "train"),
                        "--vocab_file", vocab_file, *map(str, TINY_SHARDS)])
    assert summary["examples"] > 100
    assert summary["config"]["inputs"][0]["path"] == corpus
    build_vocab.main([f"--input_file={corpus}", f"--output_file={tmp_path / 'vocab.txt'}",
                      "--vocab_size=300"])
    tokens = open(tmp_path / "vocab.txt", encoding="utf-8").read().split("\n")
    assert "[MASK]" in tokens and "return" in tokens


# ------------------------------------------------------------------ the README's recipe

def test_readme_recipe_trains_on_the_shards_glob(tmp_path, stdlib_corpus, vocab_file, capsys):
    from bert_tf import run_pretraining
    corpus = _slice(stdlib_corpus, tmp_path / "corpus.txt", 0, 30_000)
    shards = tmp_path / "shards"
    cpd.main(["--input_file", corpus, f"--output_file={shards / 'train'}", "--num_shards=2",
              f"--vocab_file={vocab_file}", "--do_lower_case", *map(str, TINY_SHARDS)])
    assert sorted(os.listdir(shards)) == ["train-00000-of-00002", "train-00001-of-00002",
                                          "train.summary.json"]
    common = [f"--output_dir={tmp_path / 'run'}", "--preset=tiny", f"--vocab_file={vocab_file}",
              "--do_train", "--train_batch_size=4", "--max_seq_length=32",
              "--max_predictions_per_seq=5", "--num_train_steps=1", "--num_warmup_steps=0",
              "--learning_rate=1e-4"]
    capsys.readouterr()
    run_pretraining.main([f"--input_file={shards}/train*"] + common)
    assert "2 training file(s)" in capsys.readouterr().out
    with open(tmp_path / "run" / "train_log.jsonl") as f:
        assert [json.loads(line)["step"] for line in f] == [1]
    # The summary named explicitly is still read as an input, and refused as one.
    before = tree_hash(str(tmp_path))
    _refused(capsys, lambda: run_pretraining.main(
        [f"--input_file={shards / 'train.summary.json'}"] + common),
        "train.summary.json: not a TFRecord file")
    assert tree_hash(str(tmp_path)) == before


# ------------------------------------------------------------------ SIGTERM

@pytest.mark.parametrize("signal_number", [signal.SIGTERM])
def test_sigterm_stops_create_pretraining_data_cleanly_and_it_resumes(
        signal_number, stdlib_corpus, vocab_file, tmp_path):
    flags = ["--input_file", stdlib_corpus, "--vocab_file", vocab_file, "--num_shards", 8,
             "--max_seq_length", 64, "--max_predictions_per_seq", 10, "--dupe_factor", 2,
             "--block_size_kb", 64, "--num_workers", 2, "--quiet"]
    full = str(tmp_path / "full" / "train")
    cpd.main([str(a) for a in flags] + ["--output_file", full])
    stopped = str(tmp_path / "stopped" / "train")
    cmd = [sys.executable, "-m", "bert_tf.create_pretraining_data", *map(str, flags),
           "--output_file", stopped]
    proc = subprocess.Popen(cmd, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def written():
        try:
            with open(stopped + ".tmp-progress.json") as f:
                return json.load(f)["next_block"]
        except (OSError, ValueError):
            return 0

    deadline = time.time() + 120
    while not written() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    assert proc.poll() is None, "the run ended before it could be stopped"
    proc.send_signal(signal_number)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    n = written()
    assert n >= 1
    assert re.fullmatch(f"error: {signal.Signals(signal_number).name}: stopped; the shards "
                        f"hold [0-9]+% of the input so far, run the same command again to "
                        f"resume", lines[0]), lines[0]
    # What the shards hold so far stays, under temporary names, with its record; no
    # part file, no lock, no shard under its final name.
    assert sorted(os.listdir(os.path.dirname(stopped))) == sorted(
        [f"train-{i:05d}-of-00008.tmp" for i in range(8)] + ["train.tmp-progress.json"])
    summary = cpd.main([str(a) for a in flags] + ["--output_file", stopped])
    assert summary["examples_this_run"] < summary["examples"]     # the first n blocks kept
    for i in range(8):
        name = f"-{i:05d}-of-00008"
        assert open(stopped + name, "rb").read() == open(full + name, "rb").read()


def test_workers_stop_quietly_when_the_main_process_is_gone(vocab_file, tmp_path):
    """A worker whose result pipe is closed ends with status 0 and nothing on stderr."""
    from bert_tf.data import inputs, pool
    settings = inputs.Settings(
        vocab_file=vocab_file, do_lower_case=True, do_whole_word_mask=False,
        max_seq_length=32, max_predictions_per_seq=5, random_seed=1, dupe_factor=1,
        masked_lm_prob=0.15, short_seq_prob=0.1, max_ngram_size=1, input_format="lines",
        jsonl_field="text", gzip=False)
    text = tmp_path / "in.txt"
    text.write_text("A first sentence here.\nAnd a second one.\n\n" * 50)
    proc = subprocess.Popen([sys.executable, "-m", "bert_tf.data.worker"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=REPO),
                            bufsize=0)
    pool.send(proc.stdin, settings)
    proc.stdout.close()       # the main process is gone: its end of the results pipe too
    pool.send(proc.stdin, (0, [(str(text), 0, text.stat().st_size)],
                           str(tmp_path / "part")))
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == b""


# ------------------------------------------------------------------ --max_seq_length

ONE_EACH = "with one token of each text), got 2"


def test_max_seq_length_too_small_names_the_flag(tmp_path, vocab_file, capsys):
    from bert_tf import extract_features
    from bert_tf.base.cli import check_seq_length
    (tmp_path / "in.txt").write_text("One sentence.\n")
    before = tree_hash(str(tmp_path))
    assert _refused(capsys, lambda: cpd.main([
        f"--input_file={tmp_path / 'in.txt'}", f"--output_file={tmp_path / 'o'}",
        f"--vocab_file={vocab_file}", "--max_seq_length=2"])) == \
        f"error: --max_seq_length must be >= 5 ([CLS] A [SEP] B [SEP] {ONE_EACH}"
    assert _refused(capsys, lambda: quickstart.main([
        f"--work_dir={tmp_path / 'q'}", "--max_seq_length=2"])) == \
        f"error: --max_seq_length must be >= 5 ([CLS] A [SEP] B [SEP] {ONE_EACH}"
    assert _refused(capsys, lambda: extract_features.main([
        f"--input_file={tmp_path / 'in.txt'}", f"--output_file={tmp_path / 'o.jsonl'}",
        "--init_checkpoint=bert-hf", "--max_seq_length=2"])) == \
        f"error: --max_seq_length must be >= 3 ([CLS] A [SEP] {ONE_EACH}"
    assert tree_hash(str(tmp_path)) == before
    with pytest.raises(ValueError, match=r"^--max_seq_length must be >= 3 \(\[CLS\] A "
                                         r"\[SEP\] with one token of each text\), got 2$"):
        check_seq_length(2)
    with pytest.raises(ValueError, match=r"^--doc_len must be >= 5 .*, got 4$"):
        check_seq_length(4, texts=2, flag="--doc_len")
    check_seq_length(3)
    check_seq_length(5, texts=2)


# ------------------------------------------------------------------ quickstart reruns

TINY_QUICKSTART = ["--vocab_size", "500", "--num_train_steps", "2", "--steps_per_loop", "1",
                   "--dupe_factor", "1", "--train_batch_size", "8", "--max_seq_length", "32",
                   "--max_predictions_per_seq", "5"]


def test_quickstart_refuses_files_it_cannot_vouch_for(tmp_path, capsys):
    work = tmp_path / "work"
    work.mkdir()
    (work / "vocab.txt").write_text("[PAD]\n")
    before = tree_hash(str(tmp_path))
    _refused(capsys, lambda: quickstart.main(["--work_dir", str(work)] + TINY_QUICKSTART),
             f"--work_dir={work} holds a quickstart's files but no "
             f"quickstart_settings.json", f"delete {work}")
    (work / "quickstart_settings.json").write_text("{not json")
    before = tree_hash(str(tmp_path))
    _refused(capsys, lambda: quickstart.main(["--work_dir", str(work)] + TINY_QUICKSTART),
             "quickstart_settings.json: not a quickstart settings record")
    assert tree_hash(str(tmp_path)) == before


@pytest.mark.slow
def test_quickstart_rerun_with_other_inputs_is_refused_and_the_same_resumes(
        stdlib_corpus, tmp_path, capsys):
    a = _slice(stdlib_corpus, tmp_path / "a.txt", 0, 40_000)
    b = _slice(stdlib_corpus, tmp_path / "b.txt", 100_000, 40_000)
    work = tmp_path / "work"
    args = ["--work_dir", str(work), "--corpus", a] + TINY_QUICKSTART
    assert quickstart.main(args) == 0
    out = capsys.readouterr().out
    assert f"== 1/6 corpus: {a}\n" in out and "reusing" not in out
    made = tree_hash(str(work))
    advice = f"choose another --work_dir or delete {work}"
    for flags, expected in (
            (["--corpus", b], f"--corpus={b}: {work} was made from --corpus={a}; {advice}"),
            (["--corpus", a, "--max_seq_length", "64"],
             f"--max_seq_length=64: {work} was made with --max_seq_length=32; {advice}"),
            (["--corpus", a, "--vocab_size", "600", "--num_train_steps", "3"],
             f"--vocab_size=600: {work} was made with --vocab_size=500 (and 1 more flag(s) "
             f"differ); {advice}"),
            ([], f"Python standard library docstrings (no --corpus): {work} was made from "
                 f"--corpus={a}; {advice}")):
        line = _refused(capsys, lambda: quickstart.main(
            ["--work_dir", str(work)] + TINY_QUICKSTART + flags))
        assert line == "error: " + expected
        assert tree_hash(str(work)) == made
    # The same path with other bytes is another corpus.
    original = open(a, encoding="utf-8").read()
    with open(a, "a", encoding="utf-8") as f:
        f.write("One more document.\n\n")
    _refused(capsys, lambda: quickstart.main(args),
             f"--corpus={a}: {work} was made from --corpus={a} as it was then "
             f"({len(original.encode()):,} bytes; it has changed)")
    assert tree_hash(str(work)) == made
    with open(a, "w", encoding="utf-8") as f:
        f.write(original)
    # The same corpus and flags (steps_per_loop may differ): every stage reused, no
    # retraining.
    log = (work / "model" / "train_log.jsonl").read_text()
    assert quickstart.main(args[:-len(TINY_QUICKSTART)] + TINY_QUICKSTART[:4] +
                           ["--steps_per_loop", "2"] + TINY_QUICKSTART[6:]) == 0
    out = capsys.readouterr().out
    assert f"reusing from {work} (made from the same corpus and flags): corpus split, " \
           f"vocab, shards, model\n" in out
    assert (work / "model" / "train_log.jsonl").read_text() == log
