"""Resumable fine-tuning (tasks/driver.py's fit, tasks/resume.py): a run stopped by
SIGTERM (it saves after its current step and exits 1 with one line) and then killed with
kill -9 (it resumes from its last periodic state), each time run again with the same
command, ends with the per-step log, the weights and the scores of a run never stopped,
bit for bit, dropout on; on one device and under the mirrored strategy (two CPU
devices)."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from tests import ROOT

TINY = {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 64}   # dropout: the default 0.1
WORDS = "good great fine bad awful poor film movie plot actor scene music story".split()
STEPS = 12   # 48 examples / batch 8 = 6 steps per epoch, 2 epochs


def _write_data(folder):
    rng = random.Random(0)
    for name, n in (("train.tsv", 48), ("dev.tsv", 16)):
        with open(folder / name, "w", encoding="utf-8") as f:
            f.write("sentence\tlabel\n")
            for _ in range(n):
                words = [rng.choice(WORDS) for _ in range(rng.randint(2, 12))]
                good = sum(w in ("good", "great", "fine") for w in words)
                bad = sum(w in ("bad", "awful", "poor") for w in words)
                f.write(f"{' '.join(words)}\t{int(good >= bad)}\n")
    (folder / "config.json").write_text(json.dumps(TINY))


def _start(folder, vocab, out, extra=()):
    """The command in the background, its output in OUT.stdout and OUT.stderr (pipes
    could fill up while the test waits); `extra`: more flags."""
    cmd = [sys.executable, "-m", "tasks.glue", "--task_name=custom", "--labels=0,1",
           f"--train_file={folder / 'train.tsv'}", f"--dev_file={folder / 'dev.tsv'}",
           f"--bert_config_file={folder / 'config.json'}", f"--vocab_file={vocab}",
           f"--output_dir={out}", "--do_train", "--do_eval", "--max_seq_length=16",
           "--train_batch_size=8", "--num_train_epochs=2", "--learning_rate=1e-3",
           "--warmup_proportion=0.2", "--save_checkpoints_steps=4", *extra]
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    with open(f"{out}.stdout", "w") as stdout, open(f"{out}.stderr", "w") as stderr:
        proc = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=stderr, cwd=str(folder))
    proc.out = out
    return proc


def _finish(proc, timeout=300):
    """(stdout, stderr) once `proc` has ended."""
    proc.wait(timeout=timeout)
    with open(f"{proc.out}.stdout") as out, open(f"{proc.out}.stderr") as err:
        return out.read(), err.read()


def _stop_after(proc, rows, signal_number):
    """Sends `signal_number` once `rows` steps are in the run's train_log.jsonl."""
    log = os.path.join(proc.out, "train_log.jsonl")
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(log) and len(open(log).read().splitlines()) >= rows:
            break
        time.sleep(0.005)
    assert proc.poll() is None, _finish(proc)
    proc.send_signal(signal_number)
    return _finish(proc)


def _log(out):
    with open(os.path.join(out, "train_log.jsonl")) as f:
        return [json.loads(line) for line in f]


def _weights(path):
    found = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: found.__setitem__(name, item[()])
                     if isinstance(item, h5py.Dataset) else None)
    assert found
    return found


@pytest.mark.parametrize("extra", [(), ("--strategy=mirrored", "--cpu_devices=2")],
                         ids=["one_device", "mirrored"])
def test_sigterm_and_kill_9_resume_bit_identically(tmp_path, minilm_dir, extra):
    _write_data(tmp_path)
    start = lambda folder, vocab, out: _start(folder, vocab, out, extra)  # noqa: E731
    vocab = os.path.join(minilm_dir, "vocab.txt")
    reference, out = str(tmp_path / "reference"), str(tmp_path / "resumed")
    # The run never stopped goes on beside the stopped ones (2 cores: the runs take the
    # time of startup more than of steps).
    uninterrupted = start(tmp_path, vocab, reference)

    # SIGTERM mid-epoch 1: the step in flight ends, its state is saved, one line, exit 1.
    stdout, stderr = _stop_after(start(tmp_path, vocab, out), 3, signal.SIGTERM)
    stopped = len(_log(out))
    state = os.path.join(out, "resume", f"step-{stopped}")
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: SIGTERM at step {stopped}: saved {state}; run the same "
                      f"command again to resume from it"], stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == errors[0]
    assert "Traceback" not in stdout + stderr
    assert 3 <= stopped < 6 and os.listdir(os.path.join(out, "resume")) == [
        f"step-{stopped}"]
    assert {"state.json", "ckpt.index"} <= set(os.listdir(state))

    # Resumed; killed with -9 after the periodic state of step 8 (mid-epoch 2): step 9
    # is logged only after step 8's state is saved.
    proc = start(tmp_path, vocab, out)
    stdout, stderr = _stop_after(proc, 9, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    assert f"resumed from {state} at step {stopped} of {STEPS}" in stdout, stdout[-2000:]
    assert os.listdir(os.path.join(out, "resume")) == ["step-8"]

    stdout, stderr = _finish(start(tmp_path, vocab, out))
    assert "resumed from " + os.path.join(out, "resume", "step-8") + " at step 8" in stdout
    stdout_ref, stderr_ref = _finish(uninterrupted)
    assert uninterrupted.returncode == 0, stderr_ref[-3000:]
    assert not os.path.exists(os.path.join(reference, "resume"))
    assert not os.path.exists(os.path.join(out, "resume"))   # removed when the run ends

    expected = _log(reference)
    assert [row["step"] for row in expected] == list(range(1, STEPS + 1))
    assert _log(out) == expected   # loss and accuracy of every step, exactly
    for name in ("last.weights.h5", "best.weights.h5"):
        want, got = _weights(os.path.join(reference, name)), _weights(os.path.join(out, name))
        assert want.keys() == got.keys()
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"{name}: {key}")
    with open(os.path.join(reference, "eval_results.txt")) as a, \
            open(os.path.join(out, "eval_results.txt")) as b:
        assert a.read() == b.read()


