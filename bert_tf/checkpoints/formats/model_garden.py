"""TensorFlow Model Garden's TF2 checkpoints (tf-models-official, `official/nlp`):
object-based `tf.train.Checkpoint` files of
  - its `BertEncoder` (a functional Keras model, so its variables are named by position:
    `layer_with_weights-N`) or `BertEncoderV2` (named attributes: `_embedding_layer`,
    `_transformer_layers/N`, ...), under the key `encoder` or the older `model`, with
    google's `bert_config.json` beside, as Model Garden's TF2 tarballs and
    `tf2_bert_encoder_checkpoint_converter.py` write them;
  - its `BertPretrainerV2`: as that converter writes it (checkpoint items `encoder`,
    `masked_lm`), or as its trainer leaves it in a model_dir (`ckpt-N` under `model/`:
    `encoder_network`, `masked_lm`, `classification_heads`; optimizer beside; the config
    only in params.yaml).

The weights map one to one onto google's names; the attention kernels are stored per head
(`[H, heads, H/heads]`, output `[heads, H/heads, H]`) and are reshaped. Optimizer slots
and step counters are dropped. The masked LM's table is the encoder's word table.

The next-sentence head: Model Garden's pretrainer puts a `ClassificationHead` (dense +
tanh on [CLS], then a [H, 2] projection) beside the encoder and leaves the encoder's own
pooler untrained. When there is exactly one two-class head, its dense layer is read as
BERT's pooler (google's pooler feeds NSP the same way) and the encoder's pooler is dropped,
as Model Garden's `export_tfhub --copy_pooler_dense_to_encoder` does; the load says so.

Model Garden computes "gelu" as the tanh approximation (`official.modeling.activations.
gelu`, its BertEncoder's default and its masked LM's), whatever bert_config.json says
("gelu" there, which google's first release and HF read as the exact erf form): reading
carries that into the config (`hidden_act="gelu_tanh"`) and says so in one line, so the
model computes what Model Garden computes.

Configs: bert_config.json, or Model Garden's YAML (an experiment's params.yaml, an encoder
config `type: bert` + its block), beside the checkpoint or named by bert_config_file.
"""

import glob
import os
import re

from bert_tf.checkpoints.bundle import check_bundle, read_failure
from bert_tf.checkpoints.formats.core import (
    GOOGLE_CONFIG_NAME, HF_CONFIG_NAME, VOCAB_NAME, Checkpoint, CheckpointFormat,
    config_beside, copy_vocab, find_file, google_variables, logger, merge_heads,
    register_format, split_model, tf_checkpoint_prefix)
from bert_tf.base.config import GELU_TANH, BertConfig

_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
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


# The places an encoder sits: tf.train.Checkpoint(encoder=...) or (model=...); a
# BertPretrainerV2 saved by the trainer (model=) or with its checkpoint_items.
_ENCODER_ROOTS = ("encoder/", "model/", "model/encoder_network/")
_ENCODER_AT = re.compile(r"^(.*?)(?:layer_with_weights-\d+|_transformer_layers/\d+)/"
                         r"_attention_layer/_query_dense/kernel$")
# BertPretrainerV2's masked-LM layer -> google's name.
_MASKED_LM = {
    "dense/kernel": "cls/predictions/transform/dense/kernel",
    "dense/bias": "cls/predictions/transform/dense/bias",
    "layer_norm/gamma": "cls/predictions/transform/LayerNorm/gamma",
    "layer_norm/beta": "cls/predictions/transform/LayerNorm/beta",
    "output_bias.Sbias": "cls/predictions/output_bias",
    "embedding_table": "bert/embeddings/word_embeddings",  # tied to the encoder's
}
_HEAD = re.compile(r"^(?:model/)?classification_heads/(\d+)/(dense|out_proj)/(kernel|bias)$")


def _short_names(names):
    """The variable names without TensorFlow's `/.ATTRIBUTES/VARIABLE_VALUE`, leaving out
    the object graph, counters and optimizer state."""
    return {n[:-len(_SUFFIX)]: n for n in names
            if n.endswith(_SUFFIX) and "/.OPTIMIZER_SLOT/" not in n
            and not n.startswith(("optimizer/", "global_step/", "save_counter/"))}


def _root(names):
    """Where the encoder's variables sit ("encoder/", "model/", "model/encoder_network/"),
    if they are laid out as Model Garden's BertEncoder or BertEncoderV2 lay them out."""
    for short in _short_names(names):
        found = _ENCODER_AT.match(short)
        if found and found.group(1) in _ENCODER_ROOTS:
            return found.group(1)
    return None


