"""Workflows, not single inputs: two commands on one output, an output that is also an
input, a rerun with other flags, a reader while a writer works. Each refusal is one
`error:` line, a non-zero status, and every file left as it was (tests/testing.py's
tree_hash, which compares bytes and modes)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from tests import ROOT
from tests.testing import refused, write_pretraining_shards

ENV = {k: v for k, v in dict(os.environ, PYTHONPATH=ROOT).items() if k != "TF_CPP_MIN_LOG_LEVEL"}

CORPUS = ("The cat sat on the mat.\nIt was a sunny day in the park.\n\n"
          "Dogs like to run after balls.\nShe read the whole book in one night.\n")


@pytest.fixture
def corpus_dir(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "corpus.txt").write_text(CORPUS)
    return folder


# ------------------------------------------------------------------- inputs are not outputs

@pytest.mark.parametrize("spelling", ["same", "relative", "symlink", "hardlink"])
def test_build_vocab_refuses_its_input_as_output(corpus_dir, capsys, monkeypatch, spelling):
    from bert_tf import build_vocab
    corpus = str(corpus_dir / "corpus.txt")
    output = {"same": corpus, "relative": "./data/../data/corpus.txt",
              "symlink": str(corpus_dir / "link.txt"),
              "hardlink": str(corpus_dir / "hard.txt")}[spelling]
    monkeypatch.chdir(corpus_dir.parent)
    if spelling == "symlink":
        os.symlink(corpus, output)
    if spelling == "hardlink":
        os.link(corpus, output)
    refused(build_vocab.main, [f"--input_file={corpus}", f"--output_file={output}",
                               "--vocab_size=100"], capsys,
            [f"--output_file={output} is the input --input_file={corpus}",
             "would destroy the input"], str(corpus_dir))


def test_create_pretraining_data_refuses_its_input_as_output(corpus_dir, capsys,
                                                             minilm_dir):
    from bert_tf import create_pretraining_data
    corpus = str(corpus_dir / "corpus.txt")
    base = [f"--input_file={corpus}", f"--vocab_file={minilm_dir}/vocab.txt",
            "--max_seq_length=32", "--max_predictions_per_seq=5", "--dupe_factor=1",
            "--num_workers=1", "--quiet"]
    refused(create_pretraining_data.main, base + [f"--output_file={corpus}"], capsys,
            [f"--output_file={corpus} is the input --input_file={corpus}"], str(corpus_dir))
    # A shard of a --num_shards prefix that is an input.
    shard = str(corpus_dir / "train-00001-of-00002")
    os.link(corpus, shard)
    refused(create_pretraining_data.main,
            base + [f"--output_file={corpus_dir / 'train'}", "--num_shards=2"], capsys,
            [f"--output_file={shard} is the input --input_file={corpus}"], str(corpus_dir))


def test_extract_features_refuses_its_input_as_output(corpus_dir, capsys, minilm_dir):
    from bert_tf import extract_features
    corpus = str(corpus_dir / "corpus.txt")
    refused(extract_features.main, [f"--input_file={corpus}", f"--output_file={corpus}",
                                    f"--init_checkpoint={minilm_dir}"], capsys,
            [f"--output_file={corpus} is the input --input_file={corpus}"], str(corpus_dir))


def test_convert_checkpoint_never_overwrites_what_it_reads(tmp_path, capsys, minilm_dir):
    import shutil

    from bert_tf import convert_checkpoint
    model = str(tmp_path / "minilm")
    shutil.copytree(minilm_dir, model)
    refused(convert_checkpoint.main, [f"--input={model}", f"--output={model}",
                                      "--output_format=google", "--overwrite"], capsys,
            [f"--output={model} is the input --input={model}"], str(tmp_path))


# ------------------------------------------------------------------------ one owner

HOLDER = textwrap.dedent("""
    import sys, time
    from bert_tf.base.output_lock import OutputLock
    with OutputLock(sys.argv[1], "--output_dir"):
        print("held", flush=True)
        time.sleep(120)
