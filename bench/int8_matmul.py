"""Is there an int8 matmul in stock TensorFlow that beats float32 and bfloat16 on this CPU?

The dense layers are ~65% of our serving time (docs/benchmarks.md, "Serving at batch 1, by
op"). ONNX Runtime's int8 export quantizes their activations per batch (uint8 with a zero
point) and their weights once (int8, symmetric). This times the same scheme built from
ops a SavedModel can hold, against float32 and bfloat16 MatMul, on the encoder's matmul
shapes at serving sizes:

- int8 (dynamic): what `export.saved_model --dtype int8` runs (export/int8.py): the
  batch's min/max (each row's, for the feed-forward's output layer: Int8RowDense) ->
  uint8 (QuantizeV2) -> oneDNN's u8 x s8 kernel (QuantizedMatMulWithBiasAndDequantize)
  -> float32, the offset's share in the bias, times the weight columns' scales.
- int8 (kernel only): the kernel alone on inputs quantized beforehand.
- BatchMatMulV3 int8 x int8 -> int32, plain and XLA-compiled.

Each int8 output is checked against the float32 product (max |error| / max |product|).
The quantized kernel has no implementation without oneDNN (TF_ENABLE_ONEDNN_OPTS=0).

Beside them, the peer's kernel: ONNX Runtime (at its default threads) running a graph of
that one MatMul with the weights as an initializer, which its MLAS kernels pre-pack once,
timed after every TensorFlow row (its idle threads spin for a while after a call).

    python bench/int8_matmul.py [--repeats 5] [--write]
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import machine, median_time, write_section  # noqa: E402

# (what, tokens, in, out): MiniLM (H=384, I=1536) and BERT-base (H=768, I=3072) matmuls at
# batch 1 (one 24-token row, run_by_length's width for an 18-piece text) and batch 32 of
# full 128-token rows.
SHAPES = [
    ("MiniLM intermediate, batch 1", 24, 384, 1536),
    ("MiniLM output, batch 1", 24, 1536, 384),
    ("MiniLM intermediate, batch 32 x 128", 4096, 384, 1536),
    ("MiniLM output, batch 32 x 128", 4096, 1536, 384),
    ("BERT-base intermediate, batch 32 x 128", 4096, 768, 3072),
    ("BERT-base output, batch 32 x 128", 4096, 3072, 768),
]


def build(tf, x, w, what):
    """{name: tf.function} for one shape; "int8 (dynamic)" is what `--dtype int8` runs
    for that layer (export/int8.py: Int8RowDense for the output layer, else Int8Dense)."""
    import keras
    from export.int8 import Int8Dense, Int8RowDense
    dense = keras.layers.Dense(w.shape[1], dtype="float32")
    dense.build((None, w.shape[0]))
    dense.kernel.assign(w)
    layer = (Int8RowDense if " output" in what else Int8Dense)(dense)
    xf, wf = tf.constant(x), tf.constant(w)
    xb, wb = tf.cast(xf, tf.bfloat16), tf.cast(wf, tf.bfloat16)
    # The kernel alone: x quantized beforehand as Int8Dense quantizes it.
    low, high = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
    fixed = tf.quantization.quantize(xf, low, high, tf.quint8, mode="MIN_FIRST")
    scale = (fixed.output_max - fixed.output_min) / 255.0
    bias = fixed.output_min * tf.constant(layer.column_sums)
    product = tf.constant(x @ w)
    xs8 = tf.cast(tf.clip_by_value(tf.round(xf / (np.abs(x).max() / 127)), -127, 127), tf.int8)
    ws8 = tf.constant(layer.weights)
    return {
        "float32": tf.function(lambda: tf.matmul(xf, wf)),
        "bfloat16": tf.function(lambda: tf.matmul(xb, wb)),
        # The weights as a constant of the graph, as a --freeze_weights export holds them:
        # oneDNN packs such a matrix once and keeps it.
        "float32 frozen": tf.function(lambda: tf.matmul(xf, tf.constant(w))),
        "bfloat16 frozen": tf.function(lambda: tf.matmul(xb, tf.constant(w, tf.bfloat16))),
        # What a call costs without the product (it returns one computed beforehand): at a
        # few rows it is a large part of each time.
        "call alone": tf.function(lambda: tf.identity(product)),
        "int8 (dynamic)": tf.function(lambda: layer(xf)),
        "int8 kernel only": tf.function(
            lambda: layer.kernel_product(fixed.output, 255.0 * scale, bias)),
        "BatchMatMulV3 s8": tf.function(lambda: tf.raw_ops.BatchMatMulV3(
            x=xs8, y=ws8, Tout=tf.int32)),
        "BatchMatMulV3 s8, XLA": tf.function(lambda: tf.raw_ops.BatchMatMulV3(
            x=xs8, y=ws8, Tout=tf.int32), jit_compile=True),
    }


def onnx_matmul(x, w=None):
    """() -> x @ w through an ONNX Runtime session of one MatMul node, w an initializer;
    without w, a session of one Identity node (what a call costs without the product)."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper
    if w is None:
        node, out, initializer = helper.make_node("Identity", ["x"], ["y"]), x.shape, []
    else:
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
        out, initializer = (x.shape[0], w.shape[1]), [numpy_helper.from_array(w, "w")]
    graph = helper.make_graph(
        [node], "matmul", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], initializer=initializer)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return lambda: session.run(["y"], {"x": x})[0]