def model_garden_prefix(path):
    """The checkpoint prefix `path` names when it holds a Model Garden encoder or
    pretrainer, else None. TensorFlow is imported only when `path` names a TF checkpoint."""
    prefix = tf_checkpoint_prefix(path)
    if prefix is None:
        return None
    try:
        names = _variable_names(prefix)
    except Exception:  # noqa: BLE001  (unreadable: not this format's to claim)
        return None
    return prefix if "_CHECKPOINTABLE_OBJECT_GRAPH" in names and _root(names) else None


def _google_name(name, layers):
    """google's name for a Model Garden variable name below the encoder's root
    ("_pooler_layer/kernel", "layer_with_weights-4/_output_dense/bias", ...), or None."""
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


def _head_names(shorts, hidden):
    """google's names for the pretrainer's heads among `shorts` ({short: shape}): the
    masked LM, and the next-sentence head when there is exactly one two-class head (its
    dense layer is BERT's pooler: module docstring)."""
    names = {}
    for short in shorts:
        for root in ("", "model/"):
            rest = short[len(root):] if short.startswith(root + "masked_lm/") else None
            if rest is not None and rest[len("masked_lm/"):] in _MASKED_LM:
                names[short] = _MASKED_LM[rest[len("masked_lm/"):]]
    heads = {}
    for short in shorts:
        found = _HEAD.match(short)
        if found:
            heads.setdefault(found.group(1), {})[f"{found.group(2)}/{found.group(3)}"] = short
        elif short.startswith("next_sentence..pooler_dense/"):  # a checkpoint item's
            # name ("." escaped as "..")
            heads.setdefault("next_sentence", {})["dense/" + short.split("/", 1)[1]] = short
    if len(heads) == 2 and "next_sentence" in heads:  # the same head, saved at two names
        heads = {"0": {**heads.pop("next_sentence"), **next(iter(heads.values()))}}
    if len(heads) == 1:
        (head,) = heads.values()
        out = head.get("out_proj/kernel")
        if out is None or shorts[out] == [hidden, 2]:
            for part, short in head.items():
                layer, weight = part.split("/")
                names[short] = (f"bert/pooler/dense/{weight}" if layer == "dense" else
                                "cls/seq_relationship/output_" +
                                ("weights" if weight == "kernel" else "bias"))
    return names


def read_model_garden_config(path):
    """A BertConfig from a Model Garden YAML: an experiment's params.yaml (`task: model:
    encoder:`), a pretrainer or encoder config (`encoder:` / `type: bert`), or the bert
    block itself. Its "gelu" is the tanh form (module docstring)."""
    import yaml
    try:
        with open(path, encoding="utf-8") as f:
            values = yaml.safe_load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: config file not found") from None
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    model = values.get("task", {}).get("model", {}) if isinstance(values, dict) else {}
    block = model.get("encoder", values.get("encoder", values)) \
        if isinstance(values, dict) else None
    if isinstance(block, dict) and "type" in block:
        if block["type"] not in ("bert", "bert_v2"):
            raise ValueError(f"{path}: encoder type {block['type']!r} is not BERT "
                             f"(expected type: bert or bert_v2)")
        block = block.get(block["type"]) or {}
    if not isinstance(block, dict) or "hidden_size" not in block:
        raise ValueError(f"{path}: no BERT encoder config (expected task.model.encoder."
                         f"bert, encoder.bert or a bert block with hidden_size)")
    if block.get("embedding_size") not in (None, block["hidden_size"]):
        raise ValueError(f"{path}: embedding_size {block['embedding_size']} differs from "
                         f"hidden_size {block['hidden_size']}; this BERT has no projection")
    if block.get("norm_first"):
        raise ValueError(f"{path}: norm_first: true (pre-LayerNorm) is not BERT's layout")
    act = block.get("hidden_activation", "gelu")
    if model.get("mlm_activation", act) != act:
        raise ValueError(f"{path}: mlm_activation {model['mlm_activation']!r} differs from "
                         f"hidden_activation {act!r}; the masked-LM transform uses the "
                         f"encoder's")
    defaults = {"vocab_size": 30522, "hidden_size": 768, "num_layers": 12,
                "num_attention_heads": 12, "intermediate_size": 3072, "dropout_rate": 0.1,
                "attention_dropout_rate": 0.1, "max_position_embeddings": 512,
                "type_vocab_size": 2, "initializer_range": 0.02}  # BertEncoderConfig's
    b = {**defaults, **{k: v for k, v in block.items() if v is not None}}
    return BertConfig.from_dict({
        "vocab_size": b["vocab_size"], "hidden_size": b["hidden_size"],
        "num_hidden_layers": b["num_layers"], "num_attention_heads": b["num_attention_heads"],
        "intermediate_size": b["intermediate_size"], "hidden_act": act,
        "hidden_dropout_prob": b["dropout_rate"],
        "attention_probs_dropout_prob": b["attention_dropout_rate"],
        "max_position_embeddings": b["max_position_embeddings"],
        "type_vocab_size": b["type_vocab_size"],
        "initializer_range": b["initializer_range"]}, source=path)


