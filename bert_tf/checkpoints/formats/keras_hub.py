"""keras-hub's BERT to our models and back: `BertBackbone` <-> BertEncoder, `BertMaskedLM`
<-> BertPretrainer (masked-LM head), `BertTextClassifier` <-> BertClassifier, and preset
directories (`config.json` + `model.weights.h5` + tokenizer assets, what
`save_to_preset` writes and `from_preset` reads).

Tensors pass through HF's names (the core's spelling for HF files), so a keras-hub
model is read into a `Checkpoint` and assigned by the same strict, all-or-nothing
`restore` (core.py) as every other format.

    keras-hub variable                            HF name (no `bert.` prefix)
    token_embedding/embeddings                    embeddings.word_embeddings.weight
    transformer_layer_N/.../query/kernel [H, A, H/A]   encoder.layer.N.attention.self.query.weight [H, H]^T
    transformer_layer_N/.../attention_output/kernel [A, H/A, H]   ...attention.output.dense.weight^T
    mlm_head/intermediate_dense, output_bias      cls.predictions.transform.dense, cls.predictions.bias

Two numerical differences are keras-hub's own, not the conversion's:
- `BertBackbone` always computes the tanh approximation of GELU, and google's and HF's
  BERT checkpoints were trained with the exact one. A model read from keras-hub gets
  `hidden_act="gelu_tanh"`, so it computes what keras-hub computes, unless the preset
  holds our `bert_config.json` (written beside every preset we write), which says what the
  weights were trained with: HF -> ours -> keras-hub -> ours then gives back the same
  model. An exact-GELU model computes the approximation inside keras-hub (MiniLM's hidden
  states move by up to 0.05; a warning says so).
- `BertMaskedLM`'s head uses exact GELU and LayerNorm epsilon 1e-5 (ours: the encoder's
  activation and 1e-12), so its masked-LM logits differ a little from ours.
keras-hub has no next-sentence head: it is dropped on the way out and initialised (and
listed as such) on the way in.
"""

import json
import logging
import os

import numpy as np

from bert_tf.checkpoints.formats.core import (
    GOOGLE_CONFIG_NAME, Checkpoint, CheckpointFormat, hf_state_dict, register_format,
    restore, split_model)
from bert_tf.base.config import BertConfig

logger = logging.getLogger(__name__)

PRESET_CONFIG = "config.json"
PRESET_WEIGHTS = "model.weights.h5"
TASK_CONFIG = "task.json"
TASK_WEIGHTS = "task.weights.h5"
OUR_CONFIG = GOOGLE_CONFIG_NAME  # what our writers put beside every model


def _keras_hub():
    import keras_hub  # imported on use: it is large, and only this module needs it
    return keras_hub