def timed(fn, calls, repeats):
    """Median milliseconds per call over `repeats` blocks of `calls` calls."""
    return median_time(lambda: [fn() for _ in range(calls)], repeats) / calls * 1e3


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5, help="blocks of calls; the median")
    p.add_argument("--write", action="store_true", help="write docs/benchmarks.md's section")
    args = p.parse_args()
    import tensorflow as tf
    rng = np.random.default_rng(0)
    rows, errors, inputs = [], {}, {}
    for what, m, k, n in SHAPES:
        # Activations as a LayerNorm output gives them (mean 0, a few outliers), weights
        # at BERT's initializer scale.
        x = rng.standard_normal((m, k)).astype(np.float32)
        w = (rng.standard_normal((k, n)) * 0.02).astype(np.float32)
        reference = x @ w
        cases = build(tf, x, w, what)
        calls = 200 if m < 100 else 10
        times = {name: timed(fn, calls, args.repeats) for name, fn in cases.items()}
        out = cases["int8 (dynamic)"]().numpy()
        errors[what] = float(np.abs(out - reference).max() / np.abs(reference).max())
        rows.append((what, m, k, n, times))
        inputs[what] = x, w
        print(what, {name: round(t, 3) for name, t in times.items()},
              f"int8 error {errors[what]:.1e}", flush=True)
    for what, m, k, n, times in rows:     # the same inputs, after every TensorFlow row
        x, w = inputs[what]
        peer = onnx_matmul(x, w)
        np.testing.assert_allclose(peer(), x @ w, rtol=1e-4, atol=1e-4)
        calls = 200 if m < 100 else 10
        times["ONNX Runtime float32"] = timed(peer, calls, args.repeats)
        times["ONNX Runtime call alone"] = timed(onnx_matmul(x), calls, args.repeats)
        print(what, {name: round(times[name], 3) for name in (
            "ONNX Runtime float32", "ONNX Runtime call alone")}, flush=True)
    names = list(rows[0][4])
    lines = ["| matmul | tokens x in x out | " + " | ".join(f"{n} ms" for n in names)
             + " | float32 / int8 (dynamic) | bfloat16 / int8 (dynamic) | ONNX Runtime float32"
             " / our float32 frozen | int8 error |",
             "|---|---|" + "---|" * (len(names) + 4)]
    for what, m, k, n, times in rows:
        dyn = times["int8 (dynamic)"]
        lines.append(f"| {what} | {m} x {k} x {n} | "
                     + " | ".join(f"{times[name]:.3f}" for name in names)
                     + f" | {times['float32'] / dyn:.2f}x | {times['bfloat16'] / dyn:.2f}x"
                     f" | {times['ONNX Runtime float32'] / times['float32 frozen']:.2f}x"
                     f" | {errors[what]:.1e} |")
    table = "\n".join(lines)
    print(table)
    if args.write:
        text = (
            "Stock TensorFlow ops a SavedModel can hold, one matmul of the encoder at a time, "
            "random activations (standard normal) and weights (0.02 scale). int8 (dynamic): "
            "what `export.saved_model --dtype int8` runs (export/int8.py): the batch's "
            "min/max (each row's for the output layer, Int8RowDense) -> uint8 (QuantizeV2) -> "
            "`QuantizedMatMulWithBiasAndDequantize` (oneDNN's u8 x s8 kernel; the offset's "
            "share in the bias) -> times the weight columns' scales; error = max |int8 - "
            "float32| / max |float32| on these random inputs (timings do not depend on the "
            "values; the error does: a trained model's activations have outlier channels, and "
            "what int8 costs a fine-tuned model is in \"Serving precision and accuracy\"). "
            "Kernel only: on inputs quantized beforehand. "
            "BatchMatMulV3: int8 x int8 -> int32. ONNX Runtime float32: the peer's "
            "kernel, a one-MatMul graph with the weights as an initializer (MLAS pre-packs "
            "them), at its default threads, timed after every TensorFlow row; the ratio is "
            "its time over our float32 frozen's (below 1: the peer is faster). Call alone: "
            "a `tf.function` returning the product computed beforehand, an ONNX Runtime "
            "session of one Identity node; at a few rows it is a large part of each time. "
            "Frozen: the weights a constant of the graph, as in a `--freeze_weights` export "
            "(oneDNN packs them once). Medians of "
            f"{args.repeats} blocks of calls in one process.\n\n" + table + "\n\n"
            f"Machine: {machine()}\n\nCommand: `python bench/int8_matmul.py --write`")
        write_section("int8 matmul in stock TensorFlow", text)


if __name__ == "__main__":
    main()
