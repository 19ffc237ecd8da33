import json
import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.base.config import BertConfig
from bert_tf.training.data import pretraining_dataset
from bert_tf.models.pretrainer import BertPretrainer
from bert_tf.training.optimization import (WarmupLinearDecay, create_optimizer, decayed_variables)
from bert_tf.training.trainer import PretrainingLoop
from bert_tf.run_pretraining import parse_args, write_eval_results
from tests import ROOT
from tests.testing import free_ports, run_command, write_pretraining_shards

TINY = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128, max_position_embeddings=64, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return write_pretraining_shards(str(tmp_path_factory.mktemp("shards")), num_files=2,
                                    examples_per_file=64, seq_length=32, predictions=5)


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("config") / "bert_config.json"
    path.write_text(json.dumps(TINY))
    return str(path)


def test_schedule_has_no_drop_at_end_of_warmup():
    s = WarmupLinearDecay(1e-4, total_steps=100, warmup_steps=10)
    lr = np.array([float(s(i)) for i in range(101)])
    np.testing.assert_allclose(lr[[0, 5, 10, 55, 100]], [0, 5e-5, 1e-4, 5e-5, 0], atol=1e-12)
    assert lr.argmax() == 10
    steps = np.diff(lr)
    # Rising by peak/10 per step, then falling by peak/90: no jump anywhere.
    np.testing.assert_allclose(steps[:10], 1e-5, rtol=1e-5)
    np.testing.assert_allclose(steps[10:], -1e-4 / 90, rtol=1e-4)
    with pytest.raises(ValueError, match="num_warmup_steps"):
        WarmupLinearDecay(1e-4, 10, 20)


def test_weight_decay_skips_layer_norm_and_bias():
    model = BertPretrainer.from_config_object(BertConfig(**TINY))
    variables = model.trainable_variables
    decayed = {v.path for v in decayed_variables(variables)}
    assert "embeddings/word_embeddings" in decayed
    assert "layer_0/qkv/kernel" in decayed
    assert not any("layer_norm" in p or "bias" in p for p in decayed)
    # Behaviour, not just names: with zero gradients, only decayed variables move.
    optimizer = create_optimizer("adamw", 0.1, 10, 0, variables, weight_decay=0.5)
    for v in variables:
        if "layer_norm/beta" in v.path or "bias" in v.path:
            v.assign(tf.ones_like(v))
    before = {v.path: v.numpy().copy() for v in variables}
    optimizer.apply([tf.zeros_like(v) for v in variables], variables)
    optimizer.apply([tf.zeros_like(v) for v in variables], variables)
    for v in variables:
        moved = not np.array_equal(before[v.path], v.numpy())
        assert moved == (v.path in decayed), v.path


def test_fused_adamw_step_equals_keras_adamw():
    """bert_tf's AdamW (TensorFlow's fused ResourceApplyAdam) against keras.optimizers.AdamW
    over six steps of the warmup/decay schedule, inside tf.function: an embedding-like
    table whose gradients are IndexedSlices (rows repeated, most rows absent; Keras gets
    them dense), a decayed kernel and an excluded bias. (Under MirroredStrategy the trainer's tests compare whole
    runs: test_mirrored_strategy_matches_one_device.)"""
    from bert_tf.training.optimization import AdamW
    rng = np.random.default_rng(0)
    start = [rng.normal(size=(40, 8)), rng.normal(size=(8, 8)), rng.normal(size=(8,))]
    results = []
    for fused in (True, False):
        variables = [keras.Variable(x.astype("float32"), name=n)
                     for x, n in zip(start, ("word_embeddings", "kernel", "bias"))]
        optimizer = (AdamW if fused else keras.optimizers.AdamW)(
            WarmupLinearDecay(1e-2, 6, 2), weight_decay=0.01, beta_1=0.9, beta_2=0.999,
            epsilon=1e-6)
        optimizer.exclude_from_weight_decay(var_list=variables[2:])
        optimizer.build(variables)

        @tf.function
        def step(rows, values, kernel, bias):
            table = tf.IndexedSlices(values, rows, tf.constant([40, 8]))
            # Keras' reference gets the table's gradient dense: its own AdamW squares
            # IndexedSlices per occurrence, so a row seen twice gets g1^2 + g2^2 in v
            # where Adam (torch, google) has (g1 + g2)^2.
            optimizer.apply([table if fused else tf.convert_to_tensor(table), kernel, bias],
                            variables)

        for t in range(6):
            g = np.random.default_rng(t)
            step(tf.constant(g.integers(0, 40, size=12), tf.int32),
                 tf.constant(g.normal(size=(12, 8)), tf.float32),
                 tf.constant(g.normal(size=(8, 8)), tf.float32),
                 tf.constant(g.normal(size=(8,)), tf.float32))
        results.append([v.numpy() for v in variables] +
                       [m.numpy() for m in optimizer._momentums + optimizer._velocities])
    assert isinstance(AdamW(1e-3), keras.optimizers.AdamW)
    for ours, keras_value in zip(*results):
        np.testing.assert_allclose(ours, keras_value, rtol=1e-5, atol=1e-6)   # float32 order
    assert not np.allclose(results[0][0], start[0], atol=1e-3)      # it did move


