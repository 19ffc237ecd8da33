"""BertEncoder: the BERT transformer encoder as a Keras 3 functional model.

    inputs  {"token_ids", "segment_ids", "padding_mask"}  int32 [batch, seq]
    outputs {"sequence_output": [batch, seq, hidden],
             "pooled_output":   [batch, hidden]         (dense + tanh on [CLS]; the
                                                         last block run at [CLS] alone),
             "embedding_output": [batch, seq, hidden],
             "encoder_outputs": list of num_hidden_layers tensors [batch, seq, hidden]}

Constructor arguments are exactly BertConfig's fields, so
`BertEncoder(**config.to_dict())` and `BertEncoder.from_config_object(config)` agree.

Fast inference on CPU: `encoder.compile(jit_compile=True)`, then `encoder.predict(...)` or
`encoder.predict_on_batch(...)`. Keras' default (`jit_compile="auto"`) leaves XLA off on
CPU-only machines; with it on, BERT-base runs faster than the plain graph (bench/encoder.py,
docs/benchmarks.md) and gives the same numbers to a few float32 ulps. XLA compiles once per
input shape, so feed batches padded to a fixed sequence length.
"""

import keras
from keras import ops

from bert_tf.base.config import BertConfig
from bert_tf.base.input_names import INPUT_NAMES, PADDING_MASK, SEGMENT_IDS, TOKEN_IDS
from bert_tf.models.layers import (MASK_LOGIT, BertEmbeddings, TransformerBlock,
                                   check_attention_implementation)


@keras.saving.register_keras_serializable(package="bert_tf")
class BertEncoder(keras.Model):
    """The BERT encoder (see the module docstring for inputs and outputs).

    Args:
        vocab_size ... layer_norm_eps: BertConfig's fields, with its defaults (BERT-base).
        dtype: a Keras dtype policy ("float32", "mixed_bfloat16", ...); None: the global.

    Example:
        >>> import numpy as np
        >>> from bert_tf import BertEncoder
        >>> encoder = BertEncoder(vocab_size=100, hidden_size=32, num_hidden_layers=2,
        ...                       num_attention_heads=4, intermediate_size=64)
        >>> ids = np.array([[2, 7, 9, 3, 0]], "int32")
        >>> out = encoder({"token_ids": ids, "segment_ids": np.zeros_like(ids),
        ...                "padding_mask": (ids > 0).astype("int32")})
        >>> out["sequence_output"].shape, out["pooled_output"].shape, len(out["encoder_outputs"])
        (TensorShape([1, 5, 32]), TensorShape([1, 32]), 2)
    """

    def __init__(self, vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                 num_attention_heads=12, intermediate_size=3072, hidden_act="gelu",
                 hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                 max_position_embeddings=512, type_vocab_size=2, initializer_range=0.02,
                 layer_norm_eps=1e-12, dtype=None, **kwargs):
        # Validates every field with one error message listing all problems.
        config = BertConfig(
            vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads, intermediate_size=intermediate_size,
            hidden_act=hidden_act, hidden_dropout_prob=hidden_dropout_prob,
            attention_probs_dropout_prob=attention_probs_dropout_prob,
            max_position_embeddings=max_position_embeddings, type_vocab_size=type_vocab_size,
            initializer_range=initializer_range, layer_norm_eps=layer_norm_eps)
        policy = keras.dtype_policies.get(dtype) if dtype is not None else \
            keras.config.dtype_policy()

        embeddings = BertEmbeddings(
            vocab_size, hidden_size, max_position_embeddings, type_vocab_size,
            initializer_range, layer_norm_eps, hidden_dropout_prob, dtype=policy,
            name="embeddings")
        blocks = [TransformerBlock(
            hidden_size, num_attention_heads, intermediate_size, hidden_act,
            hidden_dropout_prob, attention_probs_dropout_prob, initializer_range,
            layer_norm_eps, dtype=policy, name=f"layer_{i}") for i in range(num_hidden_layers)]
        pooler = keras.layers.Dense(
            hidden_size, activation="tanh",
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
            dtype=policy, name="pooler")

        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
                  for name in INPUT_NAMES}
        x = embeddings(inputs[TOKEN_IDS], inputs[SEGMENT_IDS])
        embedding_output = x
        # [batch, seq] 1/0 -> [batch, 1, 1, seq] additive bias, broadcast over heads and
        # query positions: padded keys get MASK_LOGIT.
        mask = ops.cast(inputs[PADDING_MASK], "float32")
        attention_bias = ((1.0 - mask) * MASK_LOGIT)[:, None, None, :]
        encoder_outputs = []
        for block in blocks[:-1]:
            x = block(x, attention_bias)
            encoder_outputs.append(x)
        # The pooled output reads the last block at [CLS] only: that position's query,
        # attention and feed-forward (query_rows=1). A model that uses only the pooled
        # output (classification, multiple choice) then never runs the last block's other
        # positions: TensorFlow prunes the full block's ops from its graph (a sixth of
        # MiniLM's work for a short text). The numbers are those of the full block's
        # [CLS] row, to float32 rounding.
        cls = blocks[-1](x, attention_bias, query_rows=1)   # [batch, 1, hidden]
        x = blocks[-1](x, attention_bias)
        encoder_outputs.append(x)
        pooled = pooler(cls[:, 0, :])  # [batch, hidden], from the [CLS] position
        outputs = {"sequence_output": x, "pooled_output": pooled,
                   "embedding_output": embedding_output, "encoder_outputs": encoder_outputs}
        super().__init__(inputs=inputs, outputs=outputs, dtype=policy, **kwargs)

        self.bert_config = config
        self.embeddings = embeddings
        self.blocks = blocks
        self.pooler = pooler

    @classmethod
    def from_config_object(cls, config, **kwargs):
        """Builds an encoder from a BertConfig (kwargs: dtype, name)."""
        return cls(**config.to_dict(), **kwargs)

    def set_attention_implementation(self, name):
        """How every block computes its attention: "plain" (the blocks' own Keras ops, the
        default) or "fused" (one fused kernel where the backend has one: cuDNN's flash
        attention on JAX with a GPU, SDPA on PyTorch; bert_tf/models/layers/fused_attention.py).
        A setting of where the model runs, like jit_compile, so not saved with the model;
        set it before the first compile() or call that traces the model."""
        check_attention_implementation(name)
        for block in self.blocks:
            block.attention_implementation = name

    @property
    def word_embeddings(self):
        """[vocab_size, hidden] table, shared with the masked-LM head."""
        return self.embeddings.word_embeddings

    def get_config(self):
        # Functional-model internals are rebuilt by __init__; only the hyperparameters
        # (and Keras' own name/trainable/dtype) are stored.
        config = {"name": self.name, "trainable": self.trainable,
                  "dtype": keras.dtype_policies.serialize(self.dtype_policy)}
        config.update(self.bert_config.to_dict())
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(**config)
