"""The checkpoint core: the one name table, the strict all-or-nothing `restore`, and the
registry of formats. Every format module sits above this one and registers itself here.

Every format is mapped through one table, `_slots(model)`: for each tensor google's
`modeling.py` / `run_pretraining.py` create, the Keras variable (or the slice of one) that
holds it. google's names are the lingua franca:

    bert/embeddings/word_embeddings                     [vocab, H]
    bert/encoder/layer_N/attention/self/query/kernel    [H, H]   (1/3 of our qkv [H, 3H])
    bert/pooler/dense/kernel                            [H, H]
    cls/predictions/output_bias                         [vocab]  (logits tied to word table)
    cls/seq_relationship/output_weights                 [2, H]   (our NSP kernel is [H, 2])

HF names are derived from google's by `_hf_name` (kernels transposed: torch Linear weights
are [out, in]). Loading is strict, nanoGPT style: every mapped shape is checked and every
missing, unexpected or mis-shaped tensor is collected into ONE `CheckpointMismatchError`
before anything is assigned, so a model is never half loaded.

A format is a `CheckpointFormat` record (name, how to recognise a path, how to read, how
to write) passed to `register_format`; `formats()` lists them in registration order, the
order of detection and of convert_checkpoint's choices.
"""

import dataclasses
import glob
import logging
import os
import re
import shutil
from typing import Callable, Optional

import numpy as np

from bert_tf.base.config import BertConfig
from bert_tf.checkpoints.bundle import latest_prefix

logger = logging.getLogger(__name__)

# Config and vocabulary file names every format's directory may hold: each reader takes
# the other layout's config too.
GOOGLE_CONFIG_NAME = "bert_config.json"
HF_CONFIG_NAME = "config.json"
VOCAB_NAME = "vocab.txt"

_MAX_LISTED = 25  # names listed per category in an error before "... and N more"


# -- the format registry ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class CheckpointFormat:
    """One checkpoint format.

    name: what `--input_format` / `--output_format` and `Checkpoint.format` call it.
    detect(path) -> bool: whether `path` holds a checkpoint of this format.
    read(path, bert_config_file) -> Checkpoint.
    write(model, path, vocab_file=None) -> the path written; None for a format that is
        read only (it is then no `--output_format` choice).
    hf_names: its tensors carry HF names (see `_hf_name`) rather than google's.
    file_suffix: an output path ending in it is one file, not a directory (".keras").
    looks_inside: its detection reads the files rather than going by their names; such
        formats are tried first (Model Garden's TF2 files carry google's file name).
    vocab(path) -> the vocabulary file a checkpoint of this format keeps, or None; None
        (the default) for the vocab.txt beside the checkpoint, google's and HF's place.
    holds: what a path of this format is, in words (the error for a path that is none
        of the formats lists every format's).
    """
    name: str
    detect: Callable
    read: Callable
    write: Optional[Callable]
    hf_names: bool = False
    file_suffix: Optional[str] = None
    looks_inside: bool = False
    vocab: Optional[Callable] = None
    holds: str = ""


_REGISTRY = {}


def register_format(checkpoint_format):
    """Adds `checkpoint_format` (a CheckpointFormat); a name is registered once."""
    if checkpoint_format.name in _REGISTRY:
        raise ValueError(f"checkpoint format {checkpoint_format.name!r} is already "
                         f"registered")
    _REGISTRY[checkpoint_format.name] = checkpoint_format
    return checkpoint_format


def unregister_format(name):
    """Removes the format called `name` (a format added for a while, as tests do)."""
    del _REGISTRY[name]


def formats():
    """The registered CheckpointFormat records, in registration order."""
    return tuple(_REGISTRY.values())


def format_names():
    """The registered formats' names, in registration order."""
    return tuple(_REGISTRY)


def writable_format_names():
    """The registered formats that can be written, in registration order."""
    return tuple(name for name, f in _REGISTRY.items() if f.write is not None)


def get_format(name):
    """The CheckpointFormat called `name`, or None."""
    return _REGISTRY.get(name)


