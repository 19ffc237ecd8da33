"""TensorFlow Model Garden's TF2 checkpoints (tf-models-official, `official/nlp`):
object-based `tf.train.Checkpoint(encoder=...)` files of its `BertEncoder` (a functional
Keras model, so its variables are named by position: `layer_with_weights-N`) or of
`BertEncoderV2` (named attributes: `_embedding_layer`, `_transformer_layers/N`, ...),
under the key `encoder` or the older `model`, with google's `bert_config.json` beside, as
Model Garden's TF2 tarballs and `tf2_bert_encoder_checkpoint_converter.py` write them.

The weights map one to one onto google's names; the attention kernels are stored per head
(`[H, heads, H/heads]`, output `[heads, H/heads, H]`) and are reshaped. Optimizer slots
and step counters are dropped.

Model Garden's BertEncoder computes its feed-forward GELU as the tanh approximation,
whatever bert_config.json says ("gelu" there, which google's first release and HF read as
the exact erf form): reading carries that into the config (`hidden_act="gelu_tanh"`) and
says so in one line, so the model computes what Model Garden computes.
"""

import os
import re

from bert_tf.checkpoint_formats.core import (
    VOCAB_NAME, Checkpoint, CheckpointFormat, config_beside, find_file,
    logger, register_format, tf_checkpoint_prefix)

_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
_ROOTS = ("encoder", "model")
# BertEncoderV2's attribute -> google's name.
_V2_EMBEDDINGS = {
    "_embedding_layer/embeddings": "bert/embeddings/word_embeddings",
    "_position_embedding_layer/embeddings": "bert/embeddings/position_embeddings",
    "_type_embedding_layer/embeddings": "bert/embeddings/token_type_embeddings",
    "_embedding_norm_layer/gamma": "bert/embeddings/LayerNorm/gamma",
    "_embedding_norm_layer/beta": "bert/embeddings/LayerNorm/beta",
    "_pooler_layer/kernel": "bert/pooler/dense/kernel",
    "_pooler_layer/bias": "bert/pooler/dense/bias",
}
# BertEncoder's (functional) layers with weights, in order: the first four, then the
# transformer layers, then the pooler.
_V1_EMBEDDINGS = ("bert/embeddings/word_embeddings", "bert/embeddings/position_embeddings",
                  "bert/embeddings/token_type_embeddings", "bert/embeddings/LayerNorm")
# A transformer layer's sub-layer -> google's name under bert/encoder/layer_N/.
_LAYER = {
    "_attention_layer/_query_dense": "attention/self/query",
    "_attention_layer/_key_dense": "attention/self/key",
    "_attention_layer/_value_dense": "attention/self/value",
    "_attention_layer/_output_dense": "attention/output/dense",
    "_attention_layer_norm": "attention/output/LayerNorm",
    "_intermediate_dense": "intermediate/dense",
    "_output_dense": "output/dense",
    "_output_layer_norm": "output/LayerNorm",
}


def _variable_names(prefix):
    import tensorflow as tf
    return [name for name, _ in tf.train.list_variables(prefix)]


def _root(names):
    """The key the encoder was saved under ("encoder" or "model"), if its variables are
    laid out as Model Garden's BertEncoder or BertEncoderV2 lay them out."""
    for root in _ROOTS:
        head = root + "/"
        if any(n.startswith(head + "layer_with_weights-0/embeddings" + _SUFFIX) or
               n.startswith(head + "_embedding_layer/embeddings" + _SUFFIX) for n in names):
            return root
    return None


def model_garden_prefix(path):
    """The checkpoint prefix `path` names when it holds a Model Garden encoder, else None.
    TensorFlow is imported only when `path` names a TF checkpoint at all."""
    prefix = tf_checkpoint_prefix(path)
    if prefix is None:
        return None
    try:
        names = _variable_names(prefix)
    except Exception:  # noqa: BLE001  (unreadable: not this format's to claim)
        return None
    return prefix if "_CHECKPOINTABLE_OBJECT_GRAPH" in names and _root(names) else None


