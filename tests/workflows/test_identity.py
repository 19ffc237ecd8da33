"""Inputs known by what they are, not by their names: a checkpoint folder that is also
the output, a vocabulary of the same size but other words, training data changed between
a stop and a resume, shards written anew under a run that reads them, a folder reached
through a symlink, a folder replaced while others load it. Each refusal is one `error:`
line, exit status 1, and every file left as it was (tests/testing.py's tree_hash)."""

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from tests import ROOT
from tests.testing import refused, tree_hash

ENV = {k: v for k, v in dict(os.environ, PYTHONPATH=ROOT).items()
       if k != "TF_CPP_MIN_LOG_LEVEL"}
TINY = {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64}
SHARD_FLAGS = ["--max_seq_length=32", "--max_predictions_per_seq=5", "--dupe_factor=1",
               "--num_workers=1", "--quiet"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, minilm_dir):
    """A tiny pretrainer over MiniLM's vocabulary, as an HF folder, a google folder and a
    .keras file; vocabulary A (MiniLM's) and B (the same size, two words swapped)."""
    from bert_tf.checkpoints import dispatch as checkpoints
    from bert_tf.base.config import BertConfig
    from bert_tf.models.pretrainer import BertPretrainer
    root = tmp_path_factory.mktemp("tiny")
    model = BertPretrainer.from_config_object(BertConfig(**TINY))
    vocab_a = os.path.join(minilm_dir, "vocab.txt")
    tokens = open(vocab_a, encoding="utf-8").read().split("\n")
    tokens[2000], tokens[2001] = tokens[2001], tokens[2000]
    vocab_b = root / "vocab_b.txt"
    vocab_b.write_text("\n".join(tokens), encoding="utf-8")
    paths = {"vocab_a": vocab_a, "vocab_b": str(vocab_b), "root": root}
    for fmt in ("hf", "google"):
        paths[fmt] = checkpoints.save_checkpoint(model, str(root / fmt), fmt, vocab_a)
    paths["keras"] = checkpoints.save_checkpoint(model, str(root / "m.keras"), "keras")
    return paths


@pytest.fixture(scope="module")
def corpus(docstring_documents, tmp_path_factory):
    """About 40 kB of real English documents."""
    text = open(docstring_documents, encoding="utf-8").read()
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text(text[:text.index("\n\n", 40_000) + 2], encoding="utf-8")
    return str(path)


def copy(src, dst):
    (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, dst)
    return str(dst)


def pretraining_argv(shards, out, *extra):
    return [f"--input_file={shards}", f"--output_dir={out}", "--preset=tiny", "--do_train",
            "--train_batch_size=4", "--max_seq_length=32", "--max_predictions_per_seq=5",
            "--num_train_steps=2", "--num_warmup_steps=0", "--save_checkpoints_steps=2",
            "--shuffle_buffer=4", *extra]


# ------------------------------------------------ 1, 5, 6: the checkpoint is an input

def test_extract_features_never_writes_into_its_checkpoint(tiny, tmp_path, capsys):
    from bert_tf import extract_features
    lines = tmp_path / "lines.txt"
    lines.write_text("a line\n")
    hf, google = copy(tiny["hf"], tmp_path / "ck"), copy(tiny["google"], tmp_path / "g")
    keras = copy(tiny["keras"], tmp_path / "m.keras")
    copy(tiny["vocab_a"], tmp_path / "vocab.txt")          # the .keras file's vocabulary
    os.symlink(hf, tmp_path / "alias")
    for checkpoint, output, relation in (
            (hf, f"{hf}/model.safetensors", "lies inside"),
            (hf, f"{hf}/features.jsonl", "lies inside"),
            (hf, f"{tmp_path}/alias/model.safetensors", "lies inside"),
            (f"{google}/bert_model.ckpt", f"{google}/bert_model.ckpt.index", "lies inside"),
            (keras, keras, "is"),
            (keras, f"{tmp_path}/./m.keras", "is")):
        refused(extract_features.main, [f"--input_file={lines}", f"--output_file={output}",
                                        f"--init_checkpoint={checkpoint}"], capsys,
                [f"--output_file={output} {relation} the input "
                 f"--init_checkpoint={checkpoint}", "choose another --output_file"],
                str(tmp_path))