def _tensor_map(backbone, masked_lm_head=None):
    """[(HF name, keras-hub variable, to_hf, from_hf)]: how each tensor is laid out."""
    hidden = backbone.hidden_dim

    def same(x):
        return x

    def transpose(x):
        return x.T

    def fused_in(x):   # [H, A, H/A] <-> [H_out, H_in]
        return x.reshape(hidden, -1).T

    def fused_out(x):  # [A, H/A, H] <-> [H_out, H_in]
        return x.reshape(-1, hidden).T

    def flat(x):
        return x.reshape(-1)

    def entries():
        yield "embeddings.word_embeddings.weight", backbone.token_embedding.embeddings, \
            same, same
        yield "embeddings.position_embeddings.weight", \
            backbone.position_embedding.position_embeddings, same, same
        yield "embeddings.token_type_embeddings.weight", \
            backbone.segment_embedding.embeddings, same, same
        norm = backbone.embeddings_layer_norm
        yield "embeddings.LayerNorm.weight", norm.gamma, same, same
        yield "embeddings.LayerNorm.bias", norm.beta, same, same
        for i, block in enumerate(backbone.transformer_layers):
            p = f"encoder.layer.{i}."
            attention = block._self_attention_layer
            for name, dense in (("query", attention.query_dense),
                                ("key", attention.key_dense),
                                ("value", attention.value_dense)):
                kernel_shape = tuple(dense.kernel.shape)
                yield p + f"attention.self.{name}.weight", dense.kernel, fused_in, \
                    lambda x, s=kernel_shape: x.T.reshape(s)
                bias_shape = tuple(dense.bias.shape)
                yield p + f"attention.self.{name}.bias", dense.bias, flat, \
                    lambda x, s=bias_shape: x.reshape(s)
            out = attention.output_dense
            out_shape = tuple(out.kernel.shape)
            yield p + "attention.output.dense.weight", out.kernel, fused_out, \
                lambda x, s=out_shape: x.T.reshape(s)
            yield p + "attention.output.dense.bias", out.bias, same, same
            for hf, layer in (("attention.output.LayerNorm", block._self_attention_layer_norm),
                              ("output.LayerNorm", block._feedforward_layer_norm)):
                yield p + hf + ".weight", layer.gamma, same, same
                yield p + hf + ".bias", layer.beta, same, same
            for hf, dense in (("intermediate.dense", block._feedforward_intermediate_dense),
                              ("output.dense", block._feedforward_output_dense)):
                yield p + hf + ".weight", dense.kernel, transpose, transpose
                yield p + hf + ".bias", dense.bias, same, same
        pooler = backbone.get_layer("pooled_dense")
        yield "pooler.dense.weight", pooler.kernel, transpose, transpose
        yield "pooler.dense.bias", pooler.bias, same, same
        if masked_lm_head is not None:
            head = masked_lm_head
            yield "cls.predictions.transform.dense.weight", head._intermediate_dense.kernel, \
                transpose, transpose
            yield "cls.predictions.transform.dense.bias", head._intermediate_dense.bias, \
                same, same
            yield "cls.predictions.transform.LayerNorm.weight", \
                head._intermediate_layer_norm.gamma, same, same
            yield "cls.predictions.transform.LayerNorm.bias", \
                head._intermediate_layer_norm.beta, same, same
            yield "cls.predictions.bias", head._bias, same, same

    return list(entries())


def config_from_backbone(backbone):
    """Our BertConfig for a keras-hub BertBackbone (tanh GELU: what it computes)."""
    return BertConfig(
        vocab_size=backbone.vocabulary_size, hidden_size=backbone.hidden_dim,
        num_hidden_layers=backbone.num_layers, num_attention_heads=backbone.num_heads,
        intermediate_size=backbone.intermediate_dim, hidden_act="gelu_tanh",
        hidden_dropout_prob=backbone.dropout, attention_probs_dropout_prob=backbone.dropout,
        max_position_embeddings=backbone.max_sequence_length,
        type_vocab_size=backbone.num_segments)


def _parts(model):
    """(backbone, masked-LM head or None, classifier dense or None) of a keras-hub model."""
    keras_hub = _keras_hub()
    if isinstance(model, keras_hub.models.BertBackbone):
        return model, None, None
    if isinstance(model, keras_hub.models.BertMaskedLM):
        return model.backbone, model.masked_lm_head, None
    if isinstance(model, keras_hub.models.BertTextClassifier):
        return model.backbone, None, model.output_dense
    raise ValueError(f"expected a keras-hub BertBackbone, BertMaskedLM or "
                     f"BertTextClassifier, got {type(model).__name__}")


def read_keras_hub_model(model, path="<keras-hub model>"):
    """A keras-hub BERT model -> Checkpoint (HF names, format "keras_hub")."""
    backbone, head, _ = _parts(model)
    tensors = {name: to_hf(np.asarray(variable.numpy()))
               for name, variable, to_hf, _ in _tensor_map(backbone, head)}
    return Checkpoint(path, "keras_hub", config_from_backbone(backbone), tensors)