""")


def _hold(path):
    """A process that holds the lock of `path` until killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, path], env=ENV,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_is_refused_and_a_dead_holder_is_no_lock(corpus_dir, tmp_path,
                                                                  capsys):
    from bert_tf import build_vocab
    from bert_tf.base.output_lock import lock_path
    vocab = str(tmp_path / "out" / "vocab.txt")
    argv = [f"--input_file={corpus_dir / 'corpus.txt'}", f"--output_file={vocab}",
            "--vocab_size=100"]
    holder = _hold(vocab)
    try:
        line = refused(build_vocab.main, argv, capsys,
                       [f"--output_file={vocab} is in use by another command",
                        f"(pid {holder.pid}: "], str(tmp_path / "out"))
        assert "wait for it to end or choose another --output_file" in line
    finally:
        holder.kill()   # kill -9: no release, the lock file stays behind
        holder.wait()
    assert os.path.exists(lock_path(vocab))
    build_vocab.main(argv)     # the dead holder's file is no lock
    assert open(vocab).read().startswith("[PAD]")
    assert not os.path.exists(lock_path(vocab))   # removed on release


def _pretraining_argv(shards, output_dir, *extra, steps=4):
    return [f"--input_file={shards}", f"--output_dir={output_dir}", "--preset=tiny",
            "--do_train", "--train_batch_size=8", "--max_seq_length=32",
            "--max_predictions_per_seq=5", f"--num_train_steps={steps}",
            "--num_warmup_steps=1", "--save_checkpoints_steps=2", "--shuffle_buffer=4",
            *extra]


def _tiny_vocab(folder):
    """A vocabulary of 100 tokens (the tiny shards' ids are below 100)."""
    path = os.path.join(folder, "vocab.txt")
    with open(path, "w") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
                          [f"w{i}" for i in range(95)]) + "\n")
    return path


@pytest.fixture(scope="module")
def tiny_shards(tmp_path_factory):
    return write_pretraining_shards(str(tmp_path_factory.mktemp("shards")), num_files=1,
                                    examples_per_file=32, vocab_size=100)


@pytest.mark.slow
def test_two_pretraining_runs_on_one_output_dir(tmp_path, tiny_shards, capsys):
    """Run A trains (a process of its own); run B, started on A's --output_dir with other
    flags, stops at once with one line naming A and touches nothing; A goes on, and the
    folder holds A's run alone."""
    from bert_tf import run_pretraining
    out = str(tmp_path / "run")
    a = subprocess.Popen([sys.executable, "-m", "bert_tf.run_pretraining",
                          *_pretraining_argv(tiny_shards, out, "--learning_rate=1e-4",
                                             "--seed=1", steps=400)],
                         env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    try:
        log = os.path.join(out, "train_log.jsonl")
        deadline = time.time() + 240
        while not (os.path.exists(log) and os.path.getsize(log)) and time.time() < deadline:
            assert a.poll() is None, a.stdout.read()
            time.sleep(0.2)
        a.send_signal(signal.SIGSTOP)   # held still while B looks, so the tree is A's
        try:
            refused(run_pretraining.main,
                    _pretraining_argv(tiny_shards, out, "--learning_rate=5e-2", "--seed=2"),
                    capsys, [f"--output_dir={out} is in use by another command (pid {a.pid}: ",
                             "run_pretraining", "choose another --output_dir"], out)
            # Nor are the shards A reads written anew under it: the writer is refused,
            # naming the reading run, and the shards stay as they are.
            from bert_tf import create_pretraining_data
            shard = os.path.join(os.path.dirname(tiny_shards), "shard_0.tfrecord")
            corpus = os.path.join(os.path.dirname(out), "corpus.txt")
            with open(corpus, "w") as f:
                f.write(CORPUS)
            refused(create_pretraining_data.main,
                    [f"--input_file={corpus}", f"--output_file={shard}",
                     f"--vocab_file={_tiny_vocab(tmp_path)}", "--max_seq_length=32",
                     "--max_predictions_per_seq=5", "--quiet"], capsys,
                    [f"--output_file={shard} is being read by another command (pid {a.pid}: ",
                     "run_pretraining", "wait for it to end"], os.path.dirname(tiny_shards))
        finally:
            a.send_signal(signal.SIGCONT)
    finally:
        a.send_signal(signal.SIGTERM)
        output, _ = a.communicate(timeout=240)
    assert a.returncode == 1 and "SIGTERM at step" in output, output[-2000:]
    import json
    with open(os.path.join(out, "pretraining_settings.json")) as f:
        settings = json.load(f)
    assert (settings["learning_rate"], settings["seed"]) == (1e-4, 1)


# ------------------------------------------------------- reruns with other flags

@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_shards):
    """A tiny pretraining run with checkpoints at steps 2 and 4."""
    from bert_tf import run_pretraining
    out = str(tmp_path_factory.mktemp("pretraining") / "run")
    run_pretraining.main(_pretraining_argv(tiny_shards, out))
    return out