def test_a_run_never_writes_into_the_checkpoint_it_starts_from(tiny, tmp_path, capsys):
    from bert_tf import run_pretraining
    from tasks import glue
    ck = copy(tiny["hf"], tmp_path / "ck")
    for out, relation in ((ck, "is"), (f"{ck}/phase2", "lies inside")):
        refused(run_pretraining.main, pretraining_argv("unused*", out,
                                                       f"--init_checkpoint={ck}"), capsys,
                [f"--output_dir={out} {relation} the input --init_checkpoint={ck}"],
                str(tmp_path))
    # A run folder whose hf/ copy is the checkpoint: the run would write hf/ over it.
    run = tmp_path / "run"
    os.makedirs(run)
    copy(ck, run / "hf")
    refused(run_pretraining.main, pretraining_argv("unused*", str(run),
                                                   f"--init_checkpoint={run}/hf"), capsys,
            [f"--output_dir={run} holds the input --init_checkpoint={run}/hf"], str(tmp_path))
    # A fine-tune into its own --init_checkpoint folder, with another vocabulary: the
    # pretrained checkpoint's vocab.txt would be replaced.
    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\n" + "a good film\t1\na dull plot\t0\n" * 4)
    refused(glue.main, ["--do_train", "--task_name=custom", f"--train_file={train}",
                        f"--init_checkpoint={ck}", f"--output_dir={ck}",
                        f"--vocab_file={tiny['vocab_b']}"], capsys,
            [f"--output_dir={ck} is the input --init_checkpoint={ck}"], str(tmp_path))


# ------------------------------------------------ 2, 3: the shards' vocabulary

@pytest.fixture(scope="module")
def shard_sets(tiny, corpus, tmp_path_factory):
    """Shards of the corpus made with vocabulary A and with B."""
    from bert_tf import create_pretraining_data
    root = tmp_path_factory.mktemp("shard_sets")
    for name in ("a", "b"):
        create_pretraining_data.main([f"--input_file={corpus}", f"--vocab_file={tiny['vocab_' + name]}",
                                      f"--output_file={root / name / 'train'}",
                                      "--num_shards=2"] + SHARD_FLAGS)
    return root


def test_shards_are_read_with_the_vocabulary_they_were_made_with(tiny, shard_sets, tmp_path,
                                                                 capsys):
    from bert_tf import run_pretraining
    a, b = f"{shard_sets}/a/train*", f"{shard_sets}/b/train*"
    out = str(tmp_path / "run")
    refused(run_pretraining.main, pretraining_argv(a, out, f"--vocab_file={tiny['vocab_b']}"),
            capsys, [f"--vocab_file={tiny['vocab_b']} is not the vocabulary "
                     f"{shard_sets}/a/train-00000-of-00002 was made with ({tiny['vocab_a']}",
                     "ids would be read as other words"], str(shard_sets), out)
    refused(run_pretraining.main, pretraining_argv(f"{a},{b}", out), capsys,
            [f"--input_file: {shard_sets}/a/train-00000-of-00002 was made with the "
             f"vocabulary {tiny['vocab_a']} and {shard_sets}/b/train-00000-of-00002 with "
             f"another one ({tiny['vocab_b']}", "a run reads shards of one vocabulary"],
            str(shard_sets), out)


# ------------------------------------------------ 7 and after: shards written anew

