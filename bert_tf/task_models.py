"""Task models: a BertEncoder with a fine-tuning head, each a Keras model taking
{"token_ids", "segment_ids", "padding_mask"} int32 [batch, seq] (multiple choice:
[batch, choices, seq]) and returning float32 outputs by name:

    BertClassifier        pooled [CLS] -> {"logits": [B, K]}, or {"score": [B]} (K = 1)
    BertMultipleChoice    each choice's pooled [CLS] -> {"logits": [B, C]}
    BertTokenClassifier   every position -> {"logits": [B, S, K]} (NER tags)
    BertSpanLabeler       every position -> {"start_logits", "end_logits": [B, S]} (SQuAD)

Each head computes in the encoder's dtype policy and casts its output to float32, so
losses and softmax stay exact under mixed precision. `get_config` stores the encoder's
hyperparameters and the head's arguments: `model.save("m.keras")` and
`keras.saving.load_model("m.keras")` round-trip, as do `save_weights`/`load_weights`.

    import bert_tf
    encoder = bert_tf.load_encoder("uncased_L-12_H-768_A-12")
    model = bert_tf.BertClassifier(encoder, num_classes=2)
    model.compile(optimizer="adamw", loss={"logits": keras.losses.SparseCategoricalCrossentropy(
        from_logits=True)})

`TASK_MODELS` names the model of each fine-tuning run directory (bert_tf/run_dir.py).
"""

import keras
from keras import ops

from bert_tf.encoder import INPUT_NAMES


def encoder_policy(encoder):
    """The dtype policy the encoder computes in. Read from one of its layers: a Keras
    functional model ignores its own dtype argument, so `encoder.dtype_policy` says
    float32 even when every layer runs mixed_bfloat16."""
    return encoder.pooler.dtype_policy


def loss_scaled(model, optimizer):
    """The optimizer, wrapped in a LossScaleOptimizer when the model's head computes in
    float16. Keras' compile() wraps it only when the model's own policy says
    mixed_float16, which a functional task model's never does (see encoder_policy)."""
    head = getattr(model, "encoder", None)
    if head is None or encoder_policy(head).name != "mixed_float16" or \
            isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return optimizer
    return keras.optimizers.LossScaleOptimizer(optimizer)


def _inputs(shape=(None,)):
    return {name: keras.Input(shape=shape, dtype="int32", name=name) for name in INPUT_NAMES}


def _dense(units, encoder, name, **kwargs):
    """A head's Dense: initialised like the encoder (truncated normal, initializer_range),
    computing in the encoder's policy."""
    return keras.layers.Dense(
        units, kernel_initializer=keras.initializers.TruncatedNormal(
            stddev=encoder.bert_config.initializer_range),
        dtype=encoder_policy(encoder), name=name, **kwargs)


def _encoder_config(config):
    """A get_config dict with its serialized "encoder" rebuilt (for from_config)."""
    config = dict(config)
    config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
    return config


def _dropout_rate(encoder, dropout):
    """The head's dropout: the encoder's hidden_dropout_prob unless given (google's)."""
    return encoder.bert_config.hidden_dropout_prob if dropout is None else dropout


class _TaskModel(keras.Model):
    """A functional model over an encoder; subclasses name their head's arguments in
    `ARGS` (stored by get_config, passed back by from_config)."""

    ARGS = ()

    def _finish(self, encoder, args):
        self.encoder = encoder
        for name, value in args.items():
            setattr(self, name, value)

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable,
                  "encoder": keras.saving.serialize_keras_object(self.encoder)}
        config.update({name: getattr(self, name) for name in self.ARGS})
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**_encoder_config(config))


@keras.saving.register_keras_serializable(package="bert_tf")
class BertClassifier(_TaskModel):
    """Sentence (pair) classification or regression: dropout + dense on the pooled [CLS].

    Args:
        encoder: a BertEncoder.
        num_classes: K >= 2 for classification ({"logits": float32 [B, K]}); 1 for
            regression ({"score": float32 [B]}).
        dropout: the head's dropout rate; None = the encoder's hidden_dropout_prob.
        output_bias: the dense layer's initial bias. Regression runs pass the mean
            training score, so the first steps need not learn an offset (STS-B's ~2.5).

    Example:
        >>> import bert_tf
        >>> encoder = bert_tf.BertEncoder(vocab_size=100, hidden_size=32,
        ...     num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
        >>> model = bert_tf.BertClassifier(encoder, num_classes=3)
        >>> import numpy as np
        >>> ids = np.array([[2, 5, 6, 3]], "int32")
        >>> model({"token_ids": ids, "segment_ids": np.zeros_like(ids),
        ...        "padding_mask": np.ones_like(ids)})["logits"].shape
        TensorShape([1, 3])
    """

    ARGS = ("num_classes", "dropout", "output_bias")

    def __init__(self, encoder, num_classes, dropout=None, output_bias=0.0,
                 name="classifier", **kwargs):
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        inputs = _inputs()
        pooled = encoder(inputs)["pooled_output"]                              # [B, H]
        x = keras.layers.Dropout(_dropout_rate(encoder, dropout), name="head_dropout")(pooled)
        x = _dense(num_classes, encoder, "classifier",
                   bias_initializer=keras.initializers.Constant(output_bias))(x)  # [B, K]
        x = keras.layers.Activation("linear", dtype="float32", name="float32_output")(x)
        if num_classes == 1:
            outputs = {"score": keras.layers.Reshape((), name="score")(x)}    # [B]
        else:
            outputs = {"logits": keras.layers.Identity(name="logits")(x)}     # [B, K]
        super().__init__(inputs, outputs, name=name, **kwargs)
        self._finish(encoder, dict(num_classes=num_classes, dropout=dropout,
                                   output_bias=float(output_bias)))


