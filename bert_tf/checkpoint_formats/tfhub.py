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

from bert_tf.checkpoint_formats.core import (
    VOCAB_NAME, Checkpoint, CheckpointFormat, logger, register_format)
from bert_tf.config import BertConfig

SAVED_MODEL_NAME = "saved_model.pb"
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
    try:
        names = _saved_variables(path)
    except Exception:  # noqa: BLE001  (unreadable: not this format's to claim)
        return None
    return path if any(_google_name(n) == "bert/encoder/layer_0/attention/self/query/kernel"
                       for n in names.values()) else None


def _saved_variables(path):
    """{node id: the variable's name} for every variable in saved_model.pb's object graph."""
    from tensorflow.core.protobuf import saved_model_pb2
    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(path, SAVED_MODEL_NAME), "rb") as f:
        saved.ParseFromString(f.read())
    return {i: node.variable.name
            for i, node in enumerate(saved.meta_graphs[0].object_graph_def.nodes)
            if node.WhichOneof("kind") == "variable"}


def _variable_names(path, reader):
    """{checkpoint key: the variable's name}: the variables checkpoint numbers its objects
    as saved_model.pb does."""
    from tensorflow.core.protobuf import trackable_object_graph_pb2
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    names = {}
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


def read_tfhub_saved_model(path, bert_config_file=None):
    """Reads a TF Hub BERT encoder SavedModel (module docstring) into a Checkpoint under
    google's names; its config is read off the tensors (`bert_config_file` overrides)."""
    path = os.fspath(path)
    import tensorflow as tf
    if tfhub_dir(path) is None:
        raise FileNotFoundError(f"{path}: no TF Hub BERT SavedModel (expected saved_model.pb "
                                f"and variables/ of an encoder)")
    try:
        reader = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))
        names = _variable_names(path, reader)
    except (tf.errors.OpError, IndexError, ValueError) as e:
        raise ValueError(f"{path}: unreadable SavedModel variables ({e.__class__.__name__}; "
                         f"a truncated or damaged variables/ folder?)") from None
    tensors, ignored, do_lower_case = {}, [], None
    for key, name in sorted(names.items()):
        google = _google_name(name)
        try:
            value = reader.get_tensor(key)
        except (tf.errors.OpError, IndexError) as e:
            raise ValueError(f"{path}: unreadable SavedModel variables, {name} "
                             f"({e.__class__.__name__}; a truncated or damaged "
                             f"variables.data file?)") from None
        if google is None:
            if key.startswith("do_lower_case/"):
                do_lower_case = bool(value)
            ignored.append(name)
            continue
        tensors[google] = value
    config = _config(tensors, path, bert_config_file)
    hidden, heads = config.hidden_size, config.num_attention_heads
    for name, value in tensors.items():
        if re.search(r"/self/(query|key|value)/", name):
            tensors[name] = value.reshape(hidden) if value.ndim == 2 else \
                value.reshape(hidden, hidden)
        elif name.endswith("/attention/output/dense/kernel") and value.ndim == 3:
            tensors[name] = value.reshape(hidden, hidden)
    vocab = os.path.join(path, "assets", VOCAB_NAME)
    preprocessing = _preprocessing_beside(path)
    if not os.path.isfile(vocab):
        vocab = os.path.join(preprocessing, "assets", VOCAB_NAME) if preprocessing else None
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


register_format(CheckpointFormat(
    "tfhub", detect=lambda path: tfhub_dir(path) is not None,
    read=read_tfhub_saved_model, write=None, looks_inside=True))
