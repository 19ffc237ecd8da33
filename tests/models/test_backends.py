"""The Keras model code on Keras' three backends: TensorFlow, JAX and PyTorch (CPU).

tests/backend_worker.py runs once per backend, the three at once, in fresh processes
(Keras picks its backend at import). Each builds the encoder, the pretrainer and every
task model on the same NumPy weights, saves and reloads them as .keras files, trains them
a few steps with fit(), runs a mixed-bfloat16 pretraining step and loads MiniLM through
the HF converter; on JAX and PyTorch with TensorFlow unimportable. This file compares
what they computed.
"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from bert_tf.base.cli import check_keras_backend
from tests import ROOT
from tests import backend_worker

OTHERS = ("jax", "torch")


def _env(backend):
    env = dict(os.environ, KERAS_BACKEND=backend)
    if backend == "jax":
        # XLA's CPU compile time dominates these tiny models (JAX compiles each eager op
        # once per shape: ~600 compiles here); its unoptimised code gives the same float32
        # results here (to ~1e-6) in a third of the time. The older loop emitters instead
        # of the fusion emitters, and no expensive LLVM passes, halve the compile time
        # again (the worker's CPU time from ~37 s to ~21 s) with the same results.
        env["XLA_FLAGS"] = ("--xla_backend_optimization_level=0 "
                            "--xla_cpu_use_fusion_emitters=false "
                            "--xla_llvm_disable_expensive_passes=true")
    return env


@pytest.fixture(scope="module")
def runs(tmp_path_factory, minilm):
    out = tmp_path_factory.mktemp("backends")
    inputs = str(out / "minilm_inputs.npz")
    np.savez(inputs, **minilm["inputs"])
    workers = {b: subprocess.Popen(
        [sys.executable, "-m", "tests.backend_worker", str(out), inputs, minilm["path"]],
        cwd=ROOT, env=_env(b), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for b in ("tensorflow",) + OTHERS}
    for backend, worker in workers.items():
        log = worker.communicate()[0]
        assert worker.returncode == 0, f"{backend} worker failed:\n{log[-5000:]}"
    return out, {b: dict(np.load(out / f"{b}.npz")) for b in workers}


def _close(actual, expected, rel, what):
    """|actual - expected| <= rel * max(1, max|expected|): relative to the tensor's scale,
    so one tolerance serves logits near 0.1 and MiniLM's hidden states near 10."""
    scale = max(1.0, float(np.abs(expected).max()))
    diff = float(np.abs(actual - expected).max())
    assert diff <= rel * scale, f"{what}: max difference {diff:.2e} (scale {scale:.1f})"
    return diff


def test_model_code_runs_without_tensorflow(runs):
    _, results = runs
    for backend in OTHERS:
        assert not results[backend].pop("imported_tensorflow"), backend


def test_outputs_equal_across_backends_on_the_same_weights(runs):
    """Encoder (every layer), pretrainer heads, the five task heads, MiniLM: 1e-5."""
    _, results = runs
    reference = results["tensorflow"]
    same_weights = [k for k in reference if not k.startswith(("train/", "bfloat16/", "fused/"))
                    and k != "imported_tensorflow"]
    assert {k.split("/")[0] for k in same_weights} == {
        "encoder", "pretrainer", "classifier", "regressor", "token_classifier",
        "span_labeler", "multiple_choice", "minilm"}
    for backend in OTHERS:
        assert set(results[backend]) >= set(same_weights)
        for key in same_weights:
            _close(results[backend][key], reference[key], 1e-5, f"{backend} {key}")


def test_minilm_matches_transformers_on_every_backend(runs, minilm):
    """The MiniLM parity test (tests/checkpoints/test_dispatch.py) on each backend."""
    _, results = runs
    for backend, result in results.items():
        for key, reference in (("sequence_output", minilm["hidden"]),
                               ("pooled_output", minilm["pooled"])):
            diff = np.abs(result["minilm/" + key] - reference).max()
            assert diff < 1e-4, f"{backend} MiniLM {key}: {diff:.2e}"


def attention_probabilities():
    """softmax(q k^T / sqrt(d) + bias) of the worker's attention inputs, and v."""
    q, k, v, bias = backend_worker.attention_inputs()
    logits = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]) + bias
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    return probs / probs.sum(-1, keepdims=True), v


def test_fused_attention_equals_the_blocks_own_ops(runs):
    """attention_implementation="fused" (SDPA on torch, XLA's fused op on a JAX CPU, the
    blocks' own ops on TensorFlow): MiniLM's outputs equal the plain ones on real weights
    (padded rows included), and one block's attention equals softmax(q k^T / sqrt(d) +
    bias) v computed here."""
    _, results = runs
    probs, v = attention_probabilities()
    for backend, result in results.items():
        for key in [k for k in result if k.startswith("minilm/")]:
            _close(result["fused/" + key], results["tensorflow"][key], 1e-5,
                   f"{backend} fused {key}")
        _close(result["fused/attention"], probs @ v, 1e-5, f"{backend} fused attention")


