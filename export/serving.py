"""Serving modules: raw strings in, named outputs out, tokenized in the graph.

Each task's module is a `tf.Module` holding the tokenizer (vocab as an asset), the packer
and the Keras model, with three signatures, as TF Serving users expect:

    serving_default   tf.string text inputs        -> task outputs
    serve_tokenized   token_ids, segment_ids, padding_mask (int32 [batch, seq]) -> outputs
    serve_examples    serialized tf.Example with the text features -> task outputs
                      (parsed, then serving_default's traced function called)

Everything inside the signatures is TensorFlow / tensorflow_text ops, so the SavedModel
loads in a process that imports nothing else (TF Serving links exactly those ops).

The text signatures pack to max_seq_length, then run the model on length-sorted
sub-batches, each cut to its own longest sequence (a multiple of 8;
bert_tf.text.batching.run_by_length), so a batch of short texts costs what short texts cost
and one long text does not widen the rest (HF's pipeline pads each batch to its longest).
One text is one model call at its own width.
Outputs keep their shapes and order: per-token outputs are padded back to max_seq_length.
serve_tokenized runs on what it is given.
"""

import tensorflow as tf

from bert_tf.models.task_layers import pool_windows
from bert_tf.models.task_models import reads_windows
from bert_tf.text.batching import run_by_length
from bert_tf.text.preprocessor import BertPreprocessor
from export.limits import MAX_TEXT_BYTES
from export.request_checks import (after, check_id_range, check_mask, check_same_batch,
                                   check_same_shape, check_shape, check_text_bytes)

TOKENIZED_SPEC = {name: tf.TensorSpec([None, None], tf.int32, name=name)
                  for name in ("token_ids", "segment_ids", "padding_mask")}