@pytest.mark.parametrize("flags, expect", [
    (["--preset=mini"], "bert_config hidden_size: 128 there, 256 now"),
    (["--train_batch_size=4"], "--train_batch_size: 8 there, 4 now"),
    (["--learning_rate=1e-3"], "--learning_rate: 5e-05 there, 0.001 now"),
    (["--optimizer=lamb"], "--optimizer: 'adamw' there, 'lamb' now"),
    (["--num_train_steps=6"], "--num_train_steps: 4 there, 6 now"),
    (["--seed=7"], "--seed: 12345 there, 7 now"),
])
def test_a_resume_with_other_settings_is_refused_untouched(finished_run, tiny_shards, flags,
                                                           expect, capsys):
    from bert_tf import run_pretraining
    argv = _pretraining_argv(tiny_shards, finished_run)
    names = {f.split("=")[0] for f in flags}
    argv = [a for a in argv if a.split("=")[0] not in names | (
        {"--preset"} if "--preset" in names else set())] + flags
    line = refused(run_pretraining.main, argv, capsys,
                   [f"--output_dir={finished_run} holds checkpoints (ckpt-4) of a run with "
                    f"other settings", expect, "run that command again to resume it"],
                   finished_run)
    assert "Traceback" not in line


def test_a_refused_resume_names_what_matters_first(finished_run, tmp_path, capsys):
    """Phase 2's command (longer sequences, its own shards, another schedule) aimed at
    phase 1's folder: the line names the sequence length first, then the rest by
    importance, and every other differing flag by name."""
    from bert_tf import run_pretraining
    longer = write_pretraining_shards(str(tmp_path / "long"), num_files=1,
                                      examples_per_file=8, seq_length=64, predictions=10,
                                      vocab_size=100)
    argv = _pretraining_argv(longer, finished_run, "--learning_rate=1e-3", "--seed=7")
    argv = [a for a in argv if not a.startswith(("--max_seq_length", "--max_pred",
                                                 "--num_train_steps"))]
    refused(run_pretraining.main, argv + ["--max_seq_length=64",
                                          "--max_predictions_per_seq=10",
                                          "--num_train_steps=6"], capsys,
            ["of a run with other settings (--max_seq_length: 32 there, 64 now; "
             "--max_predictions_per_seq: 5 there, 10 now; --input_file: 1 shard(s) there, "
             "other 1 now; also 3 more: --learning_rate, --num_train_steps, --seed)"],
            finished_run)


def test_a_resume_with_other_run_flags_goes_on(finished_run, tiny_shards, capsys):
    """Flags that say how a run goes (here: the loop size, checkpoint spacing, eval) may
    change: the run resumes and, being done, only evaluates."""
    from bert_tf import run_pretraining
    metrics = run_pretraining.main(_pretraining_argv(
        tiny_shards, finished_run, "--steps_per_loop=2", "--save_checkpoints_steps=1",
        "--do_eval", "--max_eval_steps=1"))
    assert metrics["global_step"] == 4
    assert "resumed from" in capsys.readouterr().out


# --------------------------------------------------- readers do not block writers

