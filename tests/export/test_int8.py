"""`export.saved_model --dtype int8` (export/int8.py): the encoder's dense layers on int8
weights through oneDNN's u8 x s8 kernel. The kernel computes exactly ONNX Runtime's
dynamic scheme (checked against the scheme in NumPy), its error against float32 is that of
the quantization; the export answers close to the float32 model, holds the quantized
matmuls and no weight variables, and without oneDNN it fails instead of answering.
(tests/export/test_export_tasks.py's C-API test loads an int8 export as TF Serving does.)"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.models.layers.transformer import gelu_exact
from export.int8 import Int8Dense, Int8GeluDense, Int8RowDense, vnni
from export.saved_model import main
from tests.task_runs import (TEXTS_A, TEXTS_B, loaded_export, pair_classifier_run,
                             python_classify)

QUANTIZED_OP = "QuantizedMatMulWithBiasAndDequantize"


def dense_and_activations(seed=0, rows=64, n_in=96, n_out=80):
    """A float32 Dense layer (BERT's weight scale) and inputs as a LayerNorm gives them,
    with two outlier channels (what real BERT activations have)."""
    rng = np.random.default_rng(seed)
    dense = keras.layers.Dense(n_out, dtype="float32")
    dense.build((None, n_in))
    dense.kernel.assign(rng.standard_normal((n_in, n_out)) * 0.05)
    dense.bias.assign(rng.standard_normal(n_out) * 0.1)
    x = rng.standard_normal((rows, n_in)).astype(np.float32)
    x[:, [3, 40]] *= 6.0
    return dense, x


def scheme_in_numpy(x, layer):
    """The dynamic scheme: x as uint8 steps over [min(x, 0), max(x, 0)], times Int8Dense's
    int8 weights, dequantized column by column."""
    low, high = min(x.min(), 0.0), max(x.max(), 0.0)
    scale = (high - low) / 255.0
    q = np.clip(np.round((x - low) / scale), 0, 255)
    w = layer.weights.astype(np.float64) * layer.column_scales
    return (scale * q + low) @ w + layer.bias


def test_int8_dense_is_the_dynamic_scheme_with_its_error():
    dense, x = dense_and_activations()
    layer = Int8Dense(dense)
    graph = tf.function(layer).get_concrete_function(
        tf.TensorSpec([None, x.shape[1]], tf.float32)).graph
    assert QUANTIZED_OP in {op.type for op in graph.get_operations()}
    got = layer(x).numpy()
    want = dense(x).numpy()
    scale = np.abs(want).max()
    # The kernel is the scheme (to float32 rounding of an int32 accumulation)...
    np.testing.assert_allclose(got, scheme_in_numpy(x, layer), atol=2e-5 * scale)
    # ...whose error against float32 is the quantization's: small, and not zero.
    error = np.abs(got - want).max() / scale
    assert 1e-4 < error < 3e-2, error
    kernel = dense.kernel.numpy()
    assert np.array_equal(layer.weights, np.clip(np.round(
        kernel * layer.levels / np.abs(kernel).max(axis=0)), -layer.levels, layer.levels))
    # 127 levels where the CPU has VNNI; 63 where oneDNN's kernel would saturate int16.
    assert layer.levels == (127 if vnni() else 63)


def test_each_output_column_keeps_its_own_precision():
    """BERT's residual stream has a few columns far larger than the rest: with one weight
    scale per matrix the small columns would get a few int8 steps; with one per column
    each keeps about the precision it would have alone."""
    dense, x = dense_and_activations()
    kernel = dense.kernel.numpy()
    kernel[:, :2] *= 40.0  # two large output columns
    dense.kernel.assign(kernel)
    got = Int8Dense(dense)(x).numpy()
    want = dense(x).numpy()
    per_column = np.abs(got - want).max(axis=0) / np.abs(want).max(axis=0)
    step = np.abs(kernel).max() / 127  # one scale per matrix
    per_matrix = (x @ (np.round(kernel / step) * step) + dense.bias.numpy() - want)
    per_matrix = np.abs(per_matrix).max(axis=0) / np.abs(want).max(axis=0)
    # per column: 3% (the input's uint8 steps); per matrix: 30% (median over columns)
    assert np.median(per_column[2:]) < 0.05
    assert np.median(per_matrix[2:]) > 5 * np.median(per_column[2:])


def test_the_folded_gelu_is_sqrt2_times_gelu_of_the_int8_product():
    """Int8GeluDense applies the exact GELU to Int8Dense's product in four passes; its
    output is sqrt(2) times that (the next layer takes it with input_scale=sqrt(2), which
    leaves that layer's int8 weights as they were)."""
    dense, x = dense_and_activations()
    want = np.sqrt(2.0) * gelu_exact(Int8Dense(dense)(x)).numpy()
    got = Int8GeluDense(dense)(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())
    follow = keras.layers.Dense(7, dtype="float32")
    follow.build((None, dense.units))
    assert np.array_equal(Int8Dense(follow, input_scale=np.sqrt(2.0)).weights,
                          Int8Dense(follow).weights)


def test_row_by_row_quantization_keeps_the_other_tokens_precision():
    """Int8RowDense quantizes each row of its input over the row's own [min, max]: the
    scheme in NumPy row by row, and a token 30 times larger than the rest no longer
    coarsens their steps (the GELU outputs the feed-forward's second layer takes)."""
    dense, x = dense_and_activations(n_in=192)
    x = np.abs(x) - 0.1
    x[5] *= 30.0
    layer = Int8RowDense(dense)
    got = layer(x).numpy()
    want = dense(x).numpy()
    rows = [scheme_in_numpy(row[None], layer) for row in x]
    np.testing.assert_allclose(got, np.concatenate(rows), atol=2e-5 * np.abs(want).max())
    others = np.arange(len(x)) != 5
    per_row = np.abs(got - want)[others].max()
    per_batch = np.abs(Int8Dense(dense)(x).numpy() - want)[others].max()
    assert per_batch > 8 * per_row, (per_batch, per_row)


@pytest.fixture(scope="module")
def int8_export(tmp_path_factory):
    """A tiny classification run and its `--dtype int8` export (through the command)."""
    root = tmp_path_factory.mktemp("int8")
    run = pair_classifier_run(str(root / "run"))
    path = main(["--task", "classification", "--checkpoint_dir", run,
                 "--output_dir", str(root / "models"), "--dtype", "int8"])
    return run, path


def test_int8_export_answers_close_to_float32(int8_export):
    run, path = int8_export
    want, _ = python_classify(run, TEXTS_A, TEXTS_B)
    got = loaded_export(path).signatures["serving_default"](
        text_a=tf.constant(TEXTS_A), text_b=tf.constant(TEXTS_B))
    # The tiny model's large random weights (initializer 0.5) make its logits, and the
    # quantization's share of them, large: the bound is looser than MiniLM's
    # (docs/benchmarks.md, "Serving precision and accuracy").
    difference = np.abs(got["probabilities"].numpy() - want["probabilities"]).max()
    assert 1e-5 < difference < 0.1, difference
    # The labels are float32's wherever float32's top two are more than 0.1 apart (this
    # model leaves two of the five texts closer than that, 0.07 and 0.08).
    top_two = np.sort(want["probabilities"], axis=1)[:, -2:]
    clear = top_two[:, 1] - top_two[:, 0] > 0.1
    assert clear.sum() == 3
    labels = [x.decode() for x in got["label"].numpy()]
    assert [a for a, c in zip(labels, clear) if c] == \
        [b for b, c in zip(want["labels"], clear) if c]
    # Every matmul of the encoder's dense layers is the quantized one (2 blocks: 4 in the
    # first, 3 in the last's [CLS]-only pass, whose query/key/value matmul reads the float
    # kernel's columns), and the export holds no weight variable.
    saved = tf.saved_model.load(path)
    graph = saved.signatures["serve_tokenized"].graph.as_graph_def()
    ops = [node.op for f in graph.library.function for node in f.node_def] + \
        [node.op for node in graph.node]
    assert ops.count(QUANTIZED_OP) == 7, ops.count(QUANTIZED_OP)
    names = [name for name, _ in tf.train.list_variables(
        os.path.join(path, "variables", "variables"))]
    assert not any("kernel" in n or "embeddings" in n for n in names), names


def test_without_onednn_the_int8_export_fails_instead_of_answering(int8_export):
    """A TensorFlow without oneDNN has no kernel for the quantized matmul (it gives an
    empty tensor): the signature then raises instead of returning wrong numbers."""
    _, path = int8_export
    code = ("import sys, tensorflow as tf, tensorflow_text\n"
            "f = tf.saved_model.load(sys.argv[1]).signatures['serving_default']\n"
            "try:\n"
            "    out = f(text_a=tf.constant(['a dog']), text_b=tf.constant(['x']))\n"
            "except tf.errors.OpError as e:\n"
            "    print('refused', str(e).splitlines()[0])\n"
            "else:\n"
            "    print('answered', out['probabilities'].numpy().tolist())\n")
    done = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True,
                          env=dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0",
                                   TF_CPP_MIN_LOG_LEVEL="2"), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("refused"), done.stdout


@pytest.mark.parametrize("what", ["MiniLM intermediate, batch 1", "MiniLM output, batch 1"])
def test_the_int8_matmul_benchmark_runs_what_the_export_runs(what):
    """bench/int8_matmul.py times the layers export/int8.py builds: each of its cases runs,
    and its int8 row answers as the export's layer for that matmul does."""
    from bench.int8_matmul import build
    rng = np.random.default_rng(0)
    x = rng.standard_normal((24, 64)).astype(np.float32)
    w = (rng.standard_normal((64, 48)) * 0.02).astype(np.float32)
    cases = build(tf, x, w, what)
    for name, fn in cases.items():
        assert fn().shape == (24, 48), name
    got = cases["int8 (dynamic)"]().numpy()
    layer_type = Int8RowDense if " output" in what else Int8Dense
    dense = keras.layers.Dense(48, dtype="float32")
    dense.build((None, 64))
    dense.kernel.assign(w)
    want = layer_type(dense)(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