def _uses_hf_names(format_name):
    checkpoint_format = _REGISTRY.get(format_name)
    return checkpoint_format is not None and checkpoint_format.hf_names


# -- what reading gives -----------------------------------------------------------------

class CheckpointMismatchError(ValueError):
    """A checkpoint and a model disagree. Lists every difference at once."""

    def __init__(self, source, missing=(), unexpected=(), mismatched=(), conflicts=()):
        self.source = source
        self.missing = list(missing)
        self.unexpected = list(unexpected)
        self.mismatched = list(mismatched)  # (name, expected shape, checkpoint shape)
        self.conflicts = list(conflicts)    # free-text inconsistencies inside the checkpoint
        parts = []
        if self.missing:
            parts.append(f"{len(self.missing)} missing: {_listing(self.missing)}")
        if self.unexpected:
            parts.append(f"{len(self.unexpected)} unexpected: {_listing(self.unexpected)}")
        if self.mismatched:
            shapes = [f"{n} (model {list(e)}, checkpoint {list(g)})"
                      for n, e, g in self.mismatched]
            parts.append(f"{len(shapes)} shape mismatches: {_listing(shapes)}")
        if self.conflicts:
            parts.append(f"{len(self.conflicts)} conflicts: {_listing(self.conflicts)}")
        super().__init__(f"{source} does not match the model: " + "; ".join(parts))


def _listing(items):
    shown = ", ".join(items[:_MAX_LISTED])
    more = len(items) - _MAX_LISTED
    return shown + (f", ... and {more} more" if more > 0 else "")


@dataclasses.dataclass
class LoadReport:
    """What `restore` did. `missing_heads`: head variables the checkpoint lacked (kept at
    their initialisation; only with allow_missing_heads). `unused_heads`: head variables
    the checkpoint had but an encoder-only model has no place for. `ignored`: training
    state and buffers dropped on reading, plus names matched by `ignore`."""
    source: str
    format: str
    loaded: int
    missing_heads: list = dataclasses.field(default_factory=list)
    unused_heads: list = dataclasses.field(default_factory=list)
    ignored: list = dataclasses.field(default_factory=list)

    def __str__(self):
        text = f"loaded {self.loaded} tensors from {self.format} checkpoint {self.source}"
        if self.missing_heads:
            text += (f"; {len(self.missing_heads)} head variables not in the checkpoint "
                     f"kept their initialisation: {_listing(self.missing_heads)}")
        if self.unused_heads:
            text += f"; {len(self.unused_heads)} head tensors not used (encoder only)"
        if self.ignored:
            text += f"; {len(self.ignored)} training-state tensors ignored"
        return text


@dataclasses.dataclass
class Checkpoint:
    """A checkpoint read into memory.

    `tensors` keeps the format's own naming and layout: google names for "google" and
    "keras", HF names without the `bert.` prefix for "hf" and "keras_hub" (see `_hf_name`):
    the format's `hf_names` says which.
    """
    path: str
    format: str
    config: BertConfig
    tensors: dict
    vocab_file: str = None
    ignored: list = dataclasses.field(default_factory=list)
    # Whether its tokenizer lower-cases, where the format records it (TF Hub's).
    do_lower_case: Optional[bool] = None

    @property
    def has_heads(self):
        """True when the checkpoint holds pretraining head tensors."""
        head = "cls." if _uses_hf_names(self.format) else "cls/"
        return any(name.startswith(head) for name in self.tensors)


# -- the one mapping table --------------------------------------------------------------

@dataclasses.dataclass
class _Slot:
    """One google tensor and where it lives in the Keras model.

    transpose: the google tensor is the variable transposed (NSP: [2, H] vs [H, 2]).
    part: (index, count) when the google tensor is one of `count` equal slices of the
    variable's last axis (query/key/value in our fused qkv).
    """
    name: str
    variable: object
    transpose: bool = False
    part: tuple = None
    head: bool = False

    @property
    def shape(self):
        shape = list(self.variable.shape)
        if self.part:
            shape[-1] //= self.part[1]
        return tuple(reversed(shape)) if self.transpose else tuple(shape)

    def read(self):
        value = np.asarray(self.variable.numpy())
        if self.part:
            value = np.split(value, self.part[1], axis=-1)[self.part[0]]
        return np.ascontiguousarray(value.T if self.transpose else value)


