"""BertPretrainer: encoder + masked-LM head + next-sentence head (optional).

    inputs  {"token_ids", "segment_ids", "padding_mask"} int32 [batch, seq],
            "masked_lm_positions" int32 [batch, predictions]
    outputs {"mlm_logits": float32 [batch, predictions, vocab],
             "nsp_logits": float32 [batch, 2]}   (not with next_sentence=False)

run_pretraining's tf.distribute loop (training/trainer.py) calls the model and
computes the loss itself. Keras' `fit()` (any backend, see training/fit.py) gets the
same loss from `compute_loss`, with the labels as `y`: {"masked_lm_ids",
"masked_lm_weights", "next_sentence_labels"}.

The model sits beside the encoder and the task models, below the checkpoint formats that
build it, with its loss (bert_tf/models/pretraining_losses.py, which both pretraining
loops use too), so reading or converting a checkpoint imports nothing of the training
package.
"""

import keras

from bert_tf.base.config import BertConfig
from bert_tf.models.encoder import BertEncoder
from bert_tf.models.heads import MaskedLMHead, NextSentenceHead
from bert_tf.base.input_names import INPUT_NAMES
from bert_tf.models.pretraining_losses import local_sums, metrics_from_sums


@keras.saving.register_keras_serializable(package="bert_tf")
class BertPretrainer(keras.Model):
    """A BertEncoder with the masked-LM head (tied to the word embeddings) and the
    next-sentence head.

    Args:
        encoder: a BertEncoder (or its serialized config).
        next_sentence: False for no next-sentence head (masked LM only, RoBERTa's
            objective: run_pretraining --next_sentence=none); `nsp_head` is then None.

    Example:
        >>> import numpy as np
        >>> from bert_tf import BertConfig, BertPretrainer
        >>> model = BertPretrainer.from_config_object(BertConfig.preset("tiny",
        ...                                                             vocab_size=100))
        >>> ids = np.array([[2, 4, 9, 3]], "int32")
        >>> out = model({"token_ids": ids, "segment_ids": np.zeros_like(ids),
        ...              "padding_mask": np.ones_like(ids),
        ...              "masked_lm_positions": np.array([[1]], "int32")})
        >>> out["mlm_logits"].shape, out["nsp_logits"].shape
        (TensorShape([1, 1, 100]), TensorShape([1, 2]))
    """

    def __init__(self, encoder, next_sentence=True, **kwargs):
        if isinstance(encoder, dict):  # from get_config
            encoder = keras.saving.deserialize_keras_object(encoder)
        config = encoder.bert_config
        mlm_head = MaskedLMHead(encoder.embeddings, config.hidden_act,
                                config.initializer_range, config.layer_norm_eps,
                                dtype=encoder.dtype_policy, name="mlm_head")
        nsp_head = NextSentenceHead(config.initializer_range, dtype=encoder.dtype_policy,
                                    name="nsp_head") if next_sentence else None
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
                  for name in INPUT_NAMES}
        inputs["masked_lm_positions"] = keras.Input(shape=(None,), dtype="int32",
                                                    name="masked_lm_positions")
        encoded = encoder({name: inputs[name] for name in INPUT_NAMES})
        outputs = {
            "mlm_logits": mlm_head(encoded["sequence_output"], inputs["masked_lm_positions"]),
        }
        if nsp_head is not None:
            outputs["nsp_logits"] = nsp_head(encoded["pooled_output"])
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.encoder = encoder
        self.mlm_head = mlm_head
        self.nsp_head = nsp_head

    @property
    def trained_variables(self):
        """The trainable variables the pretraining loss reaches: all of them, but the
        pooler's without a next-sentence head (it feeds nothing else, and a variable
        without a gradient is left out of the update rather than decayed)."""
        if self.nsp_head is not None:
            return self.trainable_variables
        pooler = {id(v) for v in self.encoder.pooler.trainable_variables}
        return [v for v in self.trainable_variables if id(v) not in pooler]

    @classmethod
    def from_config_object(cls, config: BertConfig, dtype=None, **kwargs):
        return cls(BertEncoder.from_config_object(config, dtype=dtype), **kwargs)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """google's pretraining loss (pretraining_losses.py) for fit()/evaluate(), unless compile()
        was given a loss of its own. `y`: masked_lm_ids, masked_lm_weights [batch,
        predictions] and next_sentence_labels [batch]."""
        if getattr(self, "_compile_loss", None) is not None:
            return super().compute_loss(x, y, y_pred, sample_weight, training)
        return metrics_from_sums(local_sums(y_pred, y))["loss"]

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable,
                  "encoder": keras.saving.serialize_keras_object(self.encoder)}
        if self.nsp_head is None:
            config["next_sentence"] = False
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)