def _config(prefix, bert_config_file):
    """`bert_config_file` (JSON or YAML), else the bert_config.json, config.json,
    params.yaml or single *.yaml beside the checkpoint."""
    directory = os.path.dirname(prefix)
    given = bert_config_file
    if given is None and not any(os.path.isfile(os.path.join(directory, n))
                                 for n in (GOOGLE_CONFIG_NAME, HF_CONFIG_NAME)):
        yamls = sorted(glob.glob(os.path.join(glob.escape(directory), "*.y*ml")))
        params = os.path.join(directory, "params.yaml")
        given = params if params in yamls else (yamls[0] if len(yamls) == 1 else None)
    if given is not None and given.endswith((".yaml", ".yml")):
        return read_model_garden_config(given)
    return config_beside(prefix, given)


def read_model_garden_checkpoint(path, bert_config_file=None):
    """Reads a Model Garden TF2 encoder or pretrainer checkpoint (prefix, .index file or
    directory) into a Checkpoint under google's names. The config comes from
    `bert_config_file` or the config beside the checkpoint (`_config`); its "gelu" becomes
    "gelu_tanh" (module docstring)."""
    path = os.fspath(path)
    import tensorflow as tf
    prefix = model_garden_prefix(path)
    if prefix is None:
        raise FileNotFoundError(f"{path}: no Model Garden TF2 encoder checkpoint (expected "
                                f"tf.train.Checkpoint(encoder=BertEncoder) files)")
    directory = os.path.dirname(prefix)
    config = _config(prefix, bert_config_file)
    if config.hidden_act == "gelu":
        logger.warning("%s: Model Garden computes hidden_act 'gelu' as the tanh "
                       "approximation; the model uses gelu_tanh", prefix)
        config = config.replace(hidden_act="gelu_tanh")
    check_bundle(prefix, "checkpoint")
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    root = _root(list(shapes))
    shorts = {short: shapes[name] for short, name in _short_names(shapes).items()}
    heads = _head_names(shorts, config.hidden_size)
    head_pooler = any(g.startswith("bert/pooler/") for g in heads.values())
    tensors, ignored = {}, sorted(set(shapes) - set(_short_names(shapes).values()))
    dropped_pooler = False
    for short in sorted(shorts):
        name = short + _SUFFIX
        google = heads.get(short) or (_google_name(short[len(root):],
                                                   config.num_hidden_layers)
                                      if short.startswith(root) else None)
        if google and google.startswith("bert/pooler/") and short not in heads \
                and head_pooler:
            ignored.append(name)  # the encoder's own pooler, untrained beside NSP's
            dropped_pooler = True
            continue
        try:
            value = reader.get_tensor(name)
        except (tf.errors.OpError, IndexError) as e:
            raise ValueError(f"{prefix}: unreadable checkpoint, variable {name} "
                             f"({read_failure(e)}; a damaged .data file?)") from None
        if google is None:
            tensors[name] = value  # restore() reports it as unexpected
            continue
        value = merge_heads(google, value, config.hidden_size, config.num_attention_heads)
        if google == "cls/seq_relationship/output_weights":
            value = value.T  # out_proj [H, 2]; google's [2, H]
        if google in tensors and google == "bert/embeddings/word_embeddings":
            continue  # the tied table, saved under the encoder and the masked LM
        tensors[google] = value
    if dropped_pooler:
        logger.warning("%s: the next-sentence head's dense layer is read as BERT's pooler "
                       "(as Model Garden's export_tfhub --copy_pooler_dense_to_encoder "
                       "does); the encoder's own pooler, which pretraining leaves "
                       "untrained, is dropped", prefix)
    return Checkpoint(prefix, "model_garden", config, tensors,
                      find_file(directory, (VOCAB_NAME,)), ignored)


MODEL_GARDEN_CKPT_NAME = "bert_model.ckpt"