class _Killed(BaseException):
    """Stands for kill -9: leaves fit at once, nothing saved."""


def _toy_fit(out, monkeypatch, stop_at=None, kill_at=None, seed=12345):
    """tasks.driver.fit in this process on a small model with dropout, under a
    tf.distribute strategy, fed by a pipeline that reshuffles under the outer repeat
    (as NER's and SQuAD's do): 3 epochs of 4 steps. `stop_at`: SIGTERM arrives during that
    step; `kill_at`: the process "dies" at the end of that step. -> (train_log rows,
    the weights)."""
    import keras
    import tensorflow as tf

    from tasks import driver
    from tasks.resume import ResumeCallback
    monkeypatch.undo()   # the callback of an earlier call
    end_step = ResumeCallback.on_train_batch_end

    def on_train_batch_end(self, batch, logs=None):
        if self.step + 1 == stop_at:
            os.kill(os.getpid(), signal.SIGTERM)
        end_step(self, batch, logs)
        if self.step == kill_at:
            raise _Killed
    monkeypatch.setattr(ResumeCallback, "on_train_batch_end", on_train_batch_end)
    out.mkdir(exist_ok=True)
    keras.utils.set_random_seed(1)
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, "relu"),
                                  keras.layers.Dropout(0.5), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.AdamW(0.01), loss="mse", metrics=["mae"])
    x = np.random.RandomState(0).normal(size=(16, 4)).astype("float32")

    def dataset():
        return tf.data.Dataset.range(16).shuffle(16, seed=3).map(
            lambda i: (tf.gather(x, i), tf.cast(i, tf.float32)[None])).batch(4)
    config = driver.FineTuneConfig(output_dir=str(out), num_train_epochs=3,
                                   train_batch_size=4, save_checkpoints_steps=3, seed=seed)
    driver.fit(model, dataset, None, config, 12, monitor=None)
    return _log(str(out)), [w.numpy() for w in model.weights]


def test_fit_resumes_a_pipeline_that_reshuffles_under_the_outer_repeat(tmp_path,
                                                                        monkeypatch):
    """In process and in seconds: SIGTERM in step 6 (mid-epoch 2), then a death after
    step 10 (last periodic state: step 9), each resumed, give the uninterrupted run's
    per-step logs and weights exactly; a run with another --seed refuses the state.
    Keras' fit under a strategy reads a batch of its own before training; where the
    shuffle sits under the outer repeat that read would shift every later pass's order,
    so fit keeps it from reading (driver.fit_reads_only_its_data)."""
    from bert_tf.base.training_plumbing import Interrupted
    expected, weights = _toy_fit(tmp_path / "reference", monkeypatch)
    assert [row["step"] for row in expected] == list(range(1, 13))
    out = tmp_path / "resumed"
    with pytest.raises(Interrupted, match="SIGTERM at step 6: saved .*step-6; run the"):
        _toy_fit(out, monkeypatch, stop_at=6)
    # Another command's settings do not resume it.
    state, resume = out / "resume" / "step-6", out / "resume"
    with pytest.raises(ValueError) as error:
        _toy_fit(out, monkeypatch, seed=7)
    assert str(error.value) == (
        f"{state} is the resumable state of a run with other settings (seed: 12345 there, "
        f"7 now): run that command again to resume it, or delete {resume} to start over")
    with pytest.raises(_Killed):
        _toy_fit(out, monkeypatch, kill_at=10)
    assert os.listdir(out / "resume") == ["step-9"]
    # A damaged state is refused in one line, not half restored.
    data = next((out / "resume" / "step-9").glob("ckpt.data-*"))
    intact = data.read_bytes()
    cut = (f"{data.name} is cut short ({len(intact) // 2:,} bytes; its index expects "
           f"{len(intact):,})): delete {resume} to start over")
    for damaged, reason in ((intact[:len(intact) // 2], cut), (b"", cut.replace(
            f"({len(intact) // 2:,} bytes", "(0 bytes")),
                            (intact[:-9] + bytes([intact[-9] ^ 0xFF]) + intact[-8:],
                             f"checksum mismatch; delete {resume} to start over)")):
        data.write_bytes(damaged)
        with pytest.raises(ValueError) as error:
            _toy_fit(out, monkeypatch)
        assert str(error.value) == (f"{out / 'resume' / 'step-9'}: unreadable resumable "
                                    f"state ({reason}")
    data.write_bytes(intact)
    state_json = out / "resume" / "step-9" / "state.json"
    kept = state_json.read_text()
    state_json.write_text("{")
    with pytest.raises(ValueError, match=r"step-9/state.json: unreadable resumable state"):
        _toy_fit(out, monkeypatch)
    state_json.write_text(kept)
    got, got_weights = _toy_fit(out, monkeypatch)
    assert got == expected
    for a, b in zip(got_weights, weights):
        np.testing.assert_array_equal(a, b)
    # Done, the state says so until run() ends (after evaluation and prediction): run
    # again (killed while it evaluated), it trains no more.
    assert os.listdir(out / "resume") == ["step-12"]
    assert json.loads((out / "resume" / "step-12" / "state.json").read_text())["finished"]
    again, _ = _toy_fit(out, monkeypatch)
    assert again == expected