def test_a_weights_file_is_replaced_while_a_reader_holds_it(tmp_path):
    """An export reading last.weights.h5 (h5py holds it open and HDF5-locked) while the
    trainer writes the next epoch's: the writer goes through a new file renamed into
    place, the reader keeps the weights it opened, and a new reader gets the new ones."""
    import h5py
    import keras

    from bert_tf.models import run_dir
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    path = str(tmp_path / "last.weights.h5")
    run_dir.save_weights(model, path)
    first = [np.array(w) for w in model.get_weights()]
    with h5py.File(path, "r") as reader:
        model.set_weights([w + 1 for w in first])
        run_dir.save_weights(model, path)
        kept = [np.asarray(d) for d in _datasets(reader)]
    assert sorted(x.sum() for x in kept) == sorted(x.sum() for x in first)
    again = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    again.load_weights(path)
    for a, b in zip(again.get_weights(), first):
        np.testing.assert_array_equal(a, b + 1)
    assert sorted(os.listdir(tmp_path)) == ["last.weights.h5"]


def _datasets(group):
    import h5py
    for item in group.values():
        if isinstance(item, h5py.Dataset):
            yield item[()]
        else:
            yield from _datasets(item)


def test_a_failed_weights_save_names_its_file(tmp_path):
    import keras

    from bert_tf.models import run_dir
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    path = str(tmp_path / "missing" / "last.weights.h5")
    with pytest.raises(OSError) as info:
        run_dir.save_weights(model, path)
    assert str(info.value).startswith(f"{path}: could not write the weights")


def test_hf_weights_are_readable_by_others(tmp_path, minilm_dir):
    from bert_tf import convert_checkpoint
    out = str(tmp_path / "hf")
    convert_checkpoint.main([f"--input={minilm_dir}", f"--output={out}",
                             "--output_format=hf"])
    umask = os.umask(0)
    os.umask(umask)
    for name in os.listdir(out):
        assert os.stat(os.path.join(out, name)).st_mode & 0o777 == 0o666 & ~umask, name


def test_a_run_whose_output_dir_holds_its_shards_resumes(tmp_path, capsys):
    """--input_file='DIR/*' --output_dir=DIR: once the run has written its step log,
    TensorBoard folder, checkpoints, settings and exported copies there, the glob still
    names the same shards, so the same command resumes its own run."""
    from bert_tf import run_pretraining
    folder = str(tmp_path / "run")
    write_pretraining_shards(folder, num_files=2, examples_per_file=16, vocab_size=100)
    argv = _pretraining_argv(os.path.join(folder, "*"), folder, "--do_eval", steps=2)
    first = run_pretraining.main(argv)
    assert {"train", "train_log.jsonl", "hf", "google", "pretraining_settings.json"} <= \
        set(os.listdir(folder))
    capsys.readouterr()
    again = run_pretraining.main(argv)
    assert "resumed from" in capsys.readouterr().out
    assert again == first


def test_shards_of_another_num_shards_are_not_mixed_in(corpus_dir, capsys, minilm_dir):
    """Rerun with --num_shards=2 over a prefix that holds a 3-shard set: the glob
    'train*' would read both sets; refused, naming the stale shards, nothing touched."""
    from bert_tf import create_pretraining_data
    prefix = str(corpus_dir / "shards" / "train")
    (corpus_dir / "big.txt").write_text("\n".join([CORPUS] * 400))   # 3 shards' worth
    base = [f"--input_file={corpus_dir / 'big.txt'}", f"--output_file={prefix}",
            f"--vocab_file={minilm_dir}/vocab.txt", "--max_seq_length=32",
            "--max_predictions_per_seq=5", "--dupe_factor=1", "--num_workers=1", "--quiet"]
    create_pretraining_data.main(base + ["--num_shards=3"])
    capsys.readouterr()
    refused(create_pretraining_data.main, base + ["--num_shards=2"], capsys,
            [f"--output_file={prefix}: {prefix}-00000-of-00003 and 2 more are shards of an "
             f"earlier run with another --num_shards", "delete them or choose another"],
            str(corpus_dir))
    create_pretraining_data.main(base + ["--num_shards=3"])   # the same set: rewritten