def _pretrainer(tmp_path, batch_size, lr=1e-3, steps=100, warmup=0, accumulation=1):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = BertPretrainer.from_config_object(BertConfig(**TINY))
        optimizer = create_optimizer("adamw", lr, steps, warmup, model.trainable_variables)
        optimizer.build(model.trainable_variables)
    return PretrainingLoop(strategy, model, optimizer, str(tmp_path), batch_size,
                           accumulation)


def _dataset_fn(shards, shuffle_buffer=1000):
    def fn(ctx, batch_size, skip):
        return pretraining_dataset(shards, batch_size, 32, 5, input_context=ctx,
                                   shuffle_buffer=shuffle_buffer).skip(skip)
    return fn


def test_overfits_a_small_sample(tmp_path):
    small = write_pretraining_shards(str(tmp_path / "small"), num_files=1,
                                     examples_per_file=16, seq_length=32, predictions=5)
    trainer = _pretrainer(tmp_path / "run", batch_size=16, lr=2e-3, steps=150, warmup=10)
    trainer.train(_dataset_fn(small), 150, save_checkpoints_steps=150, steps_per_loop=50,
                  progress=False)
    dataset = pretraining_dataset(small, 16, 32, 5, is_training=False)
    metrics = trainer.evaluate(dataset)
    assert metrics["masked_lm_accuracy"] >= 0.95, metrics
    assert metrics["next_sentence_accuracy"] >= 0.95, metrics


def test_gradient_accumulation_matches_one_big_batch(tmp_path, shards):
    runs = []
    for accumulation in (1, 4):
        trainer = _pretrainer(tmp_path / f"acc{accumulation}", 16, accumulation=accumulation)
        history = trainer.train(_dataset_fn(shards), 4, 100, progress=False)
        runs.append([h["loss"] for h in history])
    np.testing.assert_allclose(runs[0], runs[1], rtol=2e-5)


def test_eval_results_use_googles_keys(tmp_path, shards):
    trainer = _pretrainer(tmp_path, 16)
    metrics = trainer.evaluate(pretraining_dataset(shards, 8, 32, 5, is_training=False),
                               max_eval_steps=3)
    write_eval_results(str(tmp_path / "eval_results.txt"), metrics)
    keys = [l.split(" = ")[0] for l in (tmp_path / "eval_results.txt").read_text().splitlines()]
    assert keys == ["global_step", "loss", "masked_lm_accuracy", "masked_lm_loss",
                    "next_sentence_accuracy", "next_sentence_loss"]
    # An untrained model is near chance on both tasks.
    assert abs(metrics["next_sentence_loss"] - np.log(2)) < 0.2
    assert abs(metrics["masked_lm_loss"] - np.log(100)) < 0.5


# -- the command line, in subprocesses ---------------------------------------------------

def _flags(shards, config_file, output_dir, *extra, steps=6):
    return [f"--input_file={shards}", f"--output_dir={output_dir}",
            f"--bert_config_file={config_file}", "--do_train", "--train_batch_size=16",
            "--max_seq_length=32", "--max_predictions_per_seq=5",
            f"--num_train_steps={steps}", "--num_warmup_steps=2", "--learning_rate=1e-3",
            "--save_checkpoints_steps=2", "--shuffle_buffer=1", *extra]


def _in_process(shards, config_file, output_dir, *extra, steps=6):
    """_cli's run in this process: for the uninterrupted runs that other runs are compared
    with, where a subprocess would only add TensorFlow's start-up (~5 CPU-seconds). The
    run seeds initialisation, dropout and shuffling itself (--seed), so its losses and
    weights are those of the same command in a fresh process."""
    from bert_tf import run_pretraining
    run_pretraining.main(_flags(shards, config_file, output_dir, *extra, steps=steps))


