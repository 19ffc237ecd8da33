"""Task models: a BertEncoder with a fine-tuning head, each a Keras model taking
{"token_ids", "segment_ids", "padding_mask"} int32 [batch, seq] (multiple choice, and a
classifier reading long texts in windows: [batch, choices or windows, seq]) and returning
float32 outputs by name:

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

Each task model declares its run directory (bert_tf/models/run_dir.py): its name (`TASK`), the
settings TASK_config.json keeps (`settings`) and how it is rebuilt from them
(`from_settings`); `@task_model` registers it in `TASK_MODELS` by that name.

Why one file: the four models are one pattern (an encoder, a head from the shared
helpers here, the run-directory declarations of `_TaskModel`), registered in one table;
each is read beside the others it mirrors, and the classifier's window settings
(`window_settings`) sit beside the `settings` that record them.
"""

import keras
from keras import ops

from bert_tf.models.encoder import INPUT_NAMES
from bert_tf.models.layers import ScalarMix
from bert_tf.models.feature_choices import (DEFAULT_FEATURE_LAYERS, DEFAULT_LSTM_UNITS,
                                            FEATURE_HEADS)
from bert_tf.models.task_layers import (FlattenChoices, FrozenLastLayers, RealWindows,
                                        SpanLogits, WindowPooling, encoder_config)


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


def _dropout_rate(encoder, dropout):
    """The head's dropout: the encoder's hidden_dropout_prob unless given (google's)."""
    return encoder.bert_config.hidden_dropout_prob if dropout is None else dropout


# Run-directory name ("glue", ...) -> the task model class that such a run trains, filled
# by `task_model` as each class is defined: bert_tf/models/run_dir.py finds a run's model here.
TASK_MODELS = {}


def task_model(cls):
    """Class decorator: registers a task model under its run-directory name `cls.TASK`
    (TASK_config.json's stem). The class declares the rest of its run directory:
    `settings(...)` (the TASK_config dict, a classmethod), `run_settings(...)` (that of a
    trained instance) and `from_settings(encoder, settings)` (the model it rebuilds)."""
    TASK_MODELS[cls.TASK] = cls
    return cls


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
        return cls(**encoder_config(config))

    # -- the run directory (bert_tf/models/run_dir.py) --------------------------------------

    TASK = None         # TASK_config.json's stem

    @classmethod
    def from_settings(cls, encoder, settings):
        """The model of a run whose TASK_config dict is `settings`."""
        raise NotImplementedError

    def run_settings(self, max_seq_length, do_lower_case=True, labels=None, **settings):
        """The TASK_config dict of this trained model (see run_dir.task_config)."""
        raise NotImplementedError


def _classifier_outputs(x, num_classes):
    """The head's float32 [B, K] -> {"logits": [B, K]}, or {"score": [B]} (K = 1)."""
    if num_classes == 1:
        return {"score": keras.layers.Reshape((), name="score")(x)}          # [B]
    return {"logits": keras.layers.Identity(name="logits")(x)}               # [B, K]


def _bias_value(output_bias, num_classes):
    """output_bias as get_config keeps it: a float, or a list of num_classes floats."""
    if not hasattr(output_bias, "__len__"):
        return float(output_bias)
    values = [float(v) for v in output_bias]
    if len(values) != num_classes:
        raise ValueError(f"output_bias: expected one number or {num_classes} (one per "
                         f"class), got {len(values)}")
    return values