def is_preset(path):
    """True for a keras-hub preset directory (config.json naming a keras-hub class and
    model.weights.h5)."""
    config = os.path.join(path, PRESET_CONFIG)
    if not (os.path.isdir(path) and os.path.isfile(config) and
            os.path.isfile(os.path.join(path, PRESET_WEIGHTS))):
        return False
    try:
        with open(config, encoding="utf-8") as f:
            return "keras_hub" in str(json.load(f).get("registered_name", ""))
    except (OSError, ValueError, AttributeError):
        return False


def read_keras_hub_preset(path, bert_config_file=None):
    """A keras-hub preset directory -> Checkpoint. With a masked-LM task saved in it
    (task.json), its head comes too; the vocabulary is the tokenizer's asset; our
    bert_config.json, when there, gives the activation the weights were trained with.
    `bert_config_file` is not used: the preset holds its own config."""
    keras_hub = _keras_hub()
    if not is_preset(path):
        raise FileNotFoundError(f"{path}: not a keras-hub preset directory (expected "
                                f"{PRESET_CONFIG} naming a keras-hub class and "
                                f"{PRESET_WEIGHTS})")
    from bert_tf.base.files import close_hdf5_files
    from bert_tf.models.run_dir import check_weights_file
    task = None
    task_file = os.path.join(path, TASK_CONFIG)
    if os.path.isfile(task_file):
        with open(task_file, encoding="utf-8") as f:
            task = json.load(f).get("class_name")
    weights = [PRESET_WEIGHTS] + ([TASK_WEIGHTS] if task == "BertMaskedLM" else [])
    for name in weights:       # h5py's errors name no file
        if os.path.isfile(os.path.join(path, name)):
            check_weights_file(os.path.join(path, name))
    try:
        if task == "BertMaskedLM":
            model = keras_hub.models.BertMaskedLM.from_preset(path, preprocessor=None)
        else:
            model = keras_hub.models.BertBackbone.from_preset(path)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        close_hdf5_files(path)
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ValueError(f"{path}: unreadable keras-hub preset ({reason}; weights of "
                         f"another model, or damaged?)") from None
    checkpoint = read_keras_hub_model(model, path)
    ours = os.path.join(path, OUR_CONFIG)
    if os.path.isfile(ours):
        checkpoint.config = BertConfig.from_json_file(ours)
    checkpoint.vocab_file = preset_vocab(path)
    return checkpoint


def preset_vocab(path):
    """The vocabulary of a keras-hub preset directory: its tokenizer's asset, or None."""
    vocab = os.path.join(path, "assets", "tokenizer", "vocabulary.txt")
    return vocab if os.path.isfile(vocab) else None


def _assign(backbone, head, tensors):
    for name, variable, _, from_hf in _tensor_map(backbone, head):
        value = from_hf(np.asarray(tensors[name]))
        if tuple(value.shape) != tuple(variable.shape):
            raise ValueError(f"{name}: shape {value.shape} does not fit keras-hub's "
                             f"{variable.path} {tuple(variable.shape)}")
        variable.assign(value.astype(variable.dtype))


def to_keras_hub(model):
    """Our BertEncoder / BertPretrainer / BertClassifier -> keras-hub BertBackbone /
    BertMaskedLM (no next-sentence head) / BertTextClassifier, same weights."""
    from bert_tf.models.task_models import BertClassifier
    keras_hub = _keras_hub()
    classifier = model if isinstance(model, BertClassifier) else None
    encoder = classifier.encoder if classifier is not None else split_model(model)[0]
    pretrainer = None if classifier is not None else split_model(model)[1]
    config = encoder.bert_config
    if config.hidden_act not in ("gelu_tanh", "gelu_new", "gelu_pytorch_tanh"):
        logger.warning("keras-hub's BertBackbone computes the tanh GELU; this model's "
                       "hidden_act is %r, so its outputs there differ slightly from ours",
                       config.hidden_act)
    if config.attention_probs_dropout_prob != config.hidden_dropout_prob:
        logger.warning("keras-hub has one dropout rate; using hidden_dropout_prob %s",
                       config.hidden_dropout_prob)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config.vocab_size, num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads, hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size, dropout=config.hidden_dropout_prob,
        max_sequence_length=config.max_position_embeddings,
        num_segments=config.type_vocab_size)
    tensors = {k[len("bert."):] if k.startswith("bert.") else k: v
               for k, v in hf_state_dict(pretrainer or encoder).items()}
    if pretrainer is not None:
        result = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
        _assign(backbone, result.masked_lm_head, tensors)
        if pretrainer.nsp_head is not None:
            logger.warning("keras-hub's BertMaskedLM has no next-sentence head: this "
                           "model's (cls/seq_relationship) is left out")
        return result
    _assign(backbone, None, tensors)
    if classifier is None:
        return backbone
    result = keras_hub.models.BertTextClassifier(
        backbone, num_classes=classifier.num_classes, preprocessor=None,
        dropout=classifier.encoder.bert_config.hidden_dropout_prob
        if classifier.dropout is None else classifier.dropout)
    ours = classifier.get_layer("classifier")
    result.output_dense.kernel.assign(ours.kernel.numpy())
    result.output_dense.bias.assign(ours.bias.numpy())
    return result