def _cli(shards, config_file, output_dir, *extra, env=None, steps=6, popen=False):
    cmd = [sys.executable, "-m", "bert_tf.run_pretraining",
           *_flags(shards, config_file, output_dir, *extra, steps=steps)]
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT, **(env or {}))
    if popen:
        return subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    result = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def _losses(output_dir):
    with open(os.path.join(output_dir, "train_log.jsonl")) as f:
        rows = [json.loads(l) for l in f]
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1))
    return np.array([r["loss"] for r in rows])


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory, shards, config_file):
    out = str(tmp_path_factory.mktemp("reference"))
    _in_process(shards, config_file, out, "--strategy=one_device")
    return out


@pytest.mark.slow
def test_mirrored_strategy_matches_one_device(tmp_path, shards, config_file, reference_run):
    _cli(shards, config_file, str(tmp_path), "--strategy=mirrored", "--cpu_devices=2")
    np.testing.assert_allclose(_losses(str(tmp_path)), _losses(reference_run), rtol=1e-4)


@pytest.mark.slow
def test_multi_worker_matches_one_device(tmp_path, shards, config_file, reference_run):
    workers = [f"127.0.0.1:{p}" for p in free_ports(2)]
    procs = []
    for index in range(2):
        tf_config = json.dumps({"cluster": {"worker": workers},
                                "task": {"type": "worker", "index": index}})
        procs.append(_cli(shards, config_file, str(tmp_path), "--strategy=multi_worker",
                          env={"TF_CONFIG": tf_config}, popen=True))
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out[-3000:]
    np.testing.assert_allclose(_losses(str(tmp_path)), _losses(reference_run), rtol=1e-4)
    assert not any(n.startswith(".worker") for n in os.listdir(tmp_path))


def _final_weights(output_dir):
    from safetensors.numpy import load_file
    return load_file(os.path.join(output_dir, "hf", "model.safetensors"))


def _interrupt(proc, log, after_rows, signal_number):
    """Sends `signal_number` to a run once `after_rows` steps are in its log."""
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(log) and len(open(log).read().splitlines()) >= after_rows:
            break
        time.sleep(0.01)
    proc.send_signal(signal_number)
    return proc.communicate(timeout=240)[0]