def split_model(model):
    """-> (encoder, pretrainer or None). Accepts BertEncoder or BertPretrainer."""
    from bert_tf.models.encoder import BertEncoder
    from bert_tf.models.pretrainer import BertPretrainer
    if isinstance(model, BertPretrainer):
        return model.encoder, model
    if isinstance(model, BertEncoder):
        return model, None
    raise TypeError(f"expected a BertEncoder or BertPretrainer, got {type(model).__name__}")


def _slots(model):
    """google's tensors for `model`, in google's order, each tied to a Keras variable."""
    encoder, pretrainer = split_model(model)
    slots = []

    def dense(name, layer, head=False):
        slots.append(_Slot(f"{name}/kernel", layer.kernel, head=head))
        slots.append(_Slot(f"{name}/bias", layer.bias, head=head))

    def layer_norm(name, layer, head=False):
        slots.append(_Slot(f"{name}/gamma", layer.gamma, head=head))
        slots.append(_Slot(f"{name}/beta", layer.beta, head=head))

    e = encoder.embeddings
    slots.append(_Slot("bert/embeddings/word_embeddings", e.word_embeddings))
    slots.append(_Slot("bert/embeddings/token_type_embeddings", e.token_type_embeddings))
    slots.append(_Slot("bert/embeddings/position_embeddings", e.position_embeddings))
    layer_norm("bert/embeddings/LayerNorm", e.layer_norm)
    for i, block in enumerate(encoder.blocks):
        prefix = f"bert/encoder/layer_{i}"
        # qkv kernel [H, 3H] = query | key | value along the output axis, matching the
        # block's reshape to [batch, seq, 3, heads, size].
        for j, which in enumerate(("query", "key", "value")):
            for kind in ("kernel", "bias"):
                slots.append(_Slot(f"{prefix}/attention/self/{which}/{kind}",
                                   getattr(block.qkv, kind), part=(j, 3)))
        dense(f"{prefix}/attention/output/dense", block.attention_output)
        layer_norm(f"{prefix}/attention/output/LayerNorm", block.attention_layer_norm)
        dense(f"{prefix}/intermediate/dense", block.intermediate)
        dense(f"{prefix}/output/dense", block.output_dense)
        layer_norm(f"{prefix}/output/LayerNorm", block.output_layer_norm)
    dense("bert/pooler/dense", encoder.pooler)
    if pretrainer is not None:
        mlm, nsp = pretrainer.mlm_head, pretrainer.nsp_head
        dense("cls/predictions/transform/dense", mlm.transform, head=True)
        layer_norm("cls/predictions/transform/LayerNorm", mlm.layer_norm, head=True)
        slots.append(_Slot("cls/predictions/output_bias", mlm.output_bias, head=True))
        if nsp is not None:     # none without next_sentence=False (masked LM only)
            slots.append(_Slot("cls/seq_relationship/output_weights", nsp.kernel,
                               transpose=True, head=True))
            slots.append(_Slot("cls/seq_relationship/output_bias", nsp.bias, head=True))

    # A variable added to the model later must not be silently skipped by converters.
    mapped = {id(s.variable) for s in slots}
    unmapped = [w.path for w in model.weights if id(w) not in mapped]
    if unmapped:
        raise RuntimeError(f"checkpoint mapping does not cover model variables {unmapped}; "
                           "update bert_tf/checkpoints/formats/core.py:_slots")
    return slots


# The next-sentence head's name under cls/ (google) or cls. (HF).
NSP_HEAD_NAME = "seq_relationship"


def has_next_sentence_head(checkpoint):
    """Whether `checkpoint` (a Checkpoint) holds a next-sentence head, or, for a
    checkpoint with a masked-LM head, holds none (a masked-LM-only pretrainer's);
    an encoder-only checkpoint counts as having both heads missing (True)."""
    names = checkpoint.tensors
    if any(n.startswith(("cls/" + NSP_HEAD_NAME, "cls." + NSP_HEAD_NAME)) for n in names):
        return True
    return not any(n.startswith(("cls/predictions", "cls.predictions")) for n in names)