def test_attention_dropout_is_unbiased_at_the_blocks_rate(runs):
    """Attention dropout at rate p (0.5 here), 400 draws on each backend: the mean is the
    attention without dropout (within 5 standard errors), and the variance of each output
    is p / (1 - p) * sum_j probs_j^2 v_j^2, what dropping each probability with chance p
    and scaling the rest by 1 / (1 - p) gives (within 25%: a wrong rate or scale falls
    outside; at p = 0.1 the variance would be 9x smaller)."""
    _, results = runs
    probs, v = attention_probabilities()
    variance = (probs ** 2) @ (v ** 2)  # p / (1 - p) = 1
    for backend, result in results.items():
        error = np.abs(result["fused/dropout_mean"] - probs @ v)
        standard_error = np.sqrt(variance / backend_worker.DROPOUT_DRAWS)
        assert np.all(error <= 5 * standard_error + 1e-6), f"{backend}: {error.max():.3f}"
        ratio = result["fused/dropout_variance"].mean() / variance.mean()
        assert 0.8 < ratio < 1.25, f"{backend}: variance {ratio:.2f}x the expected"


def test_fused_dropout_on_a_gpu_needs_xla_without_command_buffers(runs):
    _, results = runs
    assert str(results["jax"]["fused/refusal"]) == (
        "fused attention with dropout on a GPU needs XLA_FLAGS="
        "--xla_gpu_enable_command_buffer= set before JAX starts (XLA aborts when it records "
        "cuDNN's attention with dropout into a command buffer)")


def test_training_steps_agree_across_backends(runs):
    """fit() from the same weights on the same batches: the pretraining step (google's
    loss, AdamW with decay exclusions, warmup schedule, clipping) and every task head's
    fine-tuning step give the same losses, and the same weights after them."""
    _, results = runs
    reference = results["tensorflow"]
    losses = [k for k in reference if k.endswith("/losses") and k.startswith("train/")]
    assert len(losses) == 5
    for key in losses:  # two steps on one batch: the second loss is lower
        assert reference[key][1] < reference[key][0], f"{key} did not fall: {reference[key]}"
    weights = [k for k in reference if k.startswith("train/pretrainer/weights/")]
    assert len(weights) == len(backend_worker.fill(
        backend_worker.BertPretrainer.from_config_object(backend_worker.TINY)).weights)
    for backend in OTHERS:
        for key in losses + ["train/pretrainer/eval"]:
            np.testing.assert_allclose(results[backend][key], reference[key], rtol=1e-5,
                                       err_msg=f"{backend} {key}")
        for key in weights:
            _close(results[backend][key], reference[key], 1e-5, f"{backend} {key}")
        # After two Adam steps tiny gradient differences show a little more in outputs.
        for key in (k for k in reference if k.startswith("train/") and "/outputs/" in k):
            _close(results[backend][key], reference[key], 1e-4, f"{backend} {key}")


def test_mixed_bfloat16_pretraining_step_on_every_backend(runs):
    """The GPU setting on CPU: bfloat16 compute, float32 weights and logits. Near the
    float32 model, not equal to it (bfloat16 keeps 8 bits of mantissa)."""
    _, results = runs
    for backend, result in results.items():
        logits, exact = result["bfloat16/mlm_logits"], result["pretrainer/mlm_logits"]
        assert logits.dtype == np.float32
        assert 0 < np.abs(logits - exact).max() < 0.05, backend
        loss = result["bfloat16/losses"][0]
        assert abs(loss - result["train/pretrainer/losses"][0]) < 0.02, (backend, loss)


def test_models_saved_on_jax_and_torch_load_on_tensorflow(runs):
    """Train on a GPU with JAX or torch, export and serve with TensorFlow: the .keras
    files the other backends wrote load here and give TensorFlow's outputs."""
    out, results = runs
    x = backend_worker.inputs()
    model_inputs = {"encoder": x, "pretrainer": backend_worker.pretraining_batch(0)[0],
                    "classifier": x, "regressor": x, "token_classifier": x,
                    "span_labeler": x, "multiple_choice": backend_worker.inputs(
                        1, (backend_worker.BATCH, 2, backend_worker.SEQ))}
    for backend in OTHERS:
        for name, inputs in model_inputs.items():
            model = keras.saving.load_model(out / backend / f"{name}.keras")
            flat = keras.tree.flatten_with_path(model(inputs))
            assert flat
            for path, value in flat:
                key = name + "/" + "/".join(map(str, path))
                _close(keras.ops.convert_to_numpy(value), results["tensorflow"][key], 1e-5,
                       f"{backend} {name}.keras on tensorflow")


def test_commands_say_they_run_on_tensorflow(monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    monkeypatch.delitem(sys.modules, "keras")   # as before Keras is imported
    with pytest.raises(ValueError, match=r"^KERAS_BACKEND=jax: the commands run on "
                                         r"TensorFlow .* docs/backends.md$"):
        check_keras_backend()
    monkeypatch.setitem(sys.modules, "keras", keras)   # once imported, Keras' own answer
    check_keras_backend()
    result = subprocess.run([sys.executable, "-m", "bert_tf.extract_features",
                             "--input_file=x", "--output_file=y", "--init_checkpoint=z"],
                            cwd=ROOT, env=_env("torch"), capture_output=True, text=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(
        "error: KERAS_BACKEND=torch: the commands run on TensorFlow"), result.stderr