def from_keras_hub(model):
    """keras-hub BertBackbone / BertMaskedLM / BertTextClassifier -> our BertEncoder /
    BertPretrainer (the masked LM alone: keras-hub has no next-sentence head, and none is
    made up) / BertClassifier, through the strict `restore`."""
    from bert_tf.models.encoder import BertEncoder
    from bert_tf.models.pretrainer import BertPretrainer
    from bert_tf.models.task_models import BertClassifier
    checkpoint = read_keras_hub_model(model)
    _, head, dense = _parts(model)
    if head is not None:
        ours = BertPretrainer.from_config_object(checkpoint.config, next_sentence=False)
        restore(ours, checkpoint)
        return ours
    encoder = BertEncoder.from_config_object(checkpoint.config)
    restore(encoder, checkpoint)
    if dense is None:
        return encoder
    classifier = BertClassifier(encoder, num_classes=model.num_classes,
                                dropout=model.dropout)
    layer = classifier.get_layer("classifier")
    for ours, theirs in ((layer.kernel, dense.kernel), (layer.bias, dense.bias)):
        if tuple(ours.shape) != tuple(theirs.shape):
            raise ValueError(f"classifier {ours.path}: shape {tuple(theirs.shape)} does not "
                             f"fit {tuple(ours.shape)}")
        ours.assign(theirs.numpy())
    return classifier


def lowercase_vocab(vocab_file):
    """True when lower-casing changes no ordinary token of `vocab_file` (an uncased
    vocabulary; "ℝ" is upper case but has no lower case, and bert-base-uncased has it):
    what the keras-hub tokenizer's `lowercase` is set to."""
    from bert_tf.text.text_rules import load_vocab
    return all(t == t.lower() for t in load_vocab(vocab_file) if not t.startswith("["))


def write_keras_hub_preset(model, directory, vocab_file=None):
    """Writes `model` (BertEncoder or BertPretrainer) as a keras-hub preset directory: the
    backbone (and, for a pretrainer, the BertMaskedLM task) with `save_to_preset`, our
    bert_config.json, and the BertTokenizer's assets from `vocab_file` (lower-casing read
    from the vocabulary)."""
    keras_hub = _keras_hub()
    converted = to_keras_hub(model)
    os.makedirs(directory, exist_ok=True)
    converted.save_to_preset(directory)
    split_model(model)[0].bert_config.to_json_file(os.path.join(directory, OUR_CONFIG),
                                                    "google")
    if vocab_file:
        keras_hub.models.BertTokenizer(
            vocabulary=vocab_file, lowercase=lowercase_vocab(vocab_file)
        ).save_to_preset(directory)
    return directory


register_format(CheckpointFormat("keras_hub", detect=is_preset, read=read_keras_hub_preset,
                                 write=write_keras_hub_preset, hf_names=True,
                                 vocab=preset_vocab,
                                 holds=f"a keras-hub preset's {PRESET_CONFIG} + "
                                       f"{PRESET_WEIGHTS}"))
