"""Pretraining heads: masked-LM (tied to the word embeddings) and next-sentence."""

import keras
from keras import ops

from bert_tf.models.layers import activation_fn


@keras.saving.register_keras_serializable(package="bert_tf")
class MaskedLMHead(keras.layers.Layer):
    """google's `cls/predictions`: dense(H) + activation + LayerNorm (epsilon 1e-12, as the
    encoder), then logits = h @ word_embeddings^T + output_bias.

    Only the masked positions are gathered before the transform, so the cost is
    [batch, predictions] rather than [batch, seq] times the vocabulary.
    The word table is not owned here: `embeddings` is the encoder's BertEmbeddings layer.
    """

    def __init__(self, embeddings, hidden_act="gelu", initializer_range=0.02,
                 layer_norm_eps=1e-12, **kwargs):
        super().__init__(**kwargs)
        self.embeddings = embeddings
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.transform = keras.layers.Dense(
            embeddings.hidden_size, activation=activation_fn(hidden_act),
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
            dtype=self.dtype_policy, name="transform")
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_eps, dtype=self.dtype_policy, name="layer_norm")

    def build(self, input_shape=None):
        hidden = self.embeddings.hidden_size
        self.transform.build((None, None, hidden))
        self.layer_norm.build((None, None, hidden))
        self.output_bias = self.add_weight(name="output_bias",
                                           shape=(self.embeddings.vocab_size,),
                                           initializer="zeros")
        self.built = True

    def call(self, sequence_output, masked_positions):
        # sequence_output: [batch, seq, hidden]; masked_positions: [batch, predictions]
        gathered = ops.take_along_axis(
            sequence_output, ops.cast(masked_positions, "int32")[:, :, None], axis=1)
        h = self.layer_norm(self.transform(gathered))  # [batch, predictions, hidden]
        table = ops.cast(self.embeddings.word_embeddings, h.dtype)  # [vocab, hidden]
        logits = ops.matmul(h, ops.transpose(table))  # [batch, predictions, vocab]
        # Softmax and loss in float32 under mixed precision.
        return ops.cast(logits, "float32") + self.output_bias

    def get_config(self):
        # The embeddings layer is shared, not serialized here: models that own both
        # (BertPretrainer) rebuild the tie in their own constructor.
        config = super().get_config()
        config.update(hidden_act=self.hidden_act, initializer_range=self.initializer_range,
                      layer_norm_eps=self.layer_norm_eps)
        return config


@keras.saving.register_keras_serializable(package="bert_tf")
class NextSentenceHead(keras.layers.Dense):
    """google's `cls/seq_relationship`: dense(2) on the pooled output; class 0 = B is the
    real next sentence, 1 = B is random. (google stores the kernel as [2, hidden]; the
    converters transpose it.)"""

    def __init__(self, initializer_range=0.02, **kwargs):
        kwargs.pop("units", None)
        kwargs.setdefault("kernel_initializer",
                          keras.initializers.TruncatedNormal(stddev=initializer_range))
        super().__init__(2, **kwargs)
        self.initializer_range = initializer_range

    def call(self, pooled_output):
        return ops.cast(super().call(pooled_output), "float32")  # [batch, 2]

    def get_config(self):
        config = super().get_config()
        config.pop("units", None)
        config["initializer_range"] = self.initializer_range
        return config
