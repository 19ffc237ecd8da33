"""One fused attention kernel in place of TransformerBlock's own ops, per Keras backend
(`TransformerBlock(attention_implementation="fused")`, or
`BertEncoder.set_attention_implementation("fused")`).

A fused kernel computes softmax(q k^T * scale + bias) v without writing the [batch,
heads, rows, seq] scores, probabilities and dropout mask to memory, which is most of a
block's memory traffic at long lengths on a GPU (bench/gpu/README.md). What runs:

  jax    no dropout in this call (inference, or a rate of 0): `jax.nn.dot_product_attention`,
         cuDNN's flash attention on a GPU (bfloat16/float16, even lengths, head size a
         multiple of 8 up to 128), else XLA's own.
         With dropout, on a GPU, bfloat16/float16: cuDNN's kernel with its own dropout,
         through JAX's cuDNN module (jax._src.cudnn; the public call takes no dropout). XLA
         keeps one Philox offset per compiled kernel that advances on every execution, so
         every step draws new masks; `seed` (one per block) keeps two blocks' masks apart. Each
         device keeps its own offset from 0, so under data parallelism every device
         draws the same masks (over different examples).
         XLA aborts when it records that kernel into a command buffer (jax 0.11.2), so the
         process needs XLA_FLAGS=--xla_gpu_enable_command_buffer= (said in one line when
         it is missing).
         With dropout anywhere else (a CPU): None, the block's own ops.
  torch  `torch.nn.functional.scaled_dot_product_attention`, its dropout included.
  tensorflow  None: TensorFlow has no fused attention op; the block's own ops run.

The numbers equal the block's own ops to rounding (tests/models/test_backends.py); with dropout,
the masks are the kernel's own random draws, at the block's rate.
"""

import os

import keras

COMMAND_BUFFER_FLAG = "--xla_gpu_enable_command_buffer="


def attend(query, key, value, attention_bias, scale, dropout_rate, seed):
    """query: [batch, heads, rows, size]; key, value: [batch, heads, seq, size];
    attention_bias: [batch, 1, 1, seq]; dropout_rate: the rate in force for this call (0
    when not training). Returns the context, [batch, heads, rows, size], or None where no
    fused kernel applies (then the caller runs its own ops)."""
    backend = keras.backend.backend()
    if backend == "jax":
        return _jax_attend(query, key, value, attention_bias, scale, dropout_rate, seed)
    if backend == "torch":
        import torch
        return torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_bias.to(query.dtype),
            dropout_p=dropout_rate, scale=scale)
    return None


def _jax_attend(query, key, value, attention_bias, scale, dropout_rate, seed):
    import jax
    import jax.numpy as jnp
    rows, seq, size = query.shape[2], key.shape[2], query.shape[3]
    if not all(isinstance(n, int) for n in (rows, seq)):
        return None  # Keras' symbolic pass: lengths unknown
    # What cuDNN's kernel takes (with a bias: even lengths; the classifier's [CLS]-only
    # last block has one query row).
    cudnn_case = (jax.default_backend() == "gpu" and query.dtype in (jnp.bfloat16, jnp.float16)
                  and rows % 2 == 0 and seq % 2 == 0 and size % 8 == 0 and size <= 128)
    if dropout_rate > 0 and not cudnn_case:
        return None  # cuDNN's kernel is the only one with dropout
    # JAX's kernels take [batch, rows, heads, size]; the bias as [batch, 1, rows, seq].
    q, k, v = (jnp.swapaxes(t, 1, 2) for t in (query, key, value))
    bias = jnp.broadcast_to(attention_bias.astype(q.dtype), (q.shape[0], 1, rows, seq))
    if dropout_rate > 0:
        if COMMAND_BUFFER_FLAG not in os.environ.get("XLA_FLAGS", ""):
            raise RuntimeError(
                "fused attention with dropout on a GPU needs XLA_FLAGS="
                f"{COMMAND_BUFFER_FLAG} set before JAX starts (XLA aborts when it records "
                "cuDNN's attention with dropout into a command buffer)")
        from jax._src.cudnn import fused_attention_stablehlo as cudnn
        out = cudnn.dot_product_attention(q, k, v, bias=bias, scale=scale, seed=seed,
                                          dropout_rate=dropout_rate)
    else:
        out = jax.nn.dot_product_attention(q, k, v, bias=bias, scale=scale,
                                           implementation="cudnn" if cudnn_case else "xla")
    return jnp.swapaxes(out, 1, 2)
