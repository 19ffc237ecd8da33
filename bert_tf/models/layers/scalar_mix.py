"""ScalarMix: a learned weighted sum of stacked layers (ELMo's scalar mix)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="bert_tf")
class ScalarMix(keras.layers.Layer):
    """The "weighted sum" of the BERT paper's feature-based comparison (Table 7), as ELMo
    mixes layers (Peters et al., 2018, eq. 1): stacked layers [B, S, n, H] ->
    gamma * sum_j softmax(w)_j * h_j, [B, S, H].

    w holds one learned scalar per layer, initialised to 0 (every layer weighs 1/n at the
    start); the softmax keeps the weights positive and summing to 1. gamma is ELMo's one
    learned scale of the mixed vector, initialised to 1. The layers are not layer-normalised
    before the sum (BERT's layer outputs already are), and nothing else is learned. (The
    fine-tuning driver's AdamW decays both like any weight: w toward equal weights, gamma
    toward 0.)
    """

    def build(self, input_shape):
        self.layer_weights = self.add_weight(shape=(input_shape[-2],), initializer="zeros",
                                             name="layer_weights")
        self.gamma = self.add_weight(shape=(), initializer="ones", name="gamma")

    def call(self, stacked):
        weights = ops.cast(ops.softmax(ops.cast(self.layer_weights, "float32")),
                           stacked.dtype)                                    # [n]
        mixed = ops.sum(stacked * weights[:, None], axis=-2)                 # [B, S, H]
        return mixed * ops.cast(self.gamma, stacked.dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-2]) + (input_shape[-1],)