@keras.saving.register_keras_serializable(package="bert_tf")
class FlattenChoices(keras.layers.Layer):
    """[batch, choices, seq] -> [batch * choices, seq] (seq may be unknown)."""

    def call(self, x):
        return ops.reshape(x, (-1, ops.shape(x)[-1]))

    def compute_output_shape(self, input_shape):
        return (None, input_shape[-1])


@keras.saving.register_keras_serializable(package="bert_tf")
class BertMultipleChoice(_TaskModel):
    """Multiple choice (SWAG): the shared encoder reads each choice as one sequence;
    dropout + dense(1) on each pooled [CLS] scores it.

    Args:
        encoder: a BertEncoder.
        num_choices: C; inputs are int32 [B, C, S], the output {"logits": float32 [B, C]}
            (softmax over C gives the choice probabilities).
        dropout: the head's dropout rate; None = the encoder's hidden_dropout_prob.

    Example:
        >>> import bert_tf
        >>> encoder = bert_tf.BertEncoder(vocab_size=100, hidden_size=32,
        ...     num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
        >>> model = bert_tf.BertMultipleChoice(encoder, num_choices=2)
        >>> import numpy as np
        >>> ids = np.array([[[2, 5, 3], [2, 6, 3]]], "int32")    # [batch, choices, seq]
        >>> model({"token_ids": ids, "segment_ids": np.zeros_like(ids),
        ...        "padding_mask": np.ones_like(ids)})["logits"].shape
        TensorShape([1, 2])
    """

    ARGS = ("num_choices", "dropout")

    def __init__(self, encoder, num_choices=4, dropout=None, name="multiple_choice",
                 **kwargs):
        flatten = FlattenChoices(name="flatten_choices")
        inputs = _inputs((num_choices, None))
        flat = {name: flatten(x) for name, x in inputs.items()}               # [B*C, S]
        pooled = encoder(flat)["pooled_output"]                                # [B*C, H]
        x = keras.layers.Dropout(_dropout_rate(encoder, dropout), name="head_dropout")(pooled)
        x = _dense(1, encoder, "classifier")(x)                                # [B*C, 1]
        x = keras.layers.Activation("linear", dtype="float32", name="float32_output")(x)
        logits = keras.layers.Identity(name="logits")(ops.reshape(x, (-1, num_choices)))
        super().__init__(inputs, {"logits": logits}, name=name, **kwargs)     # [B, C]
        self._finish(encoder, dict(num_choices=num_choices, dropout=dropout))


@keras.saving.register_keras_serializable(package="bert_tf")
class FrozenLastLayers(keras.layers.Layer):
    """A frozen encoder's last `num_layers` layer outputs, concatenated: [B, S, n * H]
    (the paper's feature-based NER recipe).

    The encoder always runs in inference mode. (A `training=False` written into a
    functional graph is overridden by the outer call's value; this layer's call takes no
    `training` argument, so the outer value never reaches the encoder.)
    """

    def __init__(self, encoder, num_layers=4, **kwargs):
        super().__init__(**kwargs)
        if encoder.bert_config.num_hidden_layers < num_layers:
            raise ValueError(f"--feature_based needs >= {num_layers} layers, the encoder "
                             f"has {encoder.bert_config.num_hidden_layers}")
        self.encoder = encoder
        self.num_layers = num_layers
        self.encoder.trainable = False

    def call(self, inputs):
        layers = self.encoder(inputs, training=False)["encoder_outputs"]
        return ops.concatenate(layers[-self.num_layers:], axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(encoder=keras.saving.serialize_keras_object(self.encoder),
                      num_layers=self.num_layers)
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**_encoder_config(config))


