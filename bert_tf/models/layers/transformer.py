"""One post-LayerNorm BERT transformer block: self-attention and feed-forward, each
followed by dropout, a residual add and LayerNorm (google's `transformer_model`).

Query, key and value live in one [hidden, 3 * hidden] kernel so a block does one large
matmul instead of three small ones; the checkpoint converters split and join it.
"""

import math
import random

import keras
from keras import ops

from bert_tf.models.layers import fused_attention

# Added to the attention logits of padded keys, as in google's original (-10000). It is
# finite so that a fully padded row stays well-defined, and exp(-10000) is 0 in any float.
MASK_LOGIT = -10000.0
# How a block computes its attention: "plain", its own Keras ops (every backend); "fused",
# one fused kernel where the backend has one (bert_tf/models/layers/fused_attention.py says which).
ATTENTION_IMPLEMENTATIONS = ("plain", "fused")


def gelu_exact(x):
    """x * Phi(x) written with erf, as HF and google's first release write it. Keras'
    `gelu(approximate=False)` lowers to TF's erfc form, which is the same function but
    slower on CPU (Eigen and XLA); this is the largest elementwise op of a block."""
    return 0.5 * x * (1.0 + ops.erf(x * (1.0 / math.sqrt(2.0))))


def activation_fn(name):
    """`hidden_act` -> function. "gelu" is the exact erf GELU (google's first release,
    HF "gelu"); "gelu_new"/"gelu_tanh" the tanh approximation (tensorflow/models)."""
    from bert_tf.base.config import GELU_EXACT, GELU_TANH
    if name in GELU_EXACT:
        return gelu_exact
    if name in GELU_TANH:
        return lambda x: keras.activations.gelu(x, approximate=True)
    if name in ("swish", "silu"):
        return keras.activations.silu
    return keras.activations.get(name)