class ServingModule(tf.Module):
    """Base class: subclasses set TEXT_INPUTS (names of the tf.string inputs, all [batch])
    and implement `outputs_from_tokens(features)` and, if their text handling is not the
    plain single/pair packing, `features_from_text(**texts)` (or `outputs_from_text` when
    the outputs refer back to the text)."""

    TEXT_INPUTS = ("text",)

    def __init__(self, model, tokenizer, max_seq_length, max_text_bytes=MAX_TEXT_BYTES,
                 name=None):
        super().__init__(name=name)
        if max_text_bytes < 1:
            raise ValueError(f"max_text_bytes must be >= 1, got {max_text_bytes}")
        # The Keras model is deliberately not an attribute tf.Module would track: the
        # signatures capture the tf.Variables *behind* Keras 3's variable wrappers, and
        # the session-based loader (TF Serving, saved_model_cli) restores only variables
        # the object graph holds directly. So those tf.Variables are tracked, as a list
        # (keras.export.ExportArchive does the same).
        self._hidden = _Untracked(model)
        self.model_variables = [v.value for v in model.variables]
        # Training's preprocessing step (bert_tf/text/preprocessor.py): the same inputs.
        self.preprocessor = BertPreprocessor(tokenizer, max_seq_length)
        self.max_seq_length = tf.constant(max_seq_length, name="max_seq_length")
        # A variable, so the export holds it (`tf.saved_model.load(path).max_text_bytes`)
        # and the signatures' check reads that one value.
        self.max_text_bytes = tf.Variable(int(max_text_bytes), dtype=tf.int64,
                                          trainable=False, name="max_text_bytes")
        config = getattr(model, "encoder", model).bert_config
        self._vocab_size = int(config.vocab_size)
        self._type_vocab_size = int(config.type_vocab_size)
        self._positions = int(config.max_position_embeddings)

    @classmethod
    def from_run(cls, model, tokenizer, max_seq_length, settings,
                 max_text_bytes=MAX_TEXT_BYTES):
        """The module of a fine-tuning run: its model and tokenizer
        (bert_tf.load_task_model), and what it needs of the run's settings (its
        TASK_config dict). A module whose constructor takes settings overrides it."""
        return cls(model, tokenizer, max_seq_length, max_text_bytes=max_text_bytes)

    @property
    def model(self):
        return self._hidden.value

    def freeze_weights(self):
        """Folds the model's weights into the signatures as constants (a "frozen graph"),
        instead of variables read on every call. A CPU's oneDNN kernels then pack each
        weight matrix once and keep it, where a variable's matrix is packed again on every
        call; under `mixed_bfloat16` the per-call casts of the float32 weights fold away
        too. On a CPU with native bf16 that made one short text 1.5x faster (bench/
        serving_profile.py). The export then holds no variables of the model. Call before
        `signatures()`."""
        self._hidden = _Untracked(FrozenModel(self.model))
        self.model_variables = []

    @property
    def tokenizer(self):
        return self.preprocessor.tokenizer

    @property
    def packer(self):
        return self.preprocessor.packer

    # -- text -> features --------------------------------------------------------------

    def features_from_text(self, **texts):
        """Single text or pair -> packed int32 [batch, max_seq_length] features."""
        names = self.TEXT_INPUTS
        if len(names) > 1:
            check_same_batch(texts, names)
        return self.preprocessor(*(texts[name] for name in names))

    # Outputs with a token axis (the last axis of the features), padded back to
    # max_seq_length by the text signatures.
    PER_TOKEN_OUTPUTS = ()

    def outputs_from_text(self, **texts):
        """The text signature's work: pack, run the model on length-sorted sub-batches
        each cut to its longest (bert_tf.text.batching.run_by_length); tasks whose outputs
        refer back to the text (spans, entities) override it."""
        return run_by_length(self.outputs_from_tokens, self.features_from_text(**texts),
                             per_token=self.PER_TOKEN_OUTPUTS)

    def outputs_from_tokens(self, features):
        raise NotImplementedError

    # -- signature specs (a task with other input shapes overrides them) ----------------

    def text_spec(self):
        return {n: tf.TensorSpec([None], tf.string, name=n) for n in self.TEXT_INPUTS}

    def tokenized_spec(self):
        return TOKENIZED_SPEC

    def example_features(self):
        """tf.io.parse_example spec of serve_examples: one bytes feature per text input."""
        return {n: tf.io.FixedLenFeature([], tf.string) for n in self.TEXT_INPUTS}

    # -- signatures ----------------------------------------------------------------------

    def signatures(self):
        text_spec = self.text_spec()
        tokenized_spec = self.tokenized_spec()
        # autograph=False here and in _kwargs: the code they call writes its control flow
        # as tf.cond/tf.while_loop, and AutoGraph's conversion of all of it (tokenizer,
        # packer, model) took 10 of an NER export's 28 CPU-seconds.

        @tf.function(input_signature=[text_spec], autograph=False)
        def serve_text(texts):
            return self.outputs_from_text(**self.checked_texts(texts))

        @tf.function(input_signature=[tokenized_spec], autograph=False)
        def serve_tokenized(features):
            return self.outputs_from_tokens(self.checked_tokens(features))

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")],
                     autograph=False)
        def serve_examples(serialized):
            serialized = after(check_shape(serialized, [None], "examples", "strings"),
                               serialized)
            # serve_text's traced function, called: the text path is traced once.
            return serve_text(tf.io.parse_example(serialized, self.example_features()))

        # Signatures take keyword tensors: unpack the dicts.
        return {
            "serving_default": _kwargs(serve_text, tuple(text_spec)),
            "serve_tokenized": _kwargs(serve_tokenized, tuple(tokenized_spec)),
            "serve_examples": serve_examples.get_concrete_function(),
        }

    # -- input checks: one InvalidArgument error naming the input, before any other work --

    def checked_texts(self, texts):
        """The text inputs, once their shapes (the signature's), batch sizes (equal) and
        lengths (at most max_text_bytes each) are checked. Shapes first: the other checks
        read them."""
        spec = self.text_spec()
        names = tuple(spec)
        shapes = [check_shape(texts[n], spec[n].shape, n, "strings") for n in names]
        with tf.control_dependencies(shapes):
            checks = check_same_batch(texts, names)
            checks += [check_text_bytes(texts[n], self.max_text_bytes, n) for n in names]
        return {n: after(checks, texts[n]) for n in names}

    def checked_tokens(self, features):
        """serve_tokenized's inputs, once their shapes (the signature's, all three equal),
        ids (token_ids in [0, vocab_size), segment_ids in [0, type_vocab_size): a
        negative id would index the table from its end), mask (0 or 1: another value
        would weigh a token's attention wrongly, not fail) and length (at most the
        model's max_position_embeddings) are checked."""
        spec = self.tokenized_spec()
        names = tuple(spec)
        shapes = [check_shape(features[n], spec[n].shape, n, "int32 ids") for n in names]
        with tf.control_dependencies(shapes):
            checks = check_same_shape(features, names)
        with tf.control_dependencies(checks):
            seq = tf.shape(features["token_ids"])[-1]
            checks = [tf.debugging.Assert(seq <= self._positions, [tf.strings.join([
                "token_ids: ", tf.strings.as_string(seq), " positions exceed "
                f"max_position_embeddings of the model ({self._positions})"])])]
            checks.append(check_id_range(features["token_ids"], self._vocab_size,
                                         "token_ids", "vocab_size"))
            checks.append(check_id_range(features["segment_ids"], self._type_vocab_size,
                                         "segment_ids", "type_vocab_size"))
            checks.append(check_mask(features["padding_mask"], "padding_mask"))
        return {n: after(checks, features[n]) for n in names}