def _google_name(name, layers):
    """google's name for a Model Garden variable name below the root ("_pooler_layer/
    kernel", "layer_with_weights-4/_output_dense/bias", ...), or None."""
    if name in _V2_EMBEDDINGS:
        return _V2_EMBEDDINGS[name]
    parts = name.split("/")
    positional = re.fullmatch(r"layer_with_weights-(\d+)", parts[0])
    if positional:
        index, rest = int(positional.group(1)), parts[1:]
        if index < 3:  # the three embedding tables
            return _V1_EMBEDDINGS[index] if rest == ["embeddings"] else None
        if index == 3:
            return f"{_V1_EMBEDDINGS[3]}/{rest[0]}" if rest in (["gamma"], ["beta"]) else None
        if index == len(_V1_EMBEDDINGS) + layers:
            return f"bert/pooler/dense/{rest[0]}" if rest in (["kernel"], ["bias"]) else None
        layer = index - len(_V1_EMBEDDINGS)
    elif parts[0] == "_transformer_layers" and len(parts) > 2 and parts[1].isdigit():
        layer, rest = int(parts[1]), parts[2:]
    else:
        return None
    sub = "/".join(rest[:-1])
    if sub not in _LAYER or not 0 <= layer < layers:
        return None
    return f"bert/encoder/layer_{layer}/{_LAYER[sub]}/{rest[-1]}"


def read_model_garden_checkpoint(path, bert_config_file=None):
    """Reads a Model Garden TF2 encoder checkpoint (prefix, .index file or directory) into
    a Checkpoint under google's names. The config comes from `bert_config_file` or a
    bert_config.json beside the checkpoint; its "gelu" becomes "gelu_tanh" (module
    docstring)."""
    path = os.fspath(path)
    import tensorflow as tf
    prefix = model_garden_prefix(path)
    if prefix is None:
        raise FileNotFoundError(f"{path}: no Model Garden TF2 encoder checkpoint (expected "
                                f"tf.train.Checkpoint(encoder=BertEncoder) files)")
    directory = os.path.dirname(prefix)
    config = config_beside(prefix, bert_config_file)
    if config.hidden_act == "gelu":
        logger.warning("%s: Model Garden computes hidden_act 'gelu' as the tanh "
                       "approximation; the model uses gelu_tanh", prefix)
        config = config.replace(hidden_act="gelu_tanh")
    reader = tf.train.load_checkpoint(prefix)
    root = _root(list(reader.get_variable_to_shape_map())) + "/"
    hidden, heads = config.hidden_size, config.num_attention_heads
    tensors, ignored = {}, []
    for name in sorted(reader.get_variable_to_shape_map()):
        short = name[len(root):-len(_SUFFIX)] \
            if name.startswith(root) and name.endswith(_SUFFIX) else None
        if short is None or "/.OPTIMIZER_SLOT/" in name:
            ignored.append(name)  # the object graph, step counters, optimizer state
            continue
        google = _google_name(short, config.num_hidden_layers)
        try:
            value = reader.get_tensor(name)
        except (tf.errors.OpError, IndexError) as e:
            raise ValueError(f"{prefix}: unreadable checkpoint, variable {name} "
                             f"({e.__class__.__name__}; a truncated or damaged .data "
                             f"file?)") from None
        if google is None:
            tensors[name] = value  # restore() reports it as unexpected
            continue
        if re.search(r"/self/(query|key|value)/", google):
            if value.shape == (hidden, heads, hidden // heads):
                value = value.reshape(hidden, hidden)
            elif value.shape == (heads, hidden // heads):
                value = value.reshape(hidden)
        elif "/attention/output/dense/kernel" in google and \
                value.shape == (heads, hidden // heads, hidden):
            value = value.reshape(hidden, hidden)
        tensors[google] = value
    return Checkpoint(prefix, "model_garden", config, tensors,
                      find_file(directory, (VOCAB_NAME,)), ignored)


register_format(CheckpointFormat(
    "model_garden", detect=lambda path: model_garden_prefix(path) is not None,
    read=read_model_garden_checkpoint, write=None, looks_inside=True))