def write_model_garden_checkpoint(model, directory, vocab_file=None):
    """Writes `model` as Model Garden holds a BERT: `bert_model.ckpt` (object-based, the
    variables where its `BertEncoder` keeps them, under `encoder`; a pretrainer's heads
    also as `BertPretrainerV2` keeps them: its checkpoint items `masked_lm` and
    `next_sentence.pooler_dense`, and `model` with `encoder_network`, `masked_lm` and one
    next-sentence `classification_heads` entry), `bert_config.json` (+ `vocab.txt`).
    `tf.train.Checkpoint(encoder=BertEncoder(...))` or `(**pretrainer.checkpoint_items)` /
    `(model=pretrainer)` restore it. Model Garden computes "gelu" as the tanh form: an
    exact-GELU model is written with a warning (its numbers there differ slightly).
    Returns the checkpoint prefix."""
    import tensorflow as tf
    encoder, pretrainer = split_model(model)
    config = encoder.bert_config
    values = google_variables(model)
    hidden, heads = config.hidden_size, config.num_attention_heads
    size = hidden // heads

    def node(**children):
        return tf.train.Checkpoint(**children)

    def var(name, shape=None):
        value = values[name]
        return tf.Variable(value.reshape(shape) if shape else value, name=name)

    def dense(name, kernel_shape=None, bias_shape=None):
        return node(kernel=var(name + "/kernel", kernel_shape),
                    bias=var(name + "/bias", bias_shape))

    def norm(name):
        return node(gamma=var(name + "/gamma"), beta=var(name + "/beta"))

    word = var("bert/embeddings/word_embeddings")
    layers = {"layer_with_weights-0": node(embeddings=word),
              "layer_with_weights-1": node(embeddings=var(_V1_EMBEDDINGS[1])),
              "layer_with_weights-2": node(embeddings=var(_V1_EMBEDDINGS[2])),
              "layer_with_weights-3": norm(_V1_EMBEDDINGS[3])}
    for i in range(config.num_hidden_layers):
        p = f"bert/encoder/layer_{i}/"
        attention = node(**{f"_{part}_dense": dense(p + f"attention/self/{part}",
                                                    (hidden, heads, size), (heads, size))
                            for part in ("query", "key", "value")},
                         _output_dense=dense(p + "attention/output/dense",
                                             (heads, size, hidden)))
        layers[f"layer_with_weights-{4 + i}"] = node(
            _attention_layer=attention,
            _attention_layer_norm=norm(p + "attention/output/LayerNorm"),
            _intermediate_dense=dense(p + "intermediate/dense"),
            _output_dense=dense(p + "output/dense"),
            _output_layer_norm=norm(p + "output/LayerNorm"))
    pooler = dense("bert/pooler/dense")
    layers[f"layer_with_weights-{4 + config.num_hidden_layers}"] = pooler
    items = {"encoder": node(**layers)}
    if pretrainer is not None:
        masked_lm = node(dense=dense("cls/predictions/transform/dense"),
                         layer_norm=norm("cls/predictions/transform/LayerNorm"),
                         embedding_table=word,
                         **{"output_bias/bias": var("cls/predictions/output_bias")})
        items["masked_lm"] = masked_lm
        heads = []
        if "cls/seq_relationship/output_weights" in values:  # none: masked LM only
            out_proj = node(
                kernel=tf.Variable(values["cls/seq_relationship/output_weights"].T),
                bias=var("cls/seq_relationship/output_bias"))
            # The head's dense is BERT's pooler too, but a variable of its own in Model
            # Garden (the word table, by contrast, is one variable there).
            head_dense = dense("bert/pooler/dense")
            items["next_sentence.pooler_dense"] = head_dense
            heads.append(node(dense=head_dense, out_proj=out_proj))
        items["model"] = node(encoder_network=items["encoder"], masked_lm=masked_lm,
                              classification_heads=heads)
    if config.hidden_act == "gelu":
        logger.warning("%s: Model Garden computes 'gelu' as the tanh approximation; this "
                       "model uses the exact form, so its numbers there differ slightly",
                       directory)
    act = "gelu" if config.hidden_act in GELU_TANH else config.hidden_act
    os.makedirs(directory, exist_ok=True)
    prefix = os.path.join(directory, MODEL_GARDEN_CKPT_NAME)
    root = node(**items)
    root.save_counter.assign(1)  # as Checkpoint.save writes it, and restore expects it
    root.write(prefix)
    config.replace(hidden_act=act).to_json_file(os.path.join(directory, GOOGLE_CONFIG_NAME),
                                                "google")
    copy_vocab(vocab_file, directory)
    return prefix


register_format(CheckpointFormat(
    "model_garden", detect=lambda path: model_garden_prefix(path) is not None,
    read=read_model_garden_checkpoint, write=write_model_garden_checkpoint,
    looks_inside=True, holds="a Model Garden TF2 checkpoint (ckpt-N or bert_model.ckpt "
                             "with an encoder object)"))