class ClassifierServing(ServingModule):
    """Base of the modules of a bert_tf.BertClassifier (classification, multi-label):
    subclasses turn the model's outputs into their answer (`answer(out)`, out: float32
    {"logits": [batch, K]} or {"score": [batch]}).

    A run that reads a long text in windows (its settings' max_windows other than 1,
    tasks/text_inputs.py) is served the same way: `windows` = (max_windows, doc_stride,
    window_pooling); the text signatures read the text's windows as training did
    (BertPreprocessor.windows), run them by length, and answer with their pooled logits
    (task_layers.pool_windows: the function the Keras model pools with). The module then
    holds the model of one window (BertClassifier.window_model), and serve_tokenized
    reads each row as a text of one window."""

    def __init__(self, model, tokenizer, max_seq_length, max_text_bytes=MAX_TEXT_BYTES,
                 name=None, windows=None):
        if windows is not None:
            window = model.window_model()
            window.encoder = model.encoder
            model = window
        super().__init__(model, tokenizer, max_seq_length, max_text_bytes, name=name)
        self.windows = None if windows is None else tuple(windows)

    @staticmethod
    def windows_of(settings):
        """`windows` of a run's settings: None when it cuts long texts."""
        if not reads_windows(settings):
            return None
        return (settings["max_windows"], settings["doc_stride"], settings["window_pooling"])

    def answer(self, out):
        raise NotImplementedError

    def outputs_from_tokens(self, features):
        out = self.model(features, training=False)
        return self.answer({k: float32(v) for k, v in out.items()})

    def outputs_from_text(self, **texts):
        if self.windows is None:
            return super().outputs_from_text(**texts)
        max_windows, stride, pooling = self.windows
        features, splits = self.preprocessor.windows(texts[self.TEXT_INPUTS[0]],
                                                     max_windows, stride)
        out = run_by_length(lambda f: {k: float32(v) for k, v in
                                       self.model(f, training=False).items()}, features)
        pooled = {}
        for name, value in out.items():          # [windows, K], or [windows] ("score")
            # K stays static (the window model's), so the signature declares [batch, K].
            rows = value[:, None] if value.shape.rank == 1 else value        # [windows, K]
            per_text = tf.RaggedTensor.from_row_splits(rows, splits, validate=False)
            mask = tf.sequence_mask(per_text.row_lengths())  # [batch, most windows]
            value = pool_windows(per_text.to_tensor(), mask, pooling)         # [batch, K]
            pooled[name] = value[:, 0] if name == "score" else value
        return self.answer(pooled)


class FrozenModel:
    """A Keras model's inference call, `model(features, training=False)`, with its
    weights as constants: one frozen function per input structure (names, dtypes, ranks;
    every dimension left open), made on first use."""

    def __init__(self, model):
        self.keras_model = model
        self._frozen = {}

    def __getattr__(self, name):      # bert_config, encoder, ...: the model's
        return getattr(self.keras_model, name)

    def __call__(self, features, training=False):
        from tensorflow.python.framework.convert_to_constants import \
            convert_variables_to_constants_v2
        if training:
            raise ValueError("a frozen model only infers (training=False)")
        key = tuple((k, v.dtype, len(v.shape)) for k, v in sorted(features.items()))
        if key not in self._frozen:
            model = self.keras_model
            # Made eagerly, whatever graph is being traced: the constants are the
            # variables' values now.
            with tf.init_scope():
                spec = {k: tf.TensorSpec([None] * len(v.shape), v.dtype, name=k)
                        for k, v in features.items()}
                concrete = tf.function(lambda f: model(f, training=False),
                                       autograph=False).get_concrete_function(spec)
                self._frozen[key] = (convert_variables_to_constants_v2(concrete),
                                     concrete.structured_outputs)
        frozen, structure = self._frozen[key]
        return tf.nest.pack_sequence_as(structure, frozen(*tf.nest.flatten(features)))


class _Untracked:
    """A plain holder: tf.Module does not look inside it."""

    def __init__(self, value):
        self.value = value