@task_model
@keras.saving.register_keras_serializable(package="bert_tf")
class BertClassifier(_TaskModel):
    """Sentence (pair) classification or regression: dropout + dense on the pooled [CLS].

    Args:
        encoder: a BertEncoder.
        num_classes: K >= 2 for classification ({"logits": float32 [B, K]}); 1 for
            regression ({"score": float32 [B]}).
        dropout: the head's dropout rate; None = the encoder's hidden_dropout_prob.
        output_bias: the dense layer's initial bias: one number for every output, or a
            list of K (one per class). Regression runs pass the mean training score, so
            the first steps need not learn an offset (STS-B's ~2.5); multi-label runs
            pass each label's log-odds of its training frequency.
        window_pooling: None (inputs [B, S], one sequence per text), or "mean" / "max":
            inputs [B, W, S], each text's windows (BertPreprocessor.windowed; padding
            windows have padding_mask 0 throughout), every window through the encoder
            and head, and the text's logits (score) the mean / max of its windows'
            (task_layers.pool_windows). `window_model()` is the model of one window.

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
        >>> windowed = bert_tf.BertClassifier(encoder, num_classes=3, window_pooling="mean")
        >>> windows = ids[:, None, :].repeat(2, axis=1)             # [batch, windows, seq]
        >>> windowed({"token_ids": windows, "segment_ids": np.zeros_like(windows),
        ...           "padding_mask": np.ones_like(windows)})["logits"].shape
        TensorShape([1, 3])
    """

    ARGS = ("num_classes", "dropout", "output_bias", "window_pooling")

    def __init__(self, encoder, num_classes, dropout=None, output_bias=0.0,
                 window_pooling=None, name="classifier", **kwargs):
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        output_bias = _bias_value(output_bias, num_classes)
        inputs = _inputs((None, None) if window_pooling else (None,))
        flat = inputs
        if window_pooling:
            # A window is the text's when its [CLS] is real; only those are computed.
            window_mask = inputs["padding_mask"][:, :, 0]                     # [B, W]
            real = RealWindows(name="real_windows")
            flat = {name: real(x, window_mask) for name, x in inputs.items()}  # [R, S]
        pooled = encoder(flat)["pooled_output"]                                # [B, H]
        x = keras.layers.Dropout(_dropout_rate(encoder, dropout), name="head_dropout")(pooled)
        x = _dense(num_classes, encoder, "classifier",
                   bias_initializer=keras.initializers.Constant(output_bias))(x)  # [B, K]
        x = keras.layers.Activation("linear", dtype="float32", name="float32_output")(x)
        if window_pooling:
            x = WindowPooling(window_pooling, name="window_pooling")(x, window_mask)  # [B, K]
        super().__init__(inputs, _classifier_outputs(x, num_classes), name=name, **kwargs)
        self._finish(encoder, dict(num_classes=num_classes, dropout=dropout,
                                   output_bias=output_bias,
                                   window_pooling=window_pooling))

    def window_model(self):
        """The model of one window (inputs [B, S] -> that window's logits or score),
        sharing this model's layers: a windowed model's serving runs its windows through
        it and pools them with task_layers.pool_windows. The model itself when it reads
        no windows."""
        if not self.window_pooling:
            return self
        inputs = _inputs()
        x = self.encoder(inputs)["pooled_output"]
        for name in ("head_dropout", "classifier", "float32_output"):
            x = self.get_layer(name)(x)
        return keras.Model(inputs, _classifier_outputs(x, self.num_classes),
                           name=f"{self.name}_window")

    TASK = "glue"

    @classmethod
    def settings(cls, labels, max_seq_length, do_lower_case=True, text_inputs=("text_a",),
                 task_name="custom", dropout=None, max_windows=1, doc_stride=None,
                 window_pooling="mean", **extra):
        """glue_config.json: labels in class-id order (None: regression, one output),
        text_inputs ("text_a", or "text_a" and "text_b" for pairs), the GLUE task name
        ("custom" for the user's data), how a long text is read (`window_settings`) and
        anything `extra` (custom data's columns)."""
        regression = labels is None
        return dict(task=cls.TASK, task_name=task_name,
                    labels=None if regression else list(labels),
                    regression=regression, num_classes=1 if regression else len(labels),
                    text_inputs=list(text_inputs), max_seq_length=int(max_seq_length),
                    do_lower_case=bool(do_lower_case), dropout=dropout,
                    **window_settings(max_windows, doc_stride, window_pooling,
                                      len(text_inputs)), **extra)

    @classmethod
    def from_settings(cls, encoder, settings):
        return cls(encoder, settings["num_classes"], settings.get("dropout"),
                   window_pooling=window_pooling(settings))

    def run_settings(self, max_seq_length, do_lower_case=True, labels=None, **settings):
        if (labels is None) != (self.num_classes == 1) or \
                (labels is not None and len(labels) != self.num_classes):
            raise ValueError(f"labels: expected {self.num_classes} names (one per class; "
                             f"None for regression), got {labels!r}")
        return self.settings(labels, max_seq_length, do_lower_case, dropout=self.dropout,
                             **settings)