@keras.saving.register_keras_serializable(package="bert_tf")
class TransformerBlock(keras.layers.Layer):

    def __init__(self, hidden_size, num_attention_heads, intermediate_size,
                 hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                 initializer_range=0.02, layer_norm_eps=1e-12, attention_implementation="plain",
                 **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.head_size = hidden_size // num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.activation = activation_fn(hidden_act)
        self.attention_implementation = check_attention_implementation(
            attention_implementation)
        # The seed of a fused kernel's own dropout (a compile-time constant there): one per
        # block, drawn from Python's generator (keras.utils.set_random_seed seeds it) when
        # a fused kernel first needs it, so that plain blocks leave that generator alone.
        self.fused_dropout_seed = None

        def dense(units, name):
            return keras.layers.Dense(
                units, kernel_initializer=keras.initializers.TruncatedNormal(
                    stddev=initializer_range),
                dtype=self.dtype_policy, name=name)

        def layer_norm(name):
            return keras.layers.LayerNormalization(
                epsilon=layer_norm_eps, dtype=self.dtype_policy, name=name)

        self.qkv = dense(3 * hidden_size, "qkv")
        self.attention_output = dense(hidden_size, "attention_output")
        self.attention_layer_norm = layer_norm("attention_layer_norm")
        self.intermediate = dense(intermediate_size, "intermediate")
        self.output_dense = dense(hidden_size, "output")
        self.output_layer_norm = layer_norm("output_layer_norm")
        self.attention_dropout = keras.layers.Dropout(attention_probs_dropout_prob,
                                                      dtype=self.dtype_policy)
        self.hidden_dropout = keras.layers.Dropout(hidden_dropout_prob, dtype=self.dtype_policy)

    def build(self, input_shape):
        h, i = self.hidden_size, self.intermediate_size
        self.qkv.build((None, None, h))
        self.attention_output.build((None, None, h))
        self.attention_layer_norm.build((None, None, h))
        self.intermediate.build((None, None, h))
        self.output_dense.build((None, None, i))
        self.output_layer_norm.build((None, None, h))
        self.built = True

    def attend(self, query, key, value, attention_bias, training):
        """Scaled dot-product attention with dropout on the probabilities. query: [batch,
        heads, rows, size]; key, value: [batch, heads, seq, size]; attention_bias: [batch,
        1, 1, seq]. Returns the context, [batch, heads, rows, size]."""
        scale = 1.0 / math.sqrt(self.head_size)
        if self.attention_implementation == "fused":
            rate = self.attention_probs_dropout_prob if training else 0.0
            if self.fused_dropout_seed is None:
                self.fused_dropout_seed = random.randint(1, 2**31 - 1)
            context = fused_attention.attend(query, key, value, attention_bias, scale, rate,
                                             self.fused_dropout_seed)
            if context is not None:
                return context
        # Scale the query rather than the [rows, seq] logits: fewer multiplies.
        query = query * ops.cast(scale, query.dtype)
        logits = ops.matmul(query, ops.swapaxes(key, -1, -2))  # [batch, heads, rows, seq]
        logits = logits + ops.cast(attention_bias, logits.dtype)
        probs = ops.softmax(logits, axis=-1)
        probs = self.attention_dropout(probs, training=training)
        return ops.matmul(probs, value)

    def call(self, x, attention_bias, training=False, query_rows=None):
        """x: [batch, seq, hidden]; attention_bias: [batch, 1, 1, seq], 0 or MASK_LOGIT.
        Returns [batch, seq, hidden]; with query_rows=n, only the first n positions'
        outputs, [batch, n, hidden] (every position is still attended to): what a head on
        [CLS] needs from the last block, for a fraction of its work."""
        batch, seq = ops.shape(x)[0], ops.shape(x)[1]
        heads, size, h = self.num_attention_heads, self.head_size, self.hidden_size

        # Everything but the attention itself is per token, so it runs on
        # [batch * seq, hidden]: each Dense is then one 2-D MatMul, which grappler fuses
        # with its bias add (a 3-D input goes through tensordot's reshapes, which hide the
        # bias add from the fusion; with oneDNN the GELU and residual adds fuse too).
        flat = ops.reshape(x, (-1, h))  # [batch * seq, hidden]
        if query_rows is None:
            rows = seq
            qkv = self.qkv(flat)  # [batch * seq, 3 * hidden]
            qkv = ops.reshape(qkv, (batch, seq, 3, heads, size))
            qkv = ops.transpose(qkv, (2, 0, 3, 1, 4))  # [3, batch, heads, seq, size]
            # unstack, not qkv[0], qkv[1], qkv[2]: the gradient of unstack is one stack,
            # while each slice's gradient writes a zero-filled copy of all of qkv.
            query, key, value = ops.unstack(qkv, 3, axis=0)
        else:
            # Keys and values of every position, queries of the first rows only: the
            # same kernel's column blocks [query | key | value].
            rows = query_rows
            kernel = ops.cast(self.qkv.kernel, x.dtype)
            bias = ops.cast(self.qkv.bias, x.dtype)
            kv = ops.matmul(flat, kernel[:, h:]) + bias[h:]  # [batch * seq, 2 * hidden]
            kv = ops.transpose(ops.reshape(kv, (batch, seq, 2, heads, size)), (2, 0, 3, 1, 4))
            key, value = ops.unstack(kv, 2, axis=0)
            flat = ops.reshape(x[:, :rows], (-1, h))  # [batch * rows, hidden]
            query = ops.matmul(flat, kernel[:, :h]) + bias[:h]
            query = ops.transpose(ops.reshape(query, (batch, rows, heads, size)), (0, 2, 1, 3))

        context = self.attend(query, key, value, attention_bias, training)
        context = ops.reshape(ops.transpose(context, (0, 2, 1, 3)), (-1, heads * size))

        attention = self.hidden_dropout(self.attention_output(context), training=training)
        flat = self.attention_layer_norm(flat + attention)

        hidden = self.activation(self.intermediate(flat))  # [batch * rows, intermediate]
        out = self.hidden_dropout(self.output_dense(hidden), training=training)
        flat = self.output_layer_norm(flat + out)
        return ops.reshape(flat, (batch, rows, h))

    def get_config(self):
        config = super().get_config()
        config.update(hidden_size=self.hidden_size,
                      num_attention_heads=self.num_attention_heads,
                      intermediate_size=self.intermediate_size, hidden_act=self.hidden_act,
                      hidden_dropout_prob=self.hidden_dropout_prob,
                      attention_probs_dropout_prob=self.attention_probs_dropout_prob,
                      initializer_range=self.initializer_range,
                      layer_norm_eps=self.layer_norm_eps,
                      attention_implementation=self.attention_implementation)
        return config


def check_attention_implementation(name):
    if name not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(f"attention_implementation: expected one of "
                         f"{', '.join(ATTENTION_IMPLEMENTATIONS)}, got {name!r}")
    return name