@keras.saving.register_keras_serializable(package="bert_tf")
class BertTokenClassifier(_TaskModel):
    """Token classification (NER): dropout + dense(num_labels) on every position.

    Args:
        encoder: a BertEncoder (its pooler is frozen: it feeds nothing here).
        num_labels: K; the output is {"logits": float32 [B, S, K]}.
        feature_based: the encoder is frozen and runs in inference mode; the head reads
            its last four layers' outputs concatenated ([B, S, 4H]).
        dropout: the head's dropout rate; None = the encoder's hidden_dropout_prob.

    Example:
        >>> import bert_tf
        >>> encoder = bert_tf.BertEncoder(vocab_size=100, hidden_size=32,
        ...     num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
        >>> model = bert_tf.BertTokenClassifier(encoder, num_labels=5)
        >>> import numpy as np
        >>> ids = np.array([[2, 5, 3]], "int32")
        >>> model({"token_ids": ids, "segment_ids": np.zeros_like(ids),
        ...        "padding_mask": np.ones_like(ids)})["logits"].shape
        TensorShape([1, 3, 5])
    """

    ARGS = ("num_labels", "feature_based", "dropout")

    def __init__(self, encoder, num_labels, feature_based=False, dropout=None,
                 name="ner", **kwargs):
        encoder.pooler.trainable = False
        inputs = _inputs()
        if feature_based:
            features = FrozenLastLayers(encoder, 4, name="last_four_layers")(inputs)
        else:
            features = encoder(inputs)["sequence_output"]                     # [B, S, H]
        features = keras.layers.Dropout(_dropout_rate(encoder, dropout),
                                        name="head_dropout")(features)
        logits = _dense(num_labels, encoder, "classifier")(features)          # [B, S, K]
        logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
        super().__init__(inputs, {"logits": logits}, name=name, **kwargs)
        self._finish(encoder, dict(num_labels=num_labels, feature_based=bool(feature_based),
                                   dropout=dropout))


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


@keras.saving.register_keras_serializable(package="bert_tf")
class BertSpanLabeler(_TaskModel):
    """Extractive question answering (SQuAD): start and end logits at every position.

    Args:
        encoder: a BertEncoder (its pooler is frozen: it feeds nothing here).

    Outputs {"start_logits", "end_logits"}: float32 [B, S].

    Example:
        >>> import bert_tf
        >>> encoder = bert_tf.BertEncoder(vocab_size=100, hidden_size=32,
        ...     num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
        >>> model = bert_tf.BertSpanLabeler(encoder)
        >>> import numpy as np
        >>> ids = np.array([[2, 5, 3]], "int32")
        >>> out = model({"token_ids": ids, "segment_ids": np.zeros_like(ids),
        ...              "padding_mask": np.ones_like(ids)})
        >>> out["start_logits"].shape, out["end_logits"].shape
        (TensorShape([1, 3]), TensorShape([1, 3]))
    """

    def __init__(self, encoder, name="squad", **kwargs):
        encoder.pooler.trainable = False
        inputs = _inputs()
        sequence_output = encoder(inputs)["sequence_output"]                  # [B, S, H]
        start, end = SpanLogits(encoder.bert_config.initializer_range,
                                dtype=encoder_policy(encoder),
                                name="squad_head")(sequence_output)
        outputs = {"start_logits": keras.layers.Identity(name="start_logits")(start),
                   "end_logits": keras.layers.Identity(name="end_logits")(end)}
        super().__init__(inputs, outputs, name=name, **kwargs)
        self._finish(encoder, {})


# The model of each fine-tuning task, built from the encoder and the task's saved
# settings (TASK_config.json of a run directory; bert_tf/run_dir.py).
TASK_MODELS = {
    "glue": lambda encoder, config: BertClassifier(
        encoder, config["num_classes"], config.get("dropout")),
    "swag": lambda encoder, config: BertMultipleChoice(encoder, config["num_choices"]),
    "ner": lambda encoder, config: BertTokenClassifier(
        encoder, len(config["labels"]), config.get("feature_based", False)),
    "squad": lambda encoder, config: BertSpanLabeler(encoder),
}


def build_task_model(task, encoder, config):
    """The Keras model of fine-tuning task `task` ("glue", "swag", "ner", "squad") with
    the settings `config` (a run's TASK_config dict)."""
    if task not in TASK_MODELS:
        raise ValueError(f"unknown task {task!r}; expected one of {sorted(TASK_MODELS)}")
    return TASK_MODELS[task](encoder, config)


__all__ = ["BertClassifier", "BertMultipleChoice", "BertTokenClassifier", "BertSpanLabeler",
           "build_task_model", "loss_scaled", "encoder_policy"]
