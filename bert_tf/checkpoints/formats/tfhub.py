"""TF Hub's BERT SavedModels (tfhub.dev, now Kaggle Models: `bert_en_uncased_L-12_H-768_A-12`,
the small BERTs, `bert_zh_L-12_H-768_A-12`, ...), as Model Garden's
`official.nlp.tools.export_tfhub` writes them: a Keras SavedModel of the encoder
(`input_word_ids`, `input_mask`, `input_type_ids` -> `pooled_output`, `sequence_output`,
...), with `--export_type model_with_mlm` an `mlm` sub-object holding the masked-LM head,
and, for the encoders of that release, `assets/vocab.txt` and a `do_lower_case` variable.

Read without running the SavedModel: saved_model.pb names every variable (Keras' names:
`transformer/layer_0/self_attention/query/kernel`, `pooler_transform/kernel`,
`bert/cls/predictions/output_bias/bias`, ...), and the node ids of its object graph are
those of the variables checkpoint beside it, so each name finds its tensor. The sizes come
from the tensors (layers counted, heads from the per-head query kernel), the vocabulary
from the SavedModel's assets or a preprocessing SavedModel beside it (`--vocab_file`
otherwise), lower-casing from the `do_lower_case` variable or the preprocessing model.
Model Garden computes "gelu" as the tanh approximation, so the config says `gelu_tanh`.
"""

import os
import re

import numpy as np

from bert_tf.checkpoints.bundle import check_bundle, read_failure
from bert_tf.checkpoints.formats.core import (
    VOCAB_NAME, Checkpoint, CheckpointFormat, logger, merge_heads, register_format,
    split_model)
from bert_tf.base.config import BertConfig

SAVED_MODEL_NAME = "saved_model.pb"
OUR_CONFIG = os.path.join("assets.extra", "bert_config.json")  # what write_... leaves
_LAYER = re.compile(r"(?:^|/)transformer/layer_(\d+)/(.+)$")
# Keras' names (after an optional prefix) -> google's.
_EMBEDDINGS = {
    "word_embeddings/embeddings": "bert/embeddings/word_embeddings",
    "position_embedding/embeddings": "bert/embeddings/position_embeddings",
    "type_embeddings/embeddings": "bert/embeddings/token_type_embeddings",
    "embeddings/layer_norm/gamma": "bert/embeddings/LayerNorm/gamma",
    "embeddings/layer_norm/beta": "bert/embeddings/LayerNorm/beta",
    "pooler_transform/kernel": "bert/pooler/dense/kernel",
    "pooler_transform/bias": "bert/pooler/dense/bias",
    "cls/predictions/output_bias/bias": "cls/predictions/output_bias",
    "cls/predictions/transform/dense/kernel": "cls/predictions/transform/dense/kernel",
    "cls/predictions/transform/dense/bias": "cls/predictions/transform/dense/bias",
    "cls/predictions/transform/LayerNorm/gamma": "cls/predictions/transform/LayerNorm/gamma",
    "cls/predictions/transform/LayerNorm/beta": "cls/predictions/transform/LayerNorm/beta",
}
_IN_LAYER = {
    "self_attention/query": "attention/self/query",
    "self_attention/key": "attention/self/key",
    "self_attention/value": "attention/self/value",
    "self_attention/attention_output": "attention/output/dense",
    "self_attention_layer_norm": "attention/output/LayerNorm",
    "intermediate": "intermediate/dense",
    "output": "output/dense",
    "output_layer_norm": "output/LayerNorm",
}


def tfhub_dir(path):
    """`path` when it is a SavedModel directory holding a BERT encoder, else None (only
    saved_model.pb is read)."""
    path = os.fspath(path)
    if not (os.path.isfile(os.path.join(path, SAVED_MODEL_NAME)) and
            os.path.isfile(os.path.join(path, "variables", "variables.index"))):
        return None
    if os.path.isfile(os.path.join(path, OUR_CONFIG)):
        return path  # written by write_tfhub_saved_model
    try:
        names = _saved_variables(path)
    except Exception:  # noqa: BLE001  (unreadable: not this format's to claim)
        return None
    return path if any(_google_name(n) == "bert/encoder/layer_0/attention/self/query/kernel"
                       for n in names.values()) else None


