"""Is there an int8 matmul in stock TensorFlow that beats float32 and bfloat16 on this CPU?

The dense layers are ~65% of our serving time (docs/benchmarks.md, "Serving at batch 1, by
op"). ONNX Runtime's int8 export quantizes their activations per batch (uint8 with a zero
point) and their weights once (int8, symmetric). This times the same scheme built from
ops a SavedModel can hold, against float32 and bfloat16 MatMul, on the encoder's matmul
shapes at serving sizes:

- int8: the batch's min/max -> uint8 with a zero point -> oneDNN's u8 x s8 kernel
  (QuantizedMatMulWithBiasAndDequantize, SCALED mode) -> float32, the zero point's share
  taken off through the bias (s * z * column sums of the weights).
- int8 (kernel only): the kernel alone on inputs quantized beforehand.
- BatchMatMulV3 int8 x int8 -> int32, plain and XLA-compiled.

Each int8 output is checked against the float32 product (max |error| / max |product|).
The quantized kernel has no implementation without oneDNN (TF_ENABLE_ONEDNN_OPTS=0).

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


def build(tf, x, w):
    """{name: (tf.function, its float32 result or None)} for one shape."""
    n = w.shape[1]
    xf, wf = tf.constant(x), tf.constant(w)
    xb, wb = tf.cast(xf, tf.bfloat16), tf.cast(wf, tf.bfloat16)
    w_abs = float(np.abs(w).max())
    wq = tf.quantization.quantize(wf, -w_abs, w_abs, tf.qint8, mode="SCALED",
                                  round_mode="HALF_TO_EVEN")
    w_dequantized = tf.quantization.dequantize(wq.output, wq.output_min, wq.output_max,
                                               mode="SCALED")
    column_sums = tf.reduce_sum(w_dequantized, axis=0)
    bias = tf.zeros([n])

    def quantize_activations(a):
        lo, hi = tf.minimum(tf.reduce_min(a), 0.0), tf.maximum(tf.reduce_max(a), 0.0)
        scale = tf.maximum(hi - lo, 1e-8) / 255.0
        zero = tf.round(-lo / scale)
        q = tf.cast(tf.clip_by_value(tf.round(a / scale) + zero, 0, 255), tf.uint8)
        return tf.bitcast(q, tf.quint8), scale, zero

    def int8_matmul(a):
        q, scale, zero = quantize_activations(a)
        out = tf.raw_ops.QuantizedMatMulWithBiasAndDequantize(
            a=q, b=wq.output, bias=bias - scale * zero * column_sums,
            min_a=0.0, max_a=255.0 * scale, min_b=wq.output_min, max_b=wq.output_max,
            min_freezed_output=0.0, max_freezed_output=1.0, Toutput=tf.float32,
            input_quant_mode="SCALED")
        return out

    q_fixed, scale_fixed, zero_fixed = quantize_activations(xf)
    fixed_bias = bias - scale_fixed * zero_fixed * column_sums
    xs8 = tf.cast(tf.clip_by_value(tf.round(xf / (np.abs(x).max() / 127)), -127, 127), tf.int8)
    ws8 = tf.bitcast(wq.output, tf.int8)
    return {
        "float32": tf.function(lambda: tf.matmul(xf, wf)),
        "bfloat16": tf.function(lambda: tf.matmul(xb, wb)),
        "int8 (dynamic)": tf.function(lambda: int8_matmul(xf)),
        "int8 kernel only": tf.function(lambda: tf.raw_ops.QuantizedMatMulWithBiasAndDequantize(
            a=q_fixed, b=wq.output, bias=fixed_bias, min_a=0.0, max_a=255.0 * scale_fixed,
            min_b=wq.output_min, max_b=wq.output_max, min_freezed_output=0.0,
            max_freezed_output=1.0, Toutput=tf.float32, input_quant_mode="SCALED")),
        "BatchMatMulV3 s8": tf.function(lambda: tf.raw_ops.BatchMatMulV3(
            x=xs8, y=ws8, Tout=tf.int32)),
        "BatchMatMulV3 s8, XLA": tf.function(lambda: tf.raw_ops.BatchMatMulV3(
            x=xs8, y=ws8, Tout=tf.int32), jit_compile=True),
    }


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
    rows, errors = [], {}
    for what, m, k, n in SHAPES:
        # Activations as a LayerNorm output gives them (mean 0, a few outliers), weights
        # at BERT's initializer scale.
        x = rng.standard_normal((m, k)).astype(np.float32)
        w = (rng.standard_normal((k, n)) * 0.02).astype(np.float32)
        reference = x @ w
        cases = build(tf, x, w)
        calls = 200 if m < 100 else 10
        times = {name: timed(fn, calls, args.repeats) for name, fn in cases.items()}
        out = cases["int8 (dynamic)"]().numpy()
        errors[what] = float(np.abs(out - reference).max() / np.abs(reference).max())
        rows.append((what, m, k, n, times))
        print(what, {name: round(t, 3) for name, t in times.items()},
              f"int8 error {errors[what]:.1e}", flush=True)
    names = list(rows[0][4])
    lines = ["| matmul | tokens x in x out | " + " | ".join(f"{n} ms" for n in names)
             + " | float32 / int8 (dynamic) | bfloat16 / int8 (dynamic) | int8 error |",
             "|---|---|" + "---|" * (len(names) + 3)]
    for what, m, k, n, times in rows:
        dyn = times["int8 (dynamic)"]
        lines.append(f"| {what} | {m} x {k} x {n} | "
                     + " | ".join(f"{times[name]:.3f}" for name in names)
                     + f" | {times['float32'] / dyn:.2f}x | {times['bfloat16'] / dyn:.2f}x"
                     f" | {errors[what]:.1e} |")
    table = "\n".join(lines)
    print(table)
    if args.write:
        text = (
            "Stock TensorFlow ops a SavedModel can hold, one matmul of the encoder at a time, "
            "random activations (standard normal) and weights (0.02 scale). int8 (dynamic): "
            "the batch's min/max -> uint8 with a zero point -> `QuantizedMatMulWithBiasAnd"
            "Dequantize` (oneDNN's u8 x s8 kernel, SCALED mode; the zero point's share "
            "taken off through the bias), ONNX Runtime's dynamic scheme; error = max |int8 - "
            "float32| / max |float32|. Kernel only: on inputs quantized beforehand. "
            "BatchMatMulV3: int8 x int8 -> int32. Medians of "
            f"{args.repeats} blocks of calls in one process.\n\n" + table + "\n\n"
            f"Machine: {machine()}\n\nCommand: `python bench/int8_matmul.py --write`")
        write_section("int8 matmul in stock TensorFlow", text)


if __name__ == "__main__":
    main()