def window_settings(max_windows=1, doc_stride=None, window_pooling="mean", text_inputs=1):
    """How a classifier's run reads a text longer than max_seq_length - 2 pieces, as its
    TASK_config.json keeps it (a file without these keys: max_windows 1):

        max_windows     1: the text is cut there (google's run_classifier); n > 1: read in
                        up to n windows (0: as many as it takes), BertPreprocessor.windows
        doc_stride      pieces between the starts of two windows (None: consecutive)
        window_pooling  "mean" or "max" of the windows' logits (task_layers.pool_windows)

    Sentence pairs are cut (google's longest-first rule): their max_windows is 1."""
    from bert_tf.text.windows import WINDOW_POOLINGS
    if int(max_windows) < 0:
        raise ValueError(f"max_windows: expected 0 (no limit) or more, got {max_windows!r}")
    if doc_stride is not None and int(doc_stride) < 1:
        raise ValueError(f"doc_stride: expected a positive number of pieces, got "
                         f"{doc_stride!r}")
    if window_pooling not in WINDOW_POOLINGS:
        raise ValueError(f"window_pooling: expected one of {', '.join(WINDOW_POOLINGS)}, "
                         f"got {window_pooling!r}")
    if int(max_windows) != 1 and text_inputs != 1:
        raise ValueError(f"max_windows={max_windows}: windows read one text; sentence pairs "
                         f"are cut by google's longest-first rule (max_windows 1)")
    return dict(max_windows=int(max_windows),
                doc_stride=None if doc_stride is None else int(doc_stride),
                window_pooling=str(window_pooling))


def reads_windows(settings):
    """Whether a run's settings (TASK_config dict) read long texts in windows."""
    return settings.get("max_windows", 1) != 1


def window_pooling(settings):
    """BertClassifier's window_pooling for a run's settings: None when it cuts texts."""
    return settings["window_pooling"] if reads_windows(settings) else None


@task_model
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

    TASK = "swag"

    @classmethod
    def settings(cls, num_choices, max_seq_length, do_lower_case=True):
        """swag_config.json."""
        return dict(task=cls.TASK, num_choices=int(num_choices),
                    max_seq_length=int(max_seq_length), do_lower_case=bool(do_lower_case),
                    text_inputs=["context", "start", "endings"])

    @classmethod
    def from_settings(cls, encoder, settings):
        return cls(encoder, settings["num_choices"])

    def run_settings(self, max_seq_length, do_lower_case=True, labels=None, **settings):
        return self.settings(self.num_choices, max_seq_length, do_lower_case)


def _token_head(encoder, num_labels, mixed, feature_head, lstm_units, dropout):
    """The layers between the encoder's features and the logits, in order: ScalarMix (a
    weighted sum), dropout, two BiLSTM layers (feature_head "bilstm"), the classifier."""
    policy = encoder_policy(encoder)
    layers = [ScalarMix(dtype=policy, name="scalar_mix")] if mixed else []
    layers.append(keras.layers.Dropout(_dropout_rate(encoder, dropout), name="head_dropout"))
    if feature_head == "bilstm":
        layers += [keras.layers.Bidirectional(
            keras.layers.LSTM(lstm_units, return_sequences=True, dtype=policy),
            dtype=policy, name=f"bilstm_{i}") for i in (1, 2)]
    layers.append(_dense(num_labels, encoder, "classifier"))
    layers.append(keras.layers.Activation("linear", dtype="float32", name="logits"))
    return layers


def _run_head(layers, features, padding_mask):
    """features [B, S, ...] through the head's layers -> logits float32 [B, S, K]. The
    LSTMs take padding_mask: padded steps leave their state as it is, so the backward
    direction starts at each row's last real token, whatever the batch's width."""
    mask = None
    for layer in layers:
        if isinstance(layer, keras.layers.Bidirectional):
            if mask is None:
                mask = ops.greater(padding_mask, 0)                          # [B, S]
            features = layer(features, mask=mask)                            # [B, S, 2U]
        else:
            features = layer(features)
    return features