def _list_keys(path, reader, owner):
    """The checkpoint keys of the variables in the `variables` list of the object at
    `owner` (a path of local names from the root: () or ("mlm",)), in list order."""
    nodes, graph = _saved_nodes(path), _checkpoint_graph(reader)

    def child(node, name):
        found = [c.node_id for c in nodes[node].children if c.local_name == name]
        return found[0] if found else None

    node = 0
    for name in owner + ("variables",):
        node = child(node, name) if node is not None else None
    if node is None:
        return None
    keys = []
    for i in range(len(nodes[node].children)):
        attributes = graph.nodes[child(node, str(i))].attributes
        keys.append(next(a.checkpoint_key for a in attributes if a.name == "VARIABLE_VALUE"))
    return keys


def _read_ours(path, reader):
    """google's tensors of a SavedModel write_tfhub_saved_model wrote: its config beside,
    its `variables` lists in the order of the model's weights."""
    from bert_tf.checkpoints.formats.core import google_variables
    from bert_tf.models.encoder import BertEncoder
    from bert_tf.models.pretrainer import BertPretrainer
    config = BertConfig.from_json_file(os.path.join(path, OUR_CONFIG))
    keys = _list_keys(path, reader, ("mlm",))
    model = BertPretrainer.from_config_object(config) if keys else \
        BertEncoder.from_config_object(config)
    if keys and len(keys) != len(model.weights):   # a pretrainer without next-sentence head
        masked_lm_only = BertPretrainer.from_config_object(config, next_sentence=False)
        if len(keys) == len(masked_lm_only.weights):
            model = masked_lm_only
    keys = keys or _list_keys(path, reader, ())
    if keys is None or len(keys) != len(model.weights):
        raise ValueError(f"{path}: the SavedModel's variables do not match its "
                         f"{OUR_CONFIG}")
    for weight, key in zip(model.weights, keys):
        value = reader.get_tensor(key)
        if tuple(value.shape) != tuple(weight.shape):
            raise ValueError(f"{path}: variable {key} has shape {value.shape}, the model's "
                             f"{weight.path} {tuple(weight.shape)}")
        weight.assign(value)
    return config, google_variables(model)


def _saved_nodes(path):
    """The nodes of saved_model.pb's object graph."""
    from tensorflow.core.protobuf import saved_model_pb2
    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(path, SAVED_MODEL_NAME), "rb") as f:
        saved.ParseFromString(f.read())
    return saved.meta_graphs[0].object_graph_def.nodes


