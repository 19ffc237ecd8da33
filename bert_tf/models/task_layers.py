"""The layers of the task heads (bert_tf/models/task_models.py): multiple choice's flattening,
the pooling of a long text's windows (and `pool_windows`, which serving shares),
the feature-based recipe's frozen layers and their choices (the paper's section 5.3),
SQuAD's span logits. Registered with Keras by class name, so `.keras` files name them
the same wherever they are defined.
"""

import keras
from keras import ops

from bert_tf.models.feature_choices import DEFAULT_FEATURE_LAYERS, feature_layer_indexes
from bert_tf.text.windows import WINDOW_POOLINGS


def encoder_config(config):
    """A get_config dict with its serialized "encoder" rebuilt (for from_config)."""
    config = dict(config)
    config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
    return config


@keras.saving.register_keras_serializable(package="bert_tf")
class FlattenChoices(keras.layers.Layer):
    """[batch, choices, seq] -> [batch * choices, seq] (seq may be unknown)."""

    def call(self, x):
        return ops.reshape(x, (-1, ops.shape(x)[-1]))

    def compute_output_shape(self, input_shape):
        return (None, input_shape[-1])




def pool_windows(logits, window_mask, pooling="mean"):
    """logits float [batch, windows, K], window_mask [batch, windows] (1: a window of the
    text, 0: padding) -> [batch, K]: each text's mean (or max) over its windows (0 for a
    row without any). The one definition: WindowPooling and the serving signatures call
    it."""
    mask = ops.cast(ops.greater(window_mask, 0), logits.dtype)[:, :, None]
    if pooling == "mean":
        return ops.sum(logits * mask, axis=1) / ops.maximum(ops.sum(mask, axis=1), 1.0)
    if pooling == "max":
        lowest = ops.full_like(logits, float("-inf"))
        best = ops.max(ops.where(mask > 0, logits, lowest), axis=1)
        return ops.where(ops.sum(mask, axis=1) > 0, best, ops.zeros_like(best))
    raise ValueError(f"window pooling must be one of {', '.join(WINDOW_POOLINGS)}; got "
                     f"{pooling!r}")


def _window_rows(window_mask):
    """int [real windows]: the rows of [batch * windows] that are a text's windows."""
    return ops.where(ops.reshape(ops.greater(window_mask, 0), (-1,)))[0]


@keras.saving.register_keras_serializable(package="bert_tf")
class RealWindows(keras.layers.Layer):
    """A batch of texts in windows, x [batch, windows, seq] and window_mask [batch,
    windows] -> x's real windows [real windows, seq], in order: the padding windows of a
    batch whose texts have unequal numbers of windows are not computed."""

    def call(self, x, window_mask):
        flat = ops.reshape(x, (-1, ops.shape(x)[-1]))
        return ops.take(flat, _window_rows(window_mask), axis=0)

    def compute_output_shape(self, x_shape, window_mask_shape):
        return (None, x_shape[-1])


@keras.saving.register_keras_serializable(package="bert_tf")
class WindowPooling(keras.layers.Layer):
    """A text read in windows: its real windows' logits [real windows, K] (RealWindows'
    rows) and window_mask [batch, windows] -> the text's [batch, K]
    (`pool_windows`)."""

    def __init__(self, pooling="mean", **kwargs):
        super().__init__(**kwargs)
        if pooling not in WINDOW_POOLINGS:
            raise ValueError(f"window pooling must be one of {', '.join(WINDOW_POOLINGS)}; "
                             f"got {pooling!r}")
        self.pooling = pooling

    def call(self, logits, window_mask):
        shape = ops.shape(window_mask)
        k = ops.shape(logits)[-1]
        rows = ops.expand_dims(_window_rows(window_mask), -1)
        every = ops.scatter(rows, logits, (shape[0] * shape[1], k))     # padding: 0
        return pool_windows(ops.reshape(every, (shape[0], shape[1], k)), window_mask,
                            self.pooling)

    def compute_output_shape(self, logits_shape, window_mask_shape):
        return (window_mask_shape[0], logits_shape[-1])

    def get_config(self):
        return dict(super().get_config(), pooling=self.pooling)


@keras.saving.register_keras_serializable(package="bert_tf")
class FrozenLastLayers(keras.layers.Layer):
    """A frozen encoder's outputs that `feature_layers` (FEATURE_LAYERS) chooses: one
    layer [B, S, H]; the last four concatenated [B, S, 4H]; the layers of a weighted sum
    stacked [B, S, n, H] (ScalarMix sums them).

    The encoder always runs in inference mode. (A `training=False` written into a
    functional graph is overridden by the outer call's value; this layer's call takes no
    `training` argument, so the outer value never reaches the encoder.) The class keeps
    the name it had when it read only the last four layers: Keras files address a layer's
    weights by its class name, and this one holds the encoder's.
    """

    def __init__(self, encoder, feature_layers=DEFAULT_FEATURE_LAYERS, **kwargs):
        super().__init__(**kwargs)
        self.indexes, self.mixed = feature_layer_indexes(
            feature_layers, encoder.bert_config.num_hidden_layers)
        self.encoder = encoder
        self.feature_layers = feature_layers
        self.encoder.trainable = False

    def call(self, inputs):
        out = self.encoder(inputs, training=False)
        hidden = [out["embedding_output"]] + list(out["encoder_outputs"])  # L + 1 x [B, S, H]
        chosen = [hidden[i] for i in self.indexes]
        if self.mixed:
            return ops.stack(chosen, axis=-2)                               # [B, S, n, H]
        return chosen[0] if len(chosen) == 1 else ops.concatenate(chosen, axis=-1)

    @property
    def row_shape(self):
        """One row's output shape: (None, D), or (None, n, H) for a weighted sum."""
        n, hidden = len(self.indexes), self.encoder.bert_config.hidden_size
        return (None, n, hidden) if self.mixed else (None, n * hidden)

    def get_config(self):
        config = super().get_config()
        config.update(encoder=keras.saving.serialize_keras_object(self.encoder),
                      feature_layers=self.feature_layers)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**encoder_config(config))


@keras.saving.register_keras_serializable(package="bert_tf")
class SpanLogits(keras.layers.Layer):
    """Dense(2) on every position -> start and end logits [batch, seq], float32 (google's
    cls/squad/output_weights: one vector each for start and end)."""

    def __init__(self, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.initializer_range = initializer_range
        self.dense = keras.layers.Dense(
            2, kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
            dtype=self.dtype_policy, name="logits")

    def build(self, input_shape):
        self.dense.build(input_shape)

    def call(self, sequence_output):
        logits = ops.cast(self.dense(sequence_output), "float32")          # [B, S, 2]
        return logits[..., 0], logits[..., 1]

    def get_config(self):
        config = super().get_config()
        config["initializer_range"] = self.initializer_range
        return config