@task_model
@keras.saving.register_keras_serializable(package="bert_tf")
class BertTokenClassifier(_TaskModel):
    """Token classification (NER): dropout + dense(num_labels) on every position; or,
    feature_based, a head (linear, or the paper's BiLSTM) over a frozen encoder's layers.

    Args:
        encoder: a BertEncoder (its pooler is frozen: it feeds nothing here).
        num_labels: K; the output is {"logits": float32 [B, S, K]}.
        feature_based: the paper's feature-based recipe (section 5.3): the encoder is
            frozen and runs in inference mode, and the head reads the layers that
            `feature_layers` chooses.
        dropout: the head's dropout rate; None = the encoder's hidden_dropout_prob.
        feature_layers: with feature_based, one of FEATURE_LAYERS: "embeddings",
            "second_to_last", "last", "sum_last_four" (a learned weighted sum, ScalarMix),
            "concat_last_four" ([B, S, 4H], the default), "sum_all" (weighted sum of every
            transformer layer).
        feature_head: with feature_based, "linear" (dropout + dense) or "bilstm" (dropout,
            two bidirectional LSTM layers, then the dense layer: the paper's head).
        feature_lstm_units: the BiLSTM's hidden units per direction (768: the paper's).

    `feature_head_model()` gives the head alone, for features computed once
    (tasks/families/ner/frozen_features.py).

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
        >>> mixed = bert_tf.BertTokenClassifier(encoder, 5, feature_based=True,
        ...     feature_layers="sum_all", feature_head="bilstm", feature_lstm_units=8)
        >>> mixed({"token_ids": ids, "segment_ids": np.zeros_like(ids),
        ...        "padding_mask": np.ones_like(ids)})["logits"].shape
        TensorShape([1, 3, 5])
    """

    ARGS = ("num_labels", "feature_based", "dropout", "feature_layers", "feature_head",
            "feature_lstm_units")

    def __init__(self, encoder, num_labels, feature_based=False, dropout=None,
                 feature_layers=DEFAULT_FEATURE_LAYERS, feature_head="linear",
                 feature_lstm_units=DEFAULT_LSTM_UNITS, name="ner", **kwargs):
        if feature_head not in FEATURE_HEADS:
            raise ValueError(f"feature_head must be one of {', '.join(FEATURE_HEADS)}; "
                             f"got {feature_head!r}")
        if not feature_based and (feature_layers != DEFAULT_FEATURE_LAYERS or
                                  feature_head != "linear"):
            raise ValueError("feature_layers and feature_head choose the head of a frozen "
                             "encoder: they need feature_based=True")
        if int(feature_lstm_units) < 1:
            raise ValueError(f"feature_lstm_units must be >= 1, got {feature_lstm_units}")
        encoder.pooler.trainable = False
        inputs = _inputs()
        mixed = False
        if feature_based:
            frozen = FrozenLastLayers(encoder, feature_layers, name="frozen_layers")
            mixed = frozen.mixed
            features = frozen(inputs)                          # [B, S, D] or [B, S, n, H]
        else:
            features = encoder(inputs)["sequence_output"]                     # [B, S, H]
        head = _token_head(encoder, num_labels, mixed, feature_head, int(feature_lstm_units),
                           dropout)
        logits = _run_head(head, features, inputs["padding_mask"])            # [B, S, K]
        super().__init__(inputs, {"logits": logits}, name=name, **kwargs)
        self._finish(encoder, dict(num_labels=num_labels, feature_based=bool(feature_based),
                                   dropout=dropout, feature_layers=feature_layers,
                                   feature_head=feature_head,
                                   feature_lstm_units=int(feature_lstm_units)))

    TASK = "ner"

    @classmethod
    def settings(cls, labels, max_seq_length, do_lower_case=True, feature_based=False,
                 feature_layers=DEFAULT_FEATURE_LAYERS, feature_head="linear",
                 feature_lstm_units=DEFAULT_LSTM_UNITS, doc_stride=None):
        """ner_config.json: the tags in class-id order, the feature-based head's choices
        (the constructor's arguments; a file without them is a run of the defaults) and
        the pieces between the starts of a long text's windows (`doc_stride`; None, or a
        file without it: consecutive parts)."""
        if doc_stride is not None and int(doc_stride) < 1:
            raise ValueError(f"doc_stride: expected a positive number of pieces, got "
                             f"{doc_stride!r}")
        return dict(task=cls.TASK, labels=list(labels), max_seq_length=int(max_seq_length),
                    do_lower_case=bool(do_lower_case), feature_based=bool(feature_based),
                    feature_layers=str(feature_layers), feature_head=str(feature_head),
                    feature_lstm_units=int(feature_lstm_units),
                    doc_stride=None if doc_stride is None else int(doc_stride))

    @classmethod
    def from_settings(cls, encoder, settings):
        return cls(encoder, len(settings["labels"]), settings.get("feature_based", False),
                   feature_layers=settings.get("feature_layers", DEFAULT_FEATURE_LAYERS),
                   feature_head=settings.get("feature_head", "linear"),
                   feature_lstm_units=settings.get("feature_lstm_units", DEFAULT_LSTM_UNITS))

    def run_settings(self, max_seq_length, do_lower_case=True, labels=None, **settings):
        if labels is None or len(labels) != self.num_labels:
            raise ValueError(f"labels: expected {self.num_labels} tag names, got {labels!r}")
        return self.settings(labels, max_seq_length, do_lower_case, self.feature_based,
                             self.feature_layers, self.feature_head, self.feature_lstm_units,
                             settings.get("doc_stride"))

    def feature_head_model(self):
        """The head alone, a Keras model sharing this model's layers (training it trains
        this model): {"features": what the frozen encoder gives (FrozenLastLayers' output,
        float32), "padding_mask": int32 [B, S]} -> {"logits": float32 [B, S, K]}."""
        if not self.feature_based:
            raise ValueError("feature_head_model: the model is not feature-based")
        frozen = self.get_layer("frozen_layers")
        names = (["scalar_mix"] if frozen.mixed else []) + ["head_dropout"] + \
            (["bilstm_1", "bilstm_2"] if self.feature_head == "bilstm" else []) + \
            ["classifier", "logits"]
        inputs = {"features": keras.Input(shape=frozen.row_shape, dtype="float32",
                                          name="features"),
                  "padding_mask": keras.Input(shape=(None,), dtype="int32",
                                              name="padding_mask")}
        logits = _run_head([self.get_layer(n) for n in names], inputs["features"],
                           inputs["padding_mask"])
        return keras.Model(inputs, {"logits": logits}, name=f"{self.name}_head")


