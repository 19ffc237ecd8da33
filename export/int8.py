"""int8 serving (`export.saved_model --dtype int8`): the encoder's matmuls on int8 weights.

Dynamic quantization in the manner of ONNX Runtime's, built from stock TensorFlow ops: each
transformer block's four dense layers (query/key/value, attention output, intermediate,
output) keep their weights as int8 constants (symmetric, one scale per output column) and
quantize their input per call to uint8 over the batch's [min, max] (with 0 inside it;
ONNX Runtime also rounds the zero point to an integer, here it stays exact), the output
layer over each row's own [min, max] (Int8RowDense); oneDNN's u8 x s8 kernel
(QuantizedMatMulWithBiasAndDequantize, VNNI where the CPU has it) multiplies and returns
float32, the zero point's share taken off through the bias. The feed-forward's exact GELU
is folded into the int8 layer before it (Int8GeluDense). Everything else (embeddings,
attention's own matmuls, softmax, LayerNorm, the heads) stays float32. The weights are
frozen into the signatures (ServingModule.freeze_weights).

Where it pays: at batch 32 x 128 tokens the quantized layers are 2.3-3.0x float32's and
1.2-1.6x bfloat16's, the row-by-row output layer 1.4-2.0x float32's and 0.7-1.0x
bfloat16's; at batch 1 0.8x float32's (bench/int8_matmul.py). It costs accuracy
(docs/serving.md, "int8"). The kernel is oneDNN's:
TensorFlow's x86 pip builds have it (TF_ENABLE_ONEDNN_OPTS on, the default), a build
without oneDNN has no kernel for it and the signatures then fail with an error instead of
answering (tests/export/test_int8.py).
"""

import numpy as np
import tensorflow as tf


def vnni():
    """Whether this CPU multiplies u8 x s8 with VNNI (or AMX): its products accumulate in
    int32. Without it (AVX2, AVX-512 without VNNI) oneDNN's kernel adds pairs of
    products in int16 with saturation (vpmaddubsw): two products of 255 x 127 exceed
    32,767, and an answer came out wrong by up to 0.5 (tests/export/test_int8.py)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = set(f.read().split())
    except OSError:
        return True
    return bool(flags & {"avx512_vnni", "avx_vnni", "amx_int8"})


# The int8 weights' levels (127: -127..127). Where the kernel would saturate (no VNNI on
# the exporting machine), 63: two products of 255 x 63 stay below 32,767 (ONNX Runtime's
# `reduce_range` for such CPUs), at one bit of the weights' precision. An export made
# on a VNNI CPU is for VNNI CPUs (docs/serving.md, "int8").
WEIGHT_LEVELS = 127 if vnni() else 63


class Int8Dense:
    """A float32 Dense layer's inference (x @ kernel + bias on [rows, in]) with int8
    weights and a per-call uint8 quantization of x. `kernel` and `bias` stay readable as
    float32 (a transformer block reads the query/key/value kernel's columns directly for
    its [CLS]-only pass, which stays float32).

    Each output column has its own weight scale (its largest |weight| maps to the top
    level, WEIGHT_LEVELS). The kernel takes one weight range per matrix, so it is told
    the range [-1, 1] (the int8 values read as q / 127) and its
    float32 output is multiplied by the columns' scales afterwards; the bias, divided by
    those scales, goes into the kernel's bias. One scale per matrix instead would cost
    BERT's few large residual-stream columns' neighbours their precision: on the topics
    task it lost 1.5 points of held-out accuracy by itself (docs/serving.md, "int8")."""

    def __init__(self, dense, input_scale=1.0):
        """input_scale: what the inputs it will be given are times the layer's own (its
        kernel is divided by it)."""
        kernel = np.asarray(dense.kernel, np.float32) / np.float32(input_scale)
        self.kernel = kernel
        self.bias = np.asarray(dense.bias, np.float32)
        self.units = kernel.shape[1]
        self.levels = WEIGHT_LEVELS
        self.column_scales = np.maximum(np.abs(kernel).max(axis=0), 1e-12) / self.levels
        self.weights = np.clip(np.round(kernel / self.column_scales), -self.levels,
                               self.levels).astype(np.int8)
        # Column sums of the weights as the kernel reads them (int8 / 127): the zero
        # point's share of the product.
        self.column_sums = self.weights.astype(np.float32).sum(axis=0) / 127.0

    def __call__(self, x):
        out = self.unscaled(tf.cast(x, tf.float32)) * tf.constant(
            127.0 * self.column_scales, tf.float32)
        return tf.cast(out, x.dtype)

    def unscaled(self, x):
        """x @ kernel + bias of float32 x, each column divided by its weight scale (times
        127): the kernel's own output."""
        # uint8 over [min(x, 0), max(x, 0)] in one op (QuantizeV2, MIN_FIRST):
        # q = round((x - low) / s), s = (high - low) / 255.
        low = tf.minimum(tf.reduce_min(x), 0.0)
        high = tf.maximum(tf.reduce_max(x), 1e-6 + low)
        quantized = tf.quantization.quantize(x, low, high, tf.quint8, mode="MIN_FIRST")
        low = quantized.output_min
        scale = (quantized.output_max - low) / 255.0
        # x = s * q + low: the product is s * q @ w plus low times the weights' column
        # sums, which goes to the bias.
        return self.kernel_product(
            quantized.output, 255.0 * scale,
            tf.constant(self.bias / (127.0 * self.column_scales))
            + low * tf.constant(self.column_sums))

    def kernel_product(self, steps, max_steps, bias):
        """oneDNN's u8 x s8 kernel: uint8 `steps` standing for [0, max_steps] times the
        int8 weights read as int8 / 127, plus `bias`, in float32."""
        out = tf.raw_ops.QuantizedMatMulWithBiasAndDequantize(
            a=steps, b=tf.bitcast(tf.constant(self.weights), tf.qint8), bias=bias,
            min_a=0.0, max_a=max_steps, min_b=-1.0, max_b=1.0,
            min_freezed_output=0.0, max_freezed_output=1.0,
            Toutput=tf.float32, input_quant_mode="SCALED")
        # Without oneDNN the op has no real kernel and gives an empty tensor: an error
        # here, not a wrong answer.
        return tf.ensure_shape(out, [None, self.units])


