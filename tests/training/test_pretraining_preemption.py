"""SIGTERM to one worker of a MultiWorkerMirroredStrategy run: every worker saves at the
same step (tf.distribute.experimental.PreemptionCheckpointHandler agrees on it), exits
with status 1 and one `error:` line, and the rerun resumes to the uninterrupted losses."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests import ROOT
from tests.testing import free_ports, write_pretraining_shards

TINY = dict(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)
STEPS = 12


def _cmd(shards, config, out, strategy):
    return [sys.executable, "-m", "bert_tf.run_pretraining", f"--input_file={shards}",
            f"--output_dir={out}", f"--bert_config_file={config}", "--do_train",
            "--train_batch_size=16", "--max_seq_length=32", "--max_predictions_per_seq=5",
            f"--num_train_steps={STEPS}", "--num_warmup_steps=2", "--learning_rate=1e-3",
            "--save_checkpoints_steps=100", "--shuffle_buffer=1", f"--strategy={strategy}"]


def _env(**extra):
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT,
                # No GCE metadata lookup (the handler's platform check) off GCP.
                GCE_METADATA_IP=os.environ.get("GCE_METADATA_IP", "127.0.0.1:9"), **extra)


def _workers(shards, config, out):
    workers = [f"127.0.0.1:{p}" for p in free_ports(2)]
    return [subprocess.Popen(
        _cmd(shards, config, out, "multi_worker"), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
        env=_env(TF_CONFIG=json.dumps({"cluster": {"worker": workers},
                                       "task": {"type": "worker", "index": i}})))
        for i in range(2)]


def _finish(procs):
    try:
        return [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def _losses(out):
    with open(os.path.join(out, "train_log.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1))
    return np.array([r["loss"] for r in rows])


@pytest.mark.slow
def test_sigterm_to_one_worker_saves_on_all_and_resumes(tmp_path):
    shards = write_pretraining_shards(str(tmp_path / "shards"), num_files=2,
                                      examples_per_file=64, seq_length=32, predictions=5)
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(TINY))
    reference, out = str(tmp_path / "reference"), str(tmp_path / "run")
    # The uninterrupted run, in this process (a subprocess would only add TensorFlow's
    # start-up; the run seeds itself, so its losses are the command's in a fresh process).
    from bert_tf import run_pretraining
    run_pretraining.main(_cmd(shards, config, reference, "one_device")[3:])

    procs = _workers(shards, config, out)
    log = os.path.join(out, "train_log.jsonl")
    deadline = time.time() + 240
    while time.time() < deadline and all(p.poll() is None for p in procs):
        if os.path.exists(log) and len(open(log).read().splitlines()) >= 2:
            break
        time.sleep(0.01)
    procs[1].send_signal(signal.SIGTERM)  # not the chief
    outputs = _finish(procs)
    saved = len(_losses(out))
    assert 2 <= saved < STEPS, outputs[0][-3000:]
    chief_ckpt = os.path.join(out, f"ckpt-{saved}")
    expected = (f"error: SIGTERM at step {saved}: saved {chief_ckpt}; run the same command "
                f"again to resume from it")
    for p, output in zip(procs, outputs):
        assert p.returncode == 1, output[-3000:]
        errors = [line for line in output.splitlines() if line.startswith("error:")]
        assert errors == [expected], output[-3000:]
        assert "Traceback" not in output, output[-3000:]
    worker_ckpt = os.path.join(out, ".worker_1", f"ckpt-{saved}")
    assert os.path.exists(chief_ckpt + ".index") and os.path.exists(worker_ckpt + ".index")

    procs = _workers(shards, config, out)
    outputs = _finish(procs)
    for p, output, ckpt in zip(procs, outputs, (chief_ckpt, worker_ckpt)):
        assert p.returncode == 0, output[-3000:]
        assert f"resumed from {ckpt} at step {saved}" in output, output[-3000:]
    np.testing.assert_allclose(_losses(out), _losses(reference), rtol=1e-4)
    assert len(_losses(out)) == STEPS
    assert not any(n.startswith(".worker") for n in os.listdir(out))