def test_a_run_on_shards_written_anew_is_not_resumed(tiny, corpus, tmp_path, capsys):
    """A run stops; its shards are written again with another seed (no run reads them
    now); the same command is refused, saying which setting made them differ, and the
    run folder stays as it was; with the shards as they were, it resumes."""
    from bert_tf import create_pretraining_data, run_pretraining
    prefix = str(tmp_path / "shards" / "train")
    make = [f"--input_file={corpus}", f"--vocab_file={tiny['vocab_a']}",
            f"--output_file={prefix}", "--num_shards=2"] + SHARD_FLAGS
    create_pretraining_data.main(make)
    kept = str(tmp_path / "kept")
    shutil.copytree(os.path.dirname(prefix), kept)
    out = str(tmp_path / "run")
    argv = pretraining_argv(prefix + "*", out, f"--vocab_file={tiny['vocab_a']}")
    run_pretraining.main(argv)
    os.makedirs(os.path.join(out, "ckpt-9_temp"))      # what a kill -9 in a save leaves
    open(os.path.join(out, "ckpt-9_temp", "part-00000-of-00001.data"), "w").close()
    create_pretraining_data.main(make + ["--random_seed=7"])
    refused(run_pretraining.main, argv, capsys,
            [f"--output_dir={out} holds checkpoints (ckpt-2) of a run on other shards "
             f"(--input_file: {prefix}-00000-of-00002 and 1 more changed since the "
             f"checkpoints were written (create_pretraining_data random_seed: 12345 there, "
             f"7 now)): put back the shards it trains on"], out)
    for name in os.listdir(kept):
        shutil.copy(os.path.join(kept, name), os.path.dirname(prefix))
    run_pretraining.main(argv)
    out_lines = capsys.readouterr().out
    assert "resumed from" in out_lines
    assert f"removing {out}/ckpt-9_temp (an unfinished checkpoint save)" in out_lines
    assert not os.path.exists(os.path.join(out, "ckpt-9_temp"))
    # The run folder is a checkpoint: its newest ckpt-N, read with the run's vocabulary.
    from bert_tf.checkpoints import dispatch as checkpoints
    assert checkpoints.vocab_beside(out) == os.path.join(out, "google", "vocab.txt")
    ours = checkpoints.read_checkpoint(out)
    final = checkpoints.read_checkpoint(os.path.join(out, "google"))
    assert ours.format == "pretraining_run" and set(ours.tensors) == set(final.tensors)
    for name, value in final.tensors.items():
        np.testing.assert_array_equal(ours.tensors[name], value)


def test_shards_being_written_are_not_read(tiny, tmp_path, capsys):
    from bert_tf import run_pretraining
    prefix = tmp_path / "shards" / "train"
    os.makedirs(prefix.parent)
    for i in range(2):
        (prefix.parent / f"train-0000{i}-of-00002").write_bytes(b"half a shard")
    holder = _hold(str(prefix), shared=False)
    try:
        refused(run_pretraining.main, pretraining_argv(f"{prefix}*", str(tmp_path / "run")),
                capsys, [f"--input_file: {prefix} is being written by another command (pid "
                         f"{holder.pid}: ", "wait for it to end"], str(tmp_path))
    finally:
        holder.kill()
        holder.wait()


HOLDER = """
import sys, time
from bert_tf.base.output_lock import OutputLock
with OutputLock(sys.argv[1], "--output_dir", shared=sys.argv[2] == "shared"):
    print("held", flush=True)
    time.sleep(120)
"""


def _hold(path, shared):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, path,
                             "shared" if shared else "exclusive"], env=ENV,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


# ------------------------------------------------ 8: every spelling meets one lock

def test_a_symlinked_output_folder_meets_the_same_lock(tiny, tmp_path, capsys):
    from bert_tf import build_vocab
    from tasks import glue
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(run, tmp_path / "alias")
    os.symlink(tmp_path, tmp_path.parent / f"{tmp_path.name}-parent")
    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\n" + "a good film\tprose\na def line\tcode\n" * 4)
    holder = _hold(str(run), shared=False)
    try:
        for out in (tmp_path / "alias", tmp_path.parent / f"{tmp_path.name}-parent" / "run"):
            refused(glue.main, ["--do_train", "--task_name=custom", f"--train_file={train}",
                                f"--bert_config_file={tiny['hf']}/config.json",
                                f"--vocab_file={tiny['vocab_a']}", f"--output_dir={out}",
                                "--labels=prose,code"], capsys,
                    [f"--output_dir={out} is in use by another command (pid {holder.pid}: "],
                    str(tmp_path))
    finally:
        holder.kill()
        holder.wait()
    vocab = tmp_path / "vocab.txt"
    holder = _hold(str(vocab), shared=False)
    try:
        spelled = tmp_path / "alias" / ".." / "vocab.txt"
        refused(build_vocab.main, [f"--input_file={train}", f"--output_file={spelled}",
                                   "--vocab_size=100"], capsys,
                [f"--output_file={spelled} is in use by another command"], str(tmp_path))
    finally:
        holder.kill()
        holder.wait()


# ------------------------------------------------ 4: a fine-tune resumed on other data