class Int8RowDense(Int8Dense):
    """Int8Dense whose input is quantized row by row: each row (token) over its own [min,
    max] instead of one range for the whole batch (q = round((x - low) / s) per row). The
    kernel then multiplies the steps as plain numbers (range [0, 255]) and each row's step
    and zero point are applied to its output: a few elementwise passes over [rows, units],
    cheap where units is small. For the feed-forward's second layer, whose input (the
    GELU's output over the intermediate width) has a few tokens far larger than the
    rest."""

    def __call__(self, x):
        dtype = x.dtype
        x = tf.cast(x, tf.float32)
        low = tf.minimum(tf.reduce_min(x, axis=1, keepdims=True), 0.0)  # [rows, 1]
        step = (tf.maximum(tf.reduce_max(x, axis=1, keepdims=True), low + 1e-6) - low) / 255.0
        # Each row mapped onto [0, 255], then rounded by one per-tensor QuantizeV2 (oneDNN's
        # fast one; QuantizeV2's own per-row mode, MIN_COMBINED with axis=0, took 5x as long).
        steps = tf.quantization.quantize((x - low) / step, 0.0, 255.0, tf.quint8,
                                         mode="MIN_FIRST").output
        product = self.kernel_product(steps, 255.0, tf.zeros([self.units]))  # q @ int8 / 127
        # x = step * q + low per row: its product is step * (q @ w) + low * the columns'
        # sums, times the columns' scales.
        out = (product * step + low * tf.constant(self.column_sums)) * tf.constant(
            127.0 * self.column_scales, tf.float32) + tf.constant(self.bias)
        return tf.cast(out, dtype)


class Int8GeluDense(Int8Dense):
    """The feed-forward's first layer with its exact GELU: returns sqrt(2) * gelu(x @ kernel
    + bias), which the next layer takes with input_scale=sqrt(2). With y = x @ kernel + bias
    and u = y / sqrt(2), gelu(y) = y * (1 + erf(u)) / 2 = u * (1 + erf(u)) / sqrt(2); the
    columns' scales and the 1 / sqrt(2) are one multiply, and the rest is erf, an add and
    a multiply: four passes over the layer's [rows, intermediate] output instead of six."""

    def __call__(self, x):
        u = self.unscaled(tf.cast(x, tf.float32)) * tf.constant(
            127.0 * self.column_scales / np.sqrt(2.0), tf.float32)
        return tf.cast(u * (1.0 + tf.math.erf(u)), x.dtype)


DENSE_LAYERS = ("qkv", "attention_output", "intermediate", "output_dense")


def quantize_encoder(model):
    """Replaces the dense layers of every transformer block of `model`'s encoder by
    Int8Dense (in place; the model then only serves); a block with the exact GELU gets
    Int8GeluDense, which applies it. Returns the number replaced."""
    from bert_tf.models.layers.transformer import gelu_exact
    encoder = getattr(model, "encoder", model)
    count = 0
    for block in encoder.blocks:
        if any(isinstance(getattr(block, name), Int8Dense) for name in DENSE_LAYERS):
            continue
        # Keras tracks layers set as attributes; plain objects are not ones.
        gelu = block.activation is gelu_exact
        replaced = {"qkv": Int8Dense(block.qkv),
                    "attention_output": Int8Dense(block.attention_output),
                    "intermediate": (Int8GeluDense if gelu else Int8Dense)(block.intermediate),
                    "output_dense": Int8RowDense(block.output_dense,
                                                 input_scale=np.sqrt(2.0) if gelu else 1.0)}
        for name, layer in replaced.items():
            object.__setattr__(block, name, layer)
        if gelu:
            object.__setattr__(block, "activation", tf.identity)
        count += len(replaced)
    return count