_HF_HEAD_NAMES = {
    "cls/predictions/output_bias": "cls.predictions.bias",
    # Both [2, H]: torch Linear stores [out, in], as google's matmul(transpose_b) does.
    "cls/seq_relationship/output_weights": "cls.seq_relationship.weight",
    "cls/seq_relationship/output_bias": "cls.seq_relationship.bias",
}


def _hf_name(google_name):
    """google name -> (HF name without the `bert.` prefix, transpose?)."""
    if google_name in _HF_HEAD_NAMES:
        return _HF_HEAD_NAMES[google_name], False
    parts = google_name.split("/")
    if parts[0] == "bert":
        parts = parts[1:]
    parts = [p.replace("layer_", "layer.") if re.fullmatch(r"layer_\d+", p) else p
             for p in parts]
    last = parts[-1]
    if last.endswith("_embeddings"):  # the three embedding tables: same layout
        return ".".join(parts + ["weight"]), False
    renamed = {"kernel": "weight", "bias": "bias", "gamma": "weight", "beta": "bias"}[last]
    return ".".join(parts[:-1] + [renamed]), last == "kernel"


def google_variables(model):
    """{google name: np.ndarray in google's layout} for a BertEncoder or BertPretrainer."""
    return {slot.name: slot.read() for slot in _slots(model)}


def hf_state_dict(model, prefix=None):
    """{HF name: np.ndarray} as `transformers` names them. `prefix` defaults to "bert." for a
    pretrainer (BertForPreTraining's layout) and "" for an encoder (BertModel's)."""
    _, pretrainer = split_model(model)
    if prefix is None:
        prefix = "bert." if pretrainer is not None else ""
    state = {}
    for slot in _slots(model):
        name, transpose = _hf_name(slot.name)
        value = slot.read()
        state[(name if slot.head else prefix + name)] = np.ascontiguousarray(
            value.T if transpose else value)
    return state


# -- strict assignment ------------------------------------------------------------------

def restore(model, checkpoint, allow_missing_heads=False, ignore=()):
    """Assigns `checkpoint` (a `Checkpoint`) to `model`'s variables, all or nothing.

    allow_missing_heads: a pretrainer may be initialised from an encoder-only checkpoint;
        the heads keep their initialisation and are listed in the report.
    ignore: regular expressions of extra checkpoint names to skip (for example a
        fine-tuning classifier's `output_weights`).
    Raises CheckpointMismatchError listing every missing, unexpected and mis-shaped tensor.
    (`bert_tf.checkpoints.restore` also takes a path and reads it first.)
    """
    _, pretrainer = split_model(model)
    hf_names = _uses_hf_names(checkpoint.format)
    naming = _hf_name if hf_names else (lambda n: (n, False))
    patterns = [re.compile(p) for p in ignore]
    report = LoadReport(checkpoint.path, checkpoint.format, 0, ignored=list(checkpoint.ignored))

    slots = _slots(model)
    missing, mismatched, values = [], [], []
    used = set()
    for slot in slots:
        name, transpose = naming(slot.name)
        if name not in checkpoint.tensors:
            if slot.head and allow_missing_heads:
                report.missing_heads.append(name)
            else:
                missing.append(name)
            continue
        used.add(name)
        value = checkpoint.tensors[name]
        expected = tuple(reversed(slot.shape)) if transpose else slot.shape
        if tuple(value.shape) != expected:
            mismatched.append((name, expected, tuple(value.shape)))
            continue
        value = value.T if transpose else value  # -> google's layout
        values.append((slot, value.T if slot.transpose else value))  # -> the variable's

    unexpected = []
    head_prefix = "cls." if hf_names else "cls/"
    for name in checkpoint.tensors:
        if name in used:
            continue
        if any(p.search(name) for p in patterns):
            report.ignored.append(name)
        elif pretrainer is None and name.startswith(head_prefix):
            # Encoder from a pretraining checkpoint: the usual fine-tuning start.
            report.unused_heads.append(name)
        elif pretrainer is not None and pretrainer.nsp_head is None and \
                name.startswith(head_prefix + NSP_HEAD_NAME):
            # Masked-LM-only pretraining from a checkpoint with a next-sentence head.
            report.unused_heads.append(name)
        else:
            unexpected.append(name)
    if missing or unexpected or mismatched:
        raise CheckpointMismatchError(checkpoint.path, missing, unexpected, mismatched)

    # Gather the slices of each variable, then assign each variable once.
    per_variable = {}
    for slot, value in values:
        per_variable.setdefault(id(slot.variable), (slot.variable, []))[1].append((slot, value))
    for variable, parts in per_variable.values():
        if parts[0][0].part is None:
            value = parts[0][1]
        else:  # every slice is present: a missing one was raised above
            value = np.concatenate([v for _, v in sorted(parts, key=lambda p: p[0].part[0])],
                                   axis=-1)
        variable.assign(np.asarray(value, dtype=variable.dtype))
        report.loaded += len(parts)
    if report.missing_heads:
        logger.warning("%s", report)
    else:
        logger.info("%s", report)
    return report