def _kwargs(fn, names):
    """A concrete function of one dict argument -> a signature with one input per key."""
    spec = fn.input_signature[0]

    @tf.function(input_signature=[spec[n] for n in names], autograph=False)
    def flat(*args):
        return fn(dict(zip(names, args)))
    return flat.get_concrete_function()


def float32(x):
    return tf.cast(x, tf.float32)


class EmbeddingsModule(ServingModule):
    """text -> pooled_output [batch, H], sequence_output [batch, seq, H], mean_pooled
    [batch, H] (average of the real tokens' vectors, [CLS]/[SEP] included), padding_mask
    [batch, seq]. sequence_output is 0 where padding_mask is 0; seq is max_seq_length from
    text, the input's from serve_tokenized."""

    PER_TOKEN_OUTPUTS = ("sequence_output", "padding_mask")

    def outputs_from_tokens(self, features):
        out = self.model(features, training=False)
        mask = tf.cast(features["padding_mask"], tf.float32)[:, :, None]
        sequence = float32(out["sequence_output"]) * mask             # [batch, seq, H]
        mean = tf.reduce_sum(sequence, 1) / tf.maximum(tf.reduce_sum(mask, 1), 1.0)
        return {"pooled_output": float32(out["pooled_output"]),
                "sequence_output": sequence, "mean_pooled": mean,
                "padding_mask": features["padding_mask"]}


class FillMaskModule(ServingModule):
    """text containing [MASK] -> the top-k tokens and probabilities at each mask:
    tokens [batch, max_masks, k] (tf.string), scores [batch, max_masks, k], positions
    [batch, max_masks] (token index, -1 = no mask there), num_masks [batch].

    The tokenizer would split the literal "[MASK]" into "[", "mask", "]" (google's
    FullTokenizer does), so the text is split on it first and the mask id is put between
    the tokenized pieces."""

    def __init__(self, model, tokenizer, max_seq_length, top_k=5, max_masks=20,
                 max_text_bytes=MAX_TEXT_BYTES, name=None):
        super().__init__(model, tokenizer, max_seq_length, max_text_bytes, name=name)
        self.top_k = top_k
        self.max_masks = max_masks

    def features_from_text(self, text):
        pieces = tf.strings.split(text, sep="[MASK]")                  # [batch, (parts)]
        ids = self.tokenizer(pieces.flat_values)                       # [parts, (tokens)]
        # A [MASK] after every piece but the last of its text.
        part_index = tf.range(tf.size(pieces.flat_values, out_type=tf.int64)) - \
            tf.gather(pieces.row_splits, pieces.value_rowids())
        is_last = part_index == tf.gather(pieces.row_lengths(), pieces.value_rowids()) - 1
        mask = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(tf.cast(~is_last, tf.int32))], self.tokenizer.mask_id),
            tf.cast(~is_last, tf.int64))
        ids = tf.concat([ids, mask], axis=1)                           # [parts, (tokens)]
        ids = tf.RaggedTensor.from_row_splits(ids, pieces.row_splits).merge_dims(1, 2)
        return self.packer(ids)                                        # [batch, seq]

    def outputs_from_tokens(self, features):
        token_ids = features["token_ids"]
        is_mask = tf.equal(token_ids, self.tokenizer.mask_id)
        # Mask positions, left-aligned and padded to max_masks (padding points at 0 and is
        # reported as position -1).
        where = tf.where(is_mask)                                      # [n, 2]
        positions = tf.RaggedTensor.from_value_rowids(
            tf.cast(where[:, 1], tf.int32), where[:, 0],
            nrows=tf.shape(token_ids, out_type=tf.int64)[0])
        positions = positions[:, :self.max_masks].to_tensor(
            default_value=-1, shape=[None, self.max_masks])            # [batch, max_masks]
        inputs = dict(features, masked_lm_positions=tf.maximum(positions, 0))
        logits = self.model(inputs, training=False)["mlm_logits"]      # [batch, m, vocab]
        probs = tf.nn.softmax(float32(logits))
        scores, ids = tf.math.top_k(probs, k=self.top_k)               # [batch, m, k]
        valid = positions[:, :, None] >= 0
        return {"tokens": tf.where(valid, self.tokenizer.id_to_token(ids), ""),
                "token_ids": tf.where(valid, ids, -1),
                "scores": tf.where(valid, scores, 0.0),
                "positions": positions,
                "num_masks": tf.reduce_sum(tf.cast(positions >= 0, tf.int32), 1)}