@pytest.mark.slow
def test_interrupted_runs_resume_bit_identically_with_dropout(tmp_path, shards):
    """With dropout on, a run stopped by SIGTERM (saves at its current step, exits 1 with
    one line) and then by kill -9 (loses the steps since ckpt-N), rerun each time, gives
    every step's loss and the final weights of an uninterrupted run exactly (the dropout
    layers' random state is checkpointed with the weights, optimizer and input position)."""
    config = tmp_path / "dropout_config.json"
    config.write_text(json.dumps({**TINY, "hidden_dropout_prob": 0.1,
                                  "attention_probs_dropout_prob": 0.1}))
    reference, out = str(tmp_path / "reference"), str(tmp_path / "resumed")
    _in_process(shards, str(config), reference, "--strategy=one_device",
                "--save_checkpoints_steps=4", steps=12)
    log = os.path.join(out, "train_log.jsonl")
    run = lambda: _cli(shards, str(config), out, "--strategy=one_device",  # noqa: E731
                       "--save_checkpoints_steps=4", steps=12, popen=True)
    proc = run()
    output = _interrupt(proc, log, 1, signal.SIGTERM)
    assert proc.returncode == 1, output[-3000:]
    line = output.strip().splitlines()[-1]
    saved = len(_losses(out))
    assert 1 <= saved < 8 and line == (
        f"error: SIGTERM at step {saved}: saved {os.path.join(out, f'ckpt-{saved}')}; run "
        f"the same command again to resume from it"), line
    assert "Traceback" not in output
    proc = run()
    _interrupt(proc, log, saved + 1, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    result = _cli(shards, str(config), out, "--strategy=one_device",
                  "--save_checkpoints_steps=4", steps=12)
    assert "resumed from" in result.stdout
    np.testing.assert_array_equal(_losses(out), _losses(reference))
    expected = _final_weights(reference)
    for name, value in _final_weights(out).items():
        np.testing.assert_array_equal(value, expected[name], err_msg=name)


def test_non_finite_loss_stops_with_the_step(tmp_path, config_file, capsys):
    bad = write_pretraining_shards(str(tmp_path / "bad"), num_files=1, examples_per_file=32,
                                   seq_length=32, predictions=5)
    # A shard whose masked-LM weights are NaN poisons the loss at the first step.
    path = tf.io.gfile.glob(bad)[0]
    records = list(tf.data.TFRecordDataset(path).as_numpy_iterator())
    with tf.io.TFRecordWriter(path) as w:
        for r in records:
            ex = tf.train.Example.FromString(r)
            ex.features.feature["masked_lm_weights"].float_list.value[:] = [float("nan")] * 5
            w.write(ex.SerializeToString())
    # In this process: the command's exit status and its stderr are what is checked.
    code, err = run_command("bert_tf.run_pretraining", [
        f"--input_file={bad}", f"--output_dir={tmp_path / 'run'}",
        f"--bert_config_file={config_file}", "--do_train", "--train_batch_size=8",
        "--max_seq_length=32", "--max_predictions_per_seq=5", "--num_train_steps=4",
        "--num_warmup_steps=0"], capsys)
    assert code == 1
    assert "error: step 1: non-finite loss" in "\n".join(err)
    assert not tf.train.latest_checkpoint(str(tmp_path / "run"))


def test_no_checkpoint_is_written_after_a_diverged_update(tmp_path, shards, config_file,
                                                           capsys, monkeypatch):
    """Resumed with a learning rate that overflows float32: step 3's loss and gradient are
    finite (computed before its update), its update is not. Nothing is saved after
    ckpt-2, and the line names ckpt-2 as the last good checkpoint. (A resume with another
    --learning_rate is refused by run_pretraining's settings check, tests/workflows/test_workflows.py;
    that check is bypassed here, in-process, so that the update can diverge.)"""
    from bert_tf import run_pretraining
    out = str(tmp_path / "run")
    _in_process(shards, config_file, out, "--strategy=one_device", steps=2)
    monkeypatch.setattr(run_pretraining, "check_resume", lambda *args: None)
    with pytest.raises(SystemExit) as exit_info:
        run_pretraining.main([
            f"--input_file={shards}", f"--output_dir={out}",
            f"--bert_config_file={config_file}", "--do_train", "--train_batch_size=16",
            "--max_seq_length=32", "--max_predictions_per_seq=5", "--num_train_steps=6",
            "--num_warmup_steps=0", "--learning_rate=1e39", "--save_checkpoints_steps=1",
            "--strategy=one_device"])
    assert exit_info.value.code == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error: step 3: the weights are no longer finite"), line
    assert line.endswith("last good checkpoint: " + os.path.join(out, "ckpt-2")), line
    assert tf.train.latest_checkpoint(out).endswith("ckpt-2")
    assert not any(n.startswith("ckpt-3") for n in os.listdir(out))


def test_bad_flags_are_one_line_errors(tmp_path, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--input_file=x", f"--output_dir={tmp_path}", "--preset=tiny"])
    assert "at least one of --do_train or --do_eval" in capsys.readouterr().err
    base = ["--input_file=x", f"--output_dir={tmp_path}", "--preset=tiny", "--do_train"]
    from bert_tf.run_pretraining import main
    for flag, message in (
            ("--learning_rate=0", "--learning_rate must be a positive number, got 0.0"),
            ("--learning_rate=-1", "--learning_rate must be a positive number"),
            ("--learning_rate=nan", "--learning_rate must be a positive number"),
            ("--num_warmup_steps=-1", "--num_warmup_steps must be a number >= 0"),
            ("--train_batch_size=0", "--train_batch_size must be a positive number")):
        with pytest.raises(SystemExit) as exit_info:
            main(base + [flag])
        assert exit_info.value.code == 1
        err = capsys.readouterr().err
        assert err.startswith("error: " + message) and err.count("\n") == 1, (flag, err)
    with pytest.raises(SystemExit) as exit_info:
        main([f"--input_file={tmp_path}/none-*.tfrecord", f"--output_dir={tmp_path}",
              "--preset=tiny", "--do_train"])
    assert exit_info.value.code == 1
    assert "--input_file: no file matches" in capsys.readouterr().err
    # An empty shard (as a 0-byte file) and a directory: refused, never waited on.
    (tmp_path / "empty.tfrecord").write_bytes(b"")
    for given, message in ((tmp_path / "empty.tfrecord", "is empty (0 bytes, no records)"),
                           (tmp_path, "is a directory")):
        with pytest.raises(SystemExit) as exit_info:
            main([f"--input_file={given}", f"--output_dir={tmp_path / 'run'}",
                  "--preset=tiny", "--do_train", "--num_train_steps=2"])
        assert exit_info.value.code == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def test_fit_step_equals_the_tf_distribute_loop(tmp_path, shards):
    """Keras' fit() on BertPretrainer (the loop of the JAX and PyTorch backends:
    compute_loss, compile_for_pretraining, shards read without TensorFlow) against the
    tf.distribute loop, from the same weights over the same three batches: the same
    per-step losses and the same weights after them (schedule with warmup, clipping and
    AdamW's weight decay all in play)."""
    from bert_tf.training import fit
    trainer = _pretrainer(tmp_path / "loop", 16, lr=5e-3, steps=10, warmup=2)
    start = [v.numpy() for v in trainer.model.weights]
    history = trainer.train(lambda ctx, batch_size, skip: pretraining_dataset(
        shards, batch_size, 32, 5, is_training=False).skip(skip), 3, 100, progress=False)

    model = BertPretrainer.from_config_object(BertConfig(**TINY))
    model.set_weights(start)
    fit.compile_for_pretraining(model, 5e-3, 10, 2)
    losses = []
    model.fit(fit.shard_batches(shards, 16, 32, 5, is_training=False), epochs=3,
              steps_per_epoch=1, shuffle=False, verbose=0, callbacks=[keras.callbacks.LambdaCallback(
                  on_epoch_end=lambda epoch, logs: losses.append(logs["loss"]))])
    np.testing.assert_allclose(losses, [h["loss"] for h in history], rtol=1e-5)
    assert max(h["grad_norm"] for h in history) > 1.0   # the clipping was exercised
    for ours, loop in zip(model.weights, trainer.model.weights):
        np.testing.assert_allclose(ours.numpy(), loop.numpy(), atol=2e-6, err_msg=ours.path)
    moved = max(np.abs(a - b).max() for a, b in zip(start, (v.numpy() for v in model.weights)))
    assert moved > 1e-3


def test_shards_read_without_tensorflow_equal_tf_data(shards):
    """fit.shard_batches (NumPy only, for backends without TensorFlow) reads the same
    values as the tf.data pipeline, in order, with the last partial batch kept."""
    from bert_tf.training import fit
    ours = list(fit.shard_batches(shards, 24, 32, 5, is_training=False))
    theirs = list(pretraining_dataset(shards, 24, 32, 5, is_training=False))
    assert len(ours) == len(theirs) == 6 and len(ours[-1][0]["token_ids"]) == 128 - 5 * 24
    for (inputs, labels), batch in zip(ours, theirs):
        for name, value in {**inputs, **labels}.items():
            np.testing.assert_array_equal(value, batch[name].numpy(), err_msg=name)
            assert value.dtype == batch[name].dtype.as_numpy_dtype, name
    # Training order: a fresh file order per pass, full batches only, every example seen.
    train = fit.shard_batches(shards, 16, 32, 5, shuffle_buffer=50)
    seen = np.concatenate([next(train)[0]["token_ids"] for _ in range(8)])
    assert len(np.unique(seen, axis=0)) == len(np.unique(np.concatenate(
        [b["token_ids"].numpy() for b in theirs]), axis=0))


def test_shard_errors_name_the_file_and_offset(tmp_path, shards):
    from bert_tf.training import fit
    first = sorted(tf.io.gfile.glob(shards))[0]
    data = open(first, "rb").read()
    cases = {"cut.tfrecord": data[:-10], "text.tfrecord": b"hello world, not a record\n",
             "empty.tfrecord": b""}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
    expected = {"cut.tfrecord": r"cut.tfrecord: record at byte \d+ is cut short",
                "text.tfrecord": "text.tfrecord: record at byte 0 has a bad length checksum",
                "empty.tfrecord": "empty.tfrecord: no records"}
    for name, message in expected.items():
        with pytest.raises(ValueError, match=message):
            list(fit.shard_batches(str(tmp_path / name), 4, 32, 5, is_training=False))
    with pytest.raises(ValueError, match=r"input_ids has 32 values, expected 64 "
                                         r"\(--max_seq_length\)"):
        next(fit.shard_batches(first, 4, 64, 5))