def _checkpoint_graph(reader):
    """The object graph of the variables checkpoint: numbered as saved_model.pb's."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    return graph


def _saved_variables(path):
    """{node id: the variable's name} for every variable in saved_model.pb's object graph."""
    return {i: node.variable.name for i, node in enumerate(_saved_nodes(path))
            if node.WhichOneof("kind") == "variable"}


def _variable_names(path, reader):
    """{checkpoint key: the variable's name}: the variables checkpoint numbers its objects
    as saved_model.pb does."""
    graph, names = _checkpoint_graph(reader), {}
    for node, name in _saved_variables(path).items():
        for attribute in graph.nodes[node].attributes:
            if attribute.name == "VARIABLE_VALUE":
                names[attribute.checkpoint_key] = name
    return names


def _google_name(name):
    """google's name for a Keras variable name of the exported encoder, or None."""
    name = re.sub(r":\d+$", "", name)
    for keras, google in _EMBEDDINGS.items():
        if name == keras or name.endswith("/" + keras):
            return google
    found = _LAYER.search(name)
    if found:
        sub, _, weight = found.group(2).rpartition("/")
        if sub in _IN_LAYER and weight in ("kernel", "bias", "gamma", "beta"):
            return f"bert/encoder/layer_{found.group(1)}/{_IN_LAYER[sub]}/{weight}"
    return None


def _preprocessing_beside(path):
    """A TF Hub preprocessing SavedModel next to `path` (a sibling directory holding
    `assets/vocab.txt` and no encoder), or None."""
    parent = os.path.dirname(os.path.abspath(path))
    for entry in sorted(os.listdir(parent)):
        other = os.path.join(parent, entry)
        if other != os.path.abspath(path) and \
                os.path.isfile(os.path.join(other, SAVED_MODEL_NAME)) and \
                os.path.isfile(os.path.join(other, "assets", VOCAB_NAME)) and \
                tfhub_dir(other) is None:
            return other
    return None


def tfhub_vocab(path):
    """The vocabulary of a TF Hub encoder: its own asset, else the asset of the
    preprocessing model beside it, else None."""
    vocab = os.path.join(path, "assets", VOCAB_NAME)
    if os.path.isfile(vocab):
        return vocab
    preprocessing = _preprocessing_beside(path)
    return os.path.join(preprocessing, "assets", VOCAB_NAME) if preprocessing else None


def read_tfhub_saved_model(path, bert_config_file=None):
    """Reads a TF Hub BERT encoder SavedModel (module docstring) into a Checkpoint under
    google's names; its config is read off the tensors (`bert_config_file` overrides)."""
    path = os.fspath(path)
    import tensorflow as tf
    if tfhub_dir(path) is None:
        raise FileNotFoundError(f"{path}: no TF Hub BERT SavedModel (expected saved_model.pb "
                                f"and variables/ of an encoder)")
    variables = os.path.join(path, "variables", "variables")
    check_bundle(variables, "SavedModel variables", name=path)
    try:
        reader = tf.train.load_checkpoint(variables)
        names = _variable_names(path, reader)
    except (tf.errors.OpError, IndexError, ValueError) as e:
        raise ValueError(f"{path}: unreadable SavedModel variables ({read_failure(e)}; "
                         f"a damaged variables/ folder?)") from None
    tensors, ignored, do_lower_case = {}, [], None
    if os.path.isfile(os.path.join(path, OUR_CONFIG)):
        config, tensors = _read_ours(path, reader)
        do_lower_case = bool(reader.get_tensor("do_lower_case/.ATTRIBUTES/VARIABLE_VALUE"))
        names = {}
    for key, name in sorted(names.items()):
        google = _google_name(name)
        try:
            value = reader.get_tensor(key)
        except (tf.errors.OpError, IndexError) as e:
            raise ValueError(f"{path}: unreadable SavedModel variables, {name} "
                             f"({read_failure(e)}; a damaged variables.data "
                             f"file?)") from None
        if google is None:
            if key.startswith("do_lower_case/"):
                do_lower_case = bool(value)
            ignored.append(name)
            continue
        tensors[google] = value
    if names:
        config = _config(tensors, path, bert_config_file)
        tensors = {name: merge_heads(name, value, config.hidden_size,
                                     config.num_attention_heads)
                   for name, value in tensors.items()}
    vocab = tfhub_vocab(path)
    preprocessing = _preprocessing_beside(path)
    if do_lower_case is None and preprocessing:
        do_lower_case = _preprocessing_lower_case(preprocessing)
    return Checkpoint(path, "tfhub", config, tensors, vocab, ignored, do_lower_case)


def _config(tensors, path, bert_config_file):
    if bert_config_file:
        return BertConfig.from_json_file(bert_config_file)
    try:
        word = tensors["bert/embeddings/word_embeddings"]
        query = tensors["bert/encoder/layer_0/attention/self/query/kernel"]
        layers = 1 + max(int(m.group(1)) for m in
                         (re.match(r"bert/encoder/layer_(\d+)/", n) for n in tensors) if m)
        config = BertConfig(
            vocab_size=word.shape[0], hidden_size=word.shape[1], num_hidden_layers=layers,
            num_attention_heads=query.shape[1],
            intermediate_size=tensors["bert/encoder/layer_0/intermediate/dense/kernel"].shape[1],
            hidden_act="gelu_tanh",
            max_position_embeddings=tensors["bert/embeddings/position_embeddings"].shape[0],
            type_vocab_size=tensors["bert/embeddings/token_type_embeddings"].shape[0])
    except (KeyError, IndexError, ValueError) as e:
        raise ValueError(f"{path}: the SavedModel's variables do not describe a BERT "
                         f"encoder ({e.__class__.__name__}: {e})") from None
    logger.info("%s: config read from the variables (%d layers, H=%d, %d heads); "
                "hidden_act gelu_tanh, as Model Garden computes 'gelu'", path,
                config.num_hidden_layers, config.hidden_size, config.num_attention_heads)
    return config


def _preprocessing_lower_case(path):
    """Whether the preprocessing SavedModel at `path` lower-cases: its FastBertNormalizer
    or BertTokenizer settings are not stored as a variable, so ask it: "A" -> "a"?"""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the ops the SavedModel runs)
    try:
        tokens = tf.saved_model.load(path).tokenize(tf.constant(["A a"]))
    except Exception:  # noqa: BLE001
        return None
    ids = tokens.flat_values.numpy().tolist()
    return len(ids) == 2 and ids[0] == ids[1]


# -- writing ----------------------------------------------------------------------------

PREPROCESS_DIR = "preprocess"
DEFAULT_SEQ_LENGTH = 128


def write_tfhub_saved_model(model, directory, vocab_file=None):
    """Writes `model` as TF Hub's BERT convention has it: `directory` is the encoder
    SavedModel, `directory/preprocess` its preprocessing SavedModel. Returns `directory`.

    Encoder: `__call__(inputs, training=False)` on {input_word_ids, input_mask,
    input_type_ids} (int32 [batch, seq]) -> {pooled_output, sequence_output,
    encoder_outputs, default}, with `variables`, `trainable_variables` and
    `regularization_losses` (TF Hub's reusable SavedModel: `hub.KerasLayer(...,
    trainable=True)` fine-tunes it), the same as the `serving_default` signature
    (`keras.layers.TFSMLayer`), `vocab_file` and `do_lower_case`; a pretrainer's masked-LM
    head as the `mlm` sub-object (`masked_lm_positions` in, `mlm_logits` out).
    Preprocessing: `tokenize` (strings -> [batch, (tokens), 1] wordpiece ids),
    `bert_pack_inputs([tokens_a, (tokens_b)], seq_length=128)` and `__call__` on single
    texts (128, or the model's max_position_embeddings when smaller, by default), built on this project's tokenizer (google's FullTokenizer ids) and packer
    (google's truncation)."""
    import tensorflow as tf
    from bert_tf.text.preprocessor import BertPreprocessor
    from bert_tf.text.text_rules import load_vocab
    from bert_tf.text.tokenization import BertTokenizer
    if vocab_file is None:
        raise ValueError("--output_format tfhub needs the vocabulary (pass --vocab_file): "
                         "its preprocessing model tokenizes with it")
    encoder, pretrainer = split_model(model)
    do_lower_case = not any(re.search("[A-Z]", t) for t in load_vocab(vocab_file)
                            if not re.fullmatch(r"\[[A-Z]+\]", t))
    os.makedirs(directory, exist_ok=True)
    encoder_obj = _hub_object(encoder, lambda inputs, training: _encoder_outputs(
        encoder, inputs, training), _input_specs(tf, with_positions=False))
    encoder_obj.vocab_file = tf.saved_model.Asset(vocab_file)
    encoder_obj.do_lower_case = tf.Variable(do_lower_case, trainable=False)
    if pretrainer is not None:
        def mlm(inputs, training):
            out = _encoder_outputs(encoder, inputs, training)
            out["mlm_logits"] = pretrainer.mlm_head(out["sequence_output"],
                                                    inputs["masked_lm_positions"],
                                                    training=training)
            return out
        encoder_obj.mlm = _hub_object(pretrainer, mlm, _input_specs(tf, with_positions=True))
    @tf.function(input_signature=[_input_specs(tf, with_positions=False)])
    def serving_default(inputs):
        """The same outputs, each layer's output a key of its own (a signature's outputs
        are tensors): encoder_outputs_0 ... encoder_outputs_{L-1}."""
        out = encoder_obj.__call__(inputs, training=False)
        layers = out.pop("encoder_outputs")
        out.update({f"encoder_outputs_{i}": x for i, x in enumerate(layers)})
        return out

    tf.saved_model.save(encoder_obj, directory, signatures={
        "serving_default": serving_default.get_concrete_function()})
    os.makedirs(os.path.dirname(os.path.join(directory, OUR_CONFIG)), exist_ok=True)
    encoder.bert_config.to_json_file(os.path.join(directory, OUR_CONFIG), "full")

    tokenizer = BertTokenizer(vocab_file, do_lower_case=do_lower_case)
    seq_length = min(DEFAULT_SEQ_LENGTH, encoder.bert_config.max_position_embeddings)
    preprocessor = BertPreprocessor(tokenizer, seq_length)
    pre = tf.train.Checkpoint(preprocessor=preprocessor)
    text = tf.TensorSpec([None], tf.string)

    @tf.function(input_signature=[text])
    def tokenize(texts):
        return tf.expand_dims(tokenizer(texts), -1)

    def pack(inputs, seq_length):
        segments = [t.merge_dims(-2, -1) if t.ragged_rank > 1 or t.shape.rank > 2 else t
                    for t in inputs]
        out = preprocessor.packer(segments[0], segments[1] if len(segments) > 1 else None,
                                  seq_length=seq_length)
        return {"input_word_ids": out["token_ids"], "input_mask": out["padding_mask"],
                "input_type_ids": out["segment_ids"]}

    pack_fn = tf.function(pack)
    spec = tf.RaggedTensorSpec([None, None, 1], tf.int32, ragged_rank=1)
    length = tf.TensorSpec([], tf.int32)
    pack_fn.get_concrete_function([spec], length)
    pack_fn.get_concrete_function([spec, spec], length)
    pre.tokenize = tokenize
    pre.bert_pack_inputs = _with_default_length(tf, pack_fn, spec, seq_length)
    pre.__call__ = tf.function(lambda texts: pack([tokenize(texts)], seq_length),
                               input_signature=[text])
    pre.vocab_file = tf.saved_model.Asset(vocab_file)
    pre.do_lower_case = tf.Variable(do_lower_case, trainable=False)
    tf.saved_model.save(pre, os.path.join(directory, PREPROCESS_DIR))
    return directory


def _input_specs(tf, with_positions):
    specs = {name: tf.TensorSpec([None, None], tf.int32, name)
             for name in ("input_word_ids", "input_mask", "input_type_ids")}
    if with_positions:
        specs["masked_lm_positions"] = tf.TensorSpec([None, None], tf.int32,
                                                     "masked_lm_positions")
    return specs


def _encoder_outputs(encoder, inputs, training):
    out = encoder({"token_ids": inputs["input_word_ids"],
                   "segment_ids": inputs["input_type_ids"],
                   "padding_mask": inputs["input_mask"]}, training=training)
    return {"sequence_output": out["sequence_output"], "pooled_output": out["pooled_output"],
            "default": out["pooled_output"], "encoder_outputs": list(out["encoder_outputs"])}


def _hub_object(model, call, specs):
    """TF Hub's reusable SavedModel object: `__call__(inputs, training)` traced for both
    training values, and the variable lists hub.KerasLayer reads."""
    import tensorflow as tf
    obj = tf.train.Checkpoint()
    obj.model = model

    @tf.function
    def fn(inputs, training=False):
        return call(inputs, training)

    for training in (False, True):
        fn.get_concrete_function(specs, training=training)
    obj.__call__ = fn
    weights = {id(v) for v in model.weights}
    # Dropout's seed state: what the training=True trace reads, kept reachable.
    obj.seed_states = [v.value for v in model.variables if id(v) not in weights]
    obj.variables = [v.value for v in model.weights]
    obj.trainable_variables = [v.value for v in model.trainable_weights]
    obj.regularization_losses = []
    return obj


def _with_default_length(tf, pack_fn, spec, default):
    """bert_pack_inputs(inputs, seq_length=default): the saved function takes one or two
    segments and an optional length."""
    @tf.function
    def bert_pack_inputs(inputs, seq_length=default):
        return pack_fn(inputs, tf.cast(seq_length, tf.int32))
    length = tf.TensorSpec([], tf.int32)
    for n in (1, 2):
        bert_pack_inputs.get_concrete_function([spec] * n)
        bert_pack_inputs.get_concrete_function([spec] * n, length)
    return bert_pack_inputs


register_format(CheckpointFormat(
    "tfhub", detect=lambda path: tfhub_dir(path) is not None,
    read=read_tfhub_saved_model, write=write_tfhub_saved_model, looks_inside=True,
    vocab=tfhub_vocab, holds=f"a TF Hub encoder's {SAVED_MODEL_NAME}"))