@task_model
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

    TASK = "squad"

    @classmethod
    def settings(cls, max_seq_length, do_lower_case=True, **settings):
        """squad_config.json: the sequence length, the case and the family's window and
        decoding settings as given (the SQuAD family's settings own their names and
        defaults: tasks/families/squad/config.py; its serving module reads a missing
        one as its default)."""
        return dict(settings, task=cls.TASK, max_seq_length=int(max_seq_length),
                    do_lower_case=bool(do_lower_case))

    @classmethod
    def from_settings(cls, encoder, settings):
        return cls(encoder)

    def run_settings(self, max_seq_length, do_lower_case=True, labels=None, **settings):
        return self.settings(max_seq_length, do_lower_case, **settings)


def build_task_model(task, encoder, config):
    """The Keras model of fine-tuning task `task` ("glue", "swag", "ner", "squad", or a
    family whose run records its model class, `config["model"]`: a class of
    TASK_MODELS by name) with the settings `config` (a run's TASK_config dict)."""
    by_name = {cls.__name__: cls for cls in TASK_MODELS.values()}
    if config.get("model") in by_name:
        return by_name[config["model"]].from_settings(encoder, config)
    if task not in TASK_MODELS:
        raise ValueError(f"unknown task {task!r}; expected one of {sorted(TASK_MODELS)}")
    return TASK_MODELS[task].from_settings(encoder, config)


__all__ = ["BertClassifier", "BertMultipleChoice", "BertTokenClassifier", "BertSpanLabeler",
           "build_task_model", "loss_scaled", "encoder_policy"]