# -- files every format's directory shares ----------------------------------------------

def tf_checkpoint_prefix(path, file_name="bert_model.ckpt"):
    """The TensorFlow checkpoint prefix `path` names (a prefix, an .index/.data file, or a
    directory holding `file_name`, a `checkpoint` state file or a single .index), or None;
    ValueError when the state file names a checkpoint whose index is gone
    (bundle.latest_prefix). TensorFlow is not imported, so HF and Keras checkpoints load
    on Keras' other backends without it."""
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, file_name + ".index")):
            return os.path.join(path, file_name)
        latest = latest_prefix(path)
        if latest:
            return latest
        indexes = glob.glob(os.path.join(glob.escape(path), "*.index"))
        return indexes[0][:-len(".index")] if len(indexes) == 1 else None
    for suffix in (".index", ".meta"):
        if path.endswith(suffix):
            path = path[:-len(suffix)]
    path = re.sub(r"\.data-\d+-of-\d+$", "", path)
    return path if os.path.exists(path + ".index") else None


def config_beside(prefix, bert_config_file=None):
    """The BertConfig of the TF checkpoint at `prefix`: `bert_config_file`, else the
    bert_config.json (or config.json) beside it."""
    config_file = find_file(os.path.dirname(prefix), (GOOGLE_CONFIG_NAME, HF_CONFIG_NAME),
                            bert_config_file, "bert_config_file")
    if config_file is None:
        raise FileNotFoundError(f"{prefix}: no {GOOGLE_CONFIG_NAME} beside the checkpoint; "
                                "pass bert_config_file")
    return BertConfig.from_json_file(config_file)


def find_file(directory, names, given=None, what="file"):
    """`given` when set (checked to exist), else the first of `names` in `directory`, else
    None."""
    if given:
        if not os.path.isfile(given):
            raise FileNotFoundError(f"{given}: {what} not found")
        return given
    for name in names:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate):
            return candidate
    return None


def merge_heads(name, value, hidden, heads):
    """A tensor under google's `name` in google's layout, from Keras' per-head layout
    (tf_keras EinsumDense, as Model Garden and TF Hub store attention): query/key/value
    kernels [H, heads, H/heads] and biases [heads, H/heads], the output kernel
    [heads, H/heads, H]. Other tensors are returned as they are."""
    size = hidden // heads
    if re.search(r"/self/(query|key|value)/", name):
        if value.shape == (hidden, heads, size):
            return value.reshape(hidden, hidden)
        if value.shape == (heads, size):
            return value.reshape(hidden)
    elif name.endswith("/attention/output/dense/kernel") and value.shape == (heads, size, hidden):
        return value.reshape(hidden, hidden)
    return value


def copy_vocab(vocab_file, directory):
    """Copies `vocab_file`, when given, into `directory` as vocab.txt."""
    if vocab_file:
        if not os.path.isfile(vocab_file):
            raise FileNotFoundError(f"{vocab_file}: vocab file not found")
        shutil.copyfile(vocab_file, os.path.join(directory, VOCAB_NAME))