def test_a_fine_tune_is_not_resumed_on_changed_data(tiny, tmp_path, capsys, monkeypatch):
    from tests.testing import interrupt_at, run_command
    train = tmp_path / "train.tsv"
    rows = [(f"good film {i}", "1") if i % 2 else (f"dull plot {i}", "0") for i in range(24)]
    train.write_text("sentence\tlabel\n" + "".join(f"{s}\t{l}\n" for s, l in rows))
    out = str(tmp_path / "run")
    argv = ["--do_train", "--task_name=custom", f"--train_file={train}", "--labels=0,1",
            f"--bert_config_file={tiny['hf']}/config.json", f"--vocab_file={tiny['vocab_a']}",
            f"--output_dir={out}", "--max_seq_length=16", "--train_batch_size=4",
            "--num_train_epochs=1", "--learning_rate=1e-3"]
    interrupt_at(monkeypatch, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, lines = run_command("tasks.glue", argv, capsys)
    monkeypatch.undo()
    assert code == 1 and "SIGTERM at step 2" in lines[-1], lines
    # Keras' "shuffle=True was passed, but will be ignored" is not said to every user.
    assert not [w for w in caught if "shuffle" in str(w.message)]
    original = train.read_text()
    train.write_text(original.replace("\t1\n", "\tx\n").replace("\t0\n", "\t1\n")
                     .replace("\tx\n", "\t0\n"))          # the labels flipped, same size
    from tasks import glue
    state = os.path.join(out, "resume", "step-2")
    refused(glue.main, argv, capsys,
            [f"{state} is the resumable state of a run on other data: --train_file "
             f"{train} has changed since it was saved", "delete "
             f"{os.path.join(out, 'resume')} to start over"], out)
    train.write_text(original)
    code, lines = run_command("tasks.glue", argv, capsys)
    assert code == 0, lines
    # What it learned decides a later run's outputs: other labels are refused.
    predict = ["--do_predict", "--task_name=custom", f"--test_file={train}",
               f"--output_dir={out}"]
    refused(glue.main, predict + ["--labels=1,0"], capsys,
            [f"--labels=1,0: {out} was trained with --labels=0,1 (in class-id order)"], out)
    refused(glue.main, predict + ["--regression"], capsys,
            [f"--regression: {out} holds a classifier (--labels=0,1)"], out)


# ------------------------------------------------ a folder replaced while others read it

READER = """
import os, sys
from bert_tf.checkpoints.dispatch import read_checkpoint
path, stop = sys.argv[1], sys.argv[2]
reads = failures = 0
print("reading", flush=True)
while not os.path.exists(stop) or reads < 5:
    try:
        read_checkpoint(path)
        reads += 1
    except Exception as e:
        failures += 1
        print(type(e).__name__, e, file=sys.stderr)
print(reads, failures, flush=True)
"""


def test_a_checkpoint_folder_is_replaced_in_one_step_for_its_readers(tiny, tmp_path):
    """convert_checkpoint --overwrite, again and again, while another process loads the
    folder as fast as it can: every load finds a whole checkpoint."""
    from bert_tf import convert_checkpoint
    out, stop = str(tmp_path / "hf"), str(tmp_path / "stop")
    convert = [f"--input={tiny['google']}", f"--output={out}", "--output_format=hf",
               "--overwrite"]
    convert_checkpoint.main(convert)
    reader = subprocess.Popen([sys.executable, "-c", READER, out, stop], env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert reader.stdout.readline().strip() == "reading"
    for _ in range(8):
        convert_checkpoint.main(convert)
    open(stop, "w").close()
    output, errors = reader.communicate(timeout=120)
    reads, failures = map(int, output.split())
    assert failures == 0 and reads >= 5, errors[-2000:]
    assert sorted(os.listdir(tmp_path)) == ["hf", "stop"]


def test_replace_path_swaps_or_renames_aside(tmp_path, monkeypatch):
    from bert_tf.base import files
    for swap in (True, False):
        if not swap:
            monkeypatch.setattr(files, "_exchange", lambda a, b: False)
        final, new = tmp_path / "final", tmp_path / "new"
        final.mkdir(exist_ok=True)
        (final / "old.txt").write_text("old")
        new.mkdir()
        (new / "new.txt").write_text("new")
        files.replace_path(str(new), str(final))
        assert os.listdir(final) == ["new.txt"]
        assert sorted(os.listdir(tmp_path)) == ["final"]
        shutil.rmtree(final)


# ------------------------------------------------ a run folder, a keras-hub preset

def test_checkpoints_are_read_where_their_format_keeps_things(tiny, tmp_path, capsys,
                                                              caplog):
    """A keras-hub preset keeps its vocabulary as the tokenizer's asset: found without
    --vocab_file. Its BertMaskedLM has no next-sentence head: converting a pretrainer
    says so once, and converting back writes none (no untrained head made up)."""
    import tensorflow as tf

    from bert_tf import convert_checkpoint, extract_features
    from bert_tf.checkpoints import dispatch as checkpoints
    preset = str(tmp_path / "preset")
    with caplog.at_level("WARNING"):
        convert_checkpoint.main([f"--input={tiny['google']}", f"--output={preset}",
                                 "--output_format=keras_hub"])
    said = [r.getMessage() for r in caplog.records if "next-sentence" in r.getMessage()]
    assert said == ["keras-hub's BertMaskedLM has no next-sentence head: this model's "
                    "(cls/seq_relationship) is left out"]
    assert checkpoints.vocab_beside(preset) == f"{preset}/assets/tokenizer/vocabulary.txt"
    lines = tmp_path / "lines.txt"
    lines.write_text("a line\n")
    assert extract_features.main([f"--input_file={lines}", f"--init_checkpoint={preset}",
                                  f"--output_file={tmp_path / 'f.jsonl'}", "--layers=-1",
                                  "--max_seq_length=16"]) == 1
    back = str(tmp_path / "back")
    capsys.readouterr()
    convert_checkpoint.main([f"--input={preset}", f"--output={back}",
                             "--output_format=google"])
    assert "kept their initialisation" not in capsys.readouterr().out
    names = [name for name, _ in tf.train.list_variables(f"{back}/bert_model.ckpt")]
    assert "cls/predictions/output_bias" in names
    assert not [n for n in names if "seq_relationship" in n]


# ------------------------------------------------ extract_features: stopped, resumed

def test_extract_features_resumes_after_sigterm_and_kill(tiny, tmp_path, capsys):
    """SIGTERM: one line, the written windows kept (OUT.tmp and its record), the lock
    gone; kill -9: stopped anywhere. Run again, each resumes and ends with the
    uninterrupted run's bytes."""
    from bert_tf import extract_features
    from bert_tf.base.output_lock import lock_path
    lines = tmp_path / "lines.txt"
    words = "the cat sat on a mat while dogs ran after balls in the park".split()
    lines.write_text("".join(" ".join(words[i % 7:i % 7 + 3 + i % 5]) + "\n"
                             for i in range(3000)))
    base = [f"--input_file={lines}", f"--init_checkpoint={tiny['hf']}", "--layers=-1",
            "--batch_size=4", "--max_seq_length=16"]
    whole = str(tmp_path / "whole.jsonl")
    extract_features.main(base + [f"--output_file={whole}"])
    for how in (signal.SIGTERM, signal.SIGKILL):
        out = str(tmp_path / f"{how.name}.jsonl")
        proc = subprocess.Popen([sys.executable, "-m", "bert_tf.extract_features", *base,
                                 f"--output_file={out}"], env=ENV, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        record = out + ".tmp.json"
        deadline = time.time() + 120
        while not os.path.exists(record) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        assert proc.poll() is None, "finished before it could be stopped"
        proc.send_signal(how)
        _, err = proc.communicate(timeout=120)
        done = json.load(open(record))["examples"]
        assert 0 < done < 3000
        if how == signal.SIGTERM:
            assert proc.returncode == 1
            last = err.strip().splitlines()[-1]
            assert last.startswith(f"error: SIGTERM: stopped after ") and \
                last.endswith(f"of 3000 examples, kept in {out}.tmp; run the same command "
                              f"again to resume"), err[-2000:]
            assert not os.path.exists(lock_path(out))
        assert not os.path.exists(out)
        capsys.readouterr()
        extract_features.main(base + [f"--output_file={out}"])
        assert "resuming" in capsys.readouterr().err
        assert open(out, "rb").read() == open(whole, "rb").read()
        assert not glob.glob(out + ".tmp*")


# ------------------------------------------------ a full disk while shards are joined

def test_a_full_disk_while_joining_shards_names_the_shard(tiny, corpus, tmp_path, capsys,
                                                          monkeypatch):
    import errno

    from bert_tf import create_pretraining_data
    from bert_tf.data import shards

    def full(src, offset, length, dst):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(shards, "copy_range", full)
    prefix = str(tmp_path / "shards" / "train")
    refused(create_pretraining_data.main,
            [f"--input_file={corpus}", f"--vocab_file={tiny['vocab_a']}",
             f"--output_file={prefix}", "--num_shards=2"] + SHARD_FLAGS, capsys,
            [f"error: {prefix}-00000-of-00002: No space left on device"])
    assert not os.path.exists(os.path.dirname(prefix))     # nothing left, no folder
