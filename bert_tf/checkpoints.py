"""Checkpoint import and export: google TF1 checkpoints, HF safetensors, Keras files.

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

Readers: google TF1 (`tf.train.load_checkpoint`; optimizer slots and step counters are
dropped), HF (`model.safetensors`, sharded `model.safetensors.index.json`, and
`pytorch_model.bin` when torch is importable), Keras `.keras` files of our models.
Writers: google TF1 (`bert_model.ckpt` + `bert_config.json` + `vocab.txt`), HF
(`model.safetensors` + `config.json` + `vocab.txt`), Keras `.keras`.

Why one file: every reader and writer goes through the one name table `_slots` and the
one strict `restore`; split by format, each half would need the other's private mapping,
and a reader of the table would have to open three files to see one tensor's names.
"""

import dataclasses
import glob
import json
import logging
import os
import re
import shutil
import struct
import tempfile
import zipfile

import numpy as np

from bert_tf.config import BertConfig
from bert_tf.files import usual_mode
from bert_tf.registry import resolve_checkpoint

logger = logging.getLogger(__name__)

FORMATS = ("google", "hf", "keras", "keras_hub")
# Formats whose tensors carry HF names (keras-hub models are read through them).
_HF_NAMED = ("hf", "keras_hub")
GOOGLE_CKPT_NAME = "bert_model.ckpt"
GOOGLE_CONFIG_NAME = "bert_config.json"
HF_CONFIG_NAME = "config.json"
HF_WEIGHTS_NAME = "model.safetensors"
HF_INDEX_NAME = "model.safetensors.index.json"
HF_TORCH_NAME = "pytorch_model.bin"
KERAS_MODEL_NAME = "model.keras"
VOCAB_NAME = "vocab.txt"

# Top-level TF1 variables that are training state, not model weights: Adam's beta powers
# (tf.train.AdamOptimizer), NVIDIA's dynamic loss scale. Optimizer *slots* (adam_m, Adam_1,
# ...) are recognised structurally instead: see `_is_optimizer_slot`.
_GOOGLE_TRAINING_STATE = re.compile(
    r"^(global_step|beta[12]_power|current_loss_scale|good_steps|loss_scale.*)$")
# Non-persistent buffers older HF checkpoints saved; they are recomputed, not learned.
_HF_BUFFERS = re.compile(r"(^|\.)(position_ids|token_type_ids)$")

_MAX_LISTED = 25  # names listed per category in an error before "... and N more"


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
    "keras", HF names without the `bert.` prefix for "hf" (see `_hf_name`).
    """
    path: str
    format: str
    config: BertConfig
    tensors: dict
    vocab_file: str = None
    ignored: list = dataclasses.field(default_factory=list)

    @property
    def has_heads(self):
        """True when the checkpoint holds pretraining head tensors."""
        head = "cls." if self.format in _HF_NAMED else "cls/"
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


def _split_model(model):
    """-> (encoder, pretrainer or None). Accepts BertEncoder or BertPretrainer."""
    from bert_tf.encoder import BertEncoder
    from bert_tf.pretraining.model import BertPretrainer
    if isinstance(model, BertPretrainer):
        return model.encoder, model
    if isinstance(model, BertEncoder):
        return model, None
    raise TypeError(f"expected a BertEncoder or BertPretrainer, got {type(model).__name__}")


def _slots(model):
    """google's tensors for `model`, in google's order, each tied to a Keras variable."""
    encoder, pretrainer = _split_model(model)
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
        slots.append(_Slot("cls/seq_relationship/output_weights", nsp.kernel,
                           transpose=True, head=True))
        slots.append(_Slot("cls/seq_relationship/output_bias", nsp.bias, head=True))

    # A variable added to the model later must not be silently skipped by converters.
    mapped = {id(s.variable) for s in slots}
    unmapped = [w.path for w in model.weights if id(w) not in mapped]
    if unmapped:
        raise RuntimeError(f"checkpoint mapping does not cover model variables {unmapped}; "
                           "update bert_tf/checkpoints.py:_slots")
    return slots


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
    _, pretrainer = _split_model(model)
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
    """Assigns `checkpoint` (a `Checkpoint` or a path) to `model`'s variables, all or nothing.

    allow_missing_heads: a pretrainer may be initialised from an encoder-only checkpoint;
        the heads keep their initialisation and are listed in the report.
    ignore: regular expressions of extra checkpoint names to skip (for example a
        fine-tuning classifier's `output_weights`).
    Raises CheckpointMismatchError listing every missing, unexpected and mis-shaped tensor.
    """
    if not isinstance(checkpoint, Checkpoint):
        checkpoint = read_checkpoint(checkpoint)
    _, pretrainer = _split_model(model)
    naming = _hf_name if checkpoint.format in _HF_NAMED else (lambda n: (n, False))
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
    head_prefix = "cls." if checkpoint.format in _HF_NAMED else "cls/"
    for name in checkpoint.tensors:
        if name in used:
            continue
        if any(p.search(name) for p in patterns):
            report.ignored.append(name)
        elif pretrainer is None and name.startswith(head_prefix):
            # Encoder from a pretraining checkpoint: the usual fine-tuning start.
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


# -- reading ----------------------------------------------------------------------------

def detect_format(path):
    """"google", "hf" or "keras" for a checkpoint path; ValueError when it is none of them."""
    path = os.fspath(path)
    if os.path.isdir(path):
        if _google_prefix(path):
            return "google"
        if any(os.path.exists(os.path.join(path, n))
               for n in (HF_WEIGHTS_NAME, HF_INDEX_NAME, HF_TORCH_NAME)):
            return "hf"
        if _keras_file(path):
            return "keras"
        from bert_tf.keras_hub_format import is_preset
        if is_preset(path):
            return "keras_hub"
        raise ValueError(f"{path}: no checkpoint found (expected {GOOGLE_CKPT_NAME}.index, "
                         f"{HF_WEIGHTS_NAME}, {HF_TORCH_NAME}, {KERAS_MODEL_NAME} or a keras-hub "
                         f"preset's config.json + model.weights.h5)")
    if path.endswith(".keras") and os.path.isfile(path):
        return "keras"
    if path.endswith((".safetensors", ".bin")) and os.path.isfile(path):
        return "hf"
    if _google_prefix(path):
        return "google"
    if not os.path.exists(path) and not glob.glob(glob.escape(path) + ".*"):
        raise FileNotFoundError(f"{path}: no such file or directory")
    raise ValueError(f"{path}: not a google TF1 checkpoint, HF directory or .keras file")


def _google_prefix(path):
    """The TF1 checkpoint prefix `path` names (a prefix, an .index/.data file, or a
    directory holding bert_model.ckpt or a `checkpoint` state file), or None.
    TensorFlow is imported only for a `checkpoint` state file, so HF and Keras checkpoints
    load on Keras' other backends without it."""
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, GOOGLE_CKPT_NAME + ".index")):
            return os.path.join(path, GOOGLE_CKPT_NAME)
        if os.path.exists(os.path.join(path, "checkpoint")):
            import tensorflow as tf
            latest = tf.train.latest_checkpoint(path)
            if latest:
                return latest
        indexes = glob.glob(os.path.join(glob.escape(path), "*.index"))
        return indexes[0][:-len(".index")] if len(indexes) == 1 else None
    for suffix in (".index", ".meta"):
        if path.endswith(suffix):
            path = path[:-len(suffix)]
    path = re.sub(r"\.data-\d+-of-\d+$", "", path)
    return path if os.path.exists(path + ".index") else None


def _keras_file(path):
    if os.path.isfile(os.path.join(path, KERAS_MODEL_NAME)):
        return os.path.join(path, KERAS_MODEL_NAME)
    found = glob.glob(os.path.join(glob.escape(path), "*.keras"))
    return found[0] if len(found) == 1 else None


def _find_file(directory, names, given=None, what="file"):
    if given:
        if not os.path.isfile(given):
            raise FileNotFoundError(f"{given}: {what} not found")
        return given
    for name in names:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate):
            return candidate
    return None


def vocab_beside(checkpoint, vocab_file=None, flag="--init_checkpoint"):
    """`vocab_file` when given, else the vocab.txt in the checkpoint's directory (google's
    and HF's layouts both keep it there); one clear error naming `flag` when neither.
    `checkpoint` may be a released checkpoint's name (bert_tf/registry.py)."""
    if vocab_file:
        return vocab_file
    checkpoint = resolve_checkpoint(checkpoint)
    base = checkpoint if checkpoint and os.path.isdir(checkpoint) else \
        os.path.dirname(checkpoint or "")
    path = os.path.join(base, "vocab.txt")
    if checkpoint and not os.path.isfile(path) and not os.path.exists(checkpoint) and \
            not glob.glob(glob.escape(checkpoint) + ".*"):
        raise FileNotFoundError(f"{flag} {checkpoint}: no such file, directory or "
                                f"checkpoint prefix")
    if not checkpoint or not os.path.isfile(path):
        raise ValueError(f"{flag} {checkpoint or '(not given)'}: no vocab.txt beside the "
                         f"checkpoint; pass --vocab_file")
    return path


def _is_optimizer_slot(name, names):
    """TF1 optimizers name a slot `<variable>/<slot>` (adam_m, Adam_1, Momentum, lamb_v...):
    a name that extends another checkpoint variable's name is that variable's slot."""
    parts = name.split("/")
    return any("/".join(parts[:k]) in names for k in range(1, len(parts)))


def read_google_checkpoint(path, bert_config_file=None):
    """Reads a google TF1 checkpoint (prefix, .index file or directory) into a Checkpoint.
    Optimizer slots and step counters are dropped; the config comes from
    `bert_config_file` or a bert_config.json beside the checkpoint."""
    path = os.fspath(path)
    import tensorflow as tf
    prefix = _google_prefix(path)
    if prefix is None:
        raise FileNotFoundError(f"{path}: no TF1 checkpoint (expected {path}.index or a "
                                f"directory with {GOOGLE_CKPT_NAME}.index)")
    directory = os.path.dirname(prefix)
    config_file = _find_file(directory, (GOOGLE_CONFIG_NAME, HF_CONFIG_NAME),
                             bert_config_file, "bert_config_file")
    if config_file is None:
        raise FileNotFoundError(f"{prefix}: no {GOOGLE_CONFIG_NAME} beside the checkpoint; "
                                "pass bert_config_file")
    config = BertConfig.from_json_file(config_file)
    try:
        reader = tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as e:
        raise ValueError(f"{prefix}: unreadable TF1 checkpoint ({e.__class__.__name__})") from None
    names = set(reader.get_variable_to_shape_map())
    tensors, ignored = {}, []
    for name in sorted(names):
        if _GOOGLE_TRAINING_STATE.match(name) or _is_optimizer_slot(name, names) \
                or name == "_CHECKPOINTABLE_OBJECT_GRAPH":
            ignored.append(name)
            continue
        try:
            tensors[name] = reader.get_tensor(name)
        except (tf.errors.OpError, IndexError) as e:
            # A cut .data file reads short (IndexError), a flipped byte fails its checksum.
            reason = "cut short" if isinstance(e, IndexError) else \
                "checksum mismatch" if "Checksum does not match" in str(e) else \
                (str(e).splitlines() or [e.__class__.__name__])[0]
            raise ValueError(f"{prefix}: unreadable TF1 checkpoint, variable {name} "
                             f"({reason}; a truncated or damaged .data file?)") from None
    return Checkpoint(prefix, "google", config, tensors,
                      _find_file(directory, (VOCAB_NAME,)), ignored)


def _load_hf_tensors(directory, weights_file=None):
    """{name: np.ndarray} from safetensors (single or sharded) or pytorch_model.bin."""
    from safetensors import safe_open

    from safetensors import SafetensorError

    def read_safetensors(file):
        out = {}
        try:
            try:
                with safe_open(file, framework="np") as f:
                    for key in f.keys():
                        out[key] = _widened(f.get_tensor(key))
            except (TypeError, ValueError):
                # safetensors versions whose numpy reader refuses bfloat16: read the
                # file's own layout.
                out = _read_safetensors_widened(file)
        except (SafetensorError, struct.error, UnicodeDecodeError, KeyError, TypeError,
                ValueError) as e:
            # A truncated or damaged file: one line naming it, not the reader's traceback.
            if str(e).startswith(file):
                raise
            raise ValueError(f"{file}: not a readable safetensors file (truncated or "
                             f"damaged: {' '.join(str(e).split())[:200]})") from None
        return out

    if weights_file is None:
        for name in (HF_WEIGHTS_NAME, HF_INDEX_NAME, HF_TORCH_NAME):
            if os.path.isfile(os.path.join(directory, name)):
                weights_file = os.path.join(directory, name)
                break
        else:
            raise FileNotFoundError(f"{directory}: no {HF_WEIGHTS_NAME}, {HF_INDEX_NAME} or "
                                    f"{HF_TORCH_NAME}")
    if weights_file.endswith(".index.json"):
        with open(weights_file, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        tensors = {}
        for shard in shards:
            tensors.update(read_safetensors(os.path.join(directory, shard)))
        return tensors
    if weights_file.endswith(".safetensors"):
        return read_safetensors(weights_file)
    try:
        import torch
    except ImportError:
        raise ImportError(f"{weights_file}: reading pytorch_model.bin needs torch; "
                          "convert it to model.safetensors first") from None
    state = torch.load(weights_file, map_location="cpu", weights_only=True)
    return {k: _torch_to_numpy(v, torch) for k, v in state.items()}


_SAFETENSORS_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
                       "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}


def _widened(array):
    """bfloat16 / float16 arrays as float32 (numpy computes in neither)."""
    return array.astype(np.float32) if array.dtype.kind == "V" or array.dtype.name in (
        "bfloat16", "float16") else array


def _read_safetensors_widened(file):
    """{name: np.ndarray} of a safetensors file read from its layout (8-byte little-endian
    header length, JSON header of dtype/shape/data_offsets, then the data), with BF16 and
    F16 widened to float32: numpy cannot hold bfloat16."""
    with open(file, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw, dtype = data[begin:end], entry["dtype"]
        if dtype == "BF16":
            # bfloat16 is the top half of a float32.
            array = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif dtype in _SAFETENSORS_DTYPES:
            array = np.frombuffer(raw, _SAFETENSORS_DTYPES[dtype]).astype(
                np.float32 if dtype == "F16" else _SAFETENSORS_DTYPES[dtype])
        else:
            raise ValueError(f"{file}: tensor {name} has dtype {dtype}, which this reader "
                             f"does not take")
        out[name] = array.reshape(entry["shape"])
    return out


def _torch_to_numpy(tensor, torch):
    if tensor.dtype in (torch.bfloat16, torch.float16):
        tensor = tensor.float()
    return tensor.detach().cpu().numpy()


def _normalize_hf(tensors, source):
    """HF names -> one canonical spelling: no `bert.` prefix, LayerNorm weight/bias (old
    checkpoints said gamma/beta), tied decoder tensors checked and dropped.
    Returns (tensors, ignored names, conflicts)."""
    out, ignored, conflicts = {}, [], []
    for key, value in tensors.items():
        if _HF_BUFFERS.search(key):
            ignored.append(key)
            continue
        name = key[len("bert."):] if key.startswith("bert.") else key
        name = re.sub(r"\.LayerNorm\.gamma$", ".LayerNorm.weight", name)
        name = re.sub(r"\.LayerNorm\.beta$", ".LayerNorm.bias", name)
        if name in out:
            conflicts.append(f"{key} given twice (with and without the 'bert.' prefix)")
            continue
        out[name] = value
    # The MLM decoder is tied: its weight is the word table and its bias the output bias.
    decoder_bias = out.pop("cls.predictions.decoder.bias", None)
    if decoder_bias is not None:
        if "cls.predictions.bias" not in out:
            out["cls.predictions.bias"] = decoder_bias
        elif not np.array_equal(decoder_bias, out["cls.predictions.bias"]):
            conflicts.append("cls.predictions.decoder.bias differs from cls.predictions.bias")
    decoder = out.pop("cls.predictions.decoder.weight", None)
    if decoder is not None:
        table = out.get("embeddings.word_embeddings.weight")
        if table is not None and not np.array_equal(decoder, table):
            conflicts.append("cls.predictions.decoder.weight differs from the word embeddings "
                             "(this model ties them)")
    if conflicts:
        raise CheckpointMismatchError(source, conflicts=conflicts)
    return out, ignored


def read_hf_checkpoint(path, bert_config_file=None):
    """Reads an HF BERT directory (or its weights file) into a Checkpoint. Keys may carry
    the `bert.` prefix or not; heads are `cls.predictions.*` and `cls.seq_relationship.*`."""
    path = os.fspath(path)
    if os.path.isdir(path):
        directory, weights_file = path, None
    elif os.path.isfile(path):
        directory, weights_file = os.path.dirname(path) or ".", path
    else:
        raise FileNotFoundError(f"{path}: no such file or directory")
    config_file = _find_file(directory, (HF_CONFIG_NAME, GOOGLE_CONFIG_NAME),
                             bert_config_file, "bert_config_file")
    if config_file is None:
        raise FileNotFoundError(f"{directory}: no {HF_CONFIG_NAME}; pass bert_config_file")
    config = BertConfig.from_json_file(config_file)
    tensors, ignored = _normalize_hf(_load_hf_tensors(directory, weights_file), path)
    return Checkpoint(path, "hf", config, tensors, _find_file(directory, (VOCAB_NAME,)),
                      ignored)


def read_keras_model(path):
    """Reads one of our `.keras` files (BertEncoder or BertPretrainer) into a Checkpoint."""
    path = os.fspath(path)
    import keras

    import bert_tf.encoder  # noqa: F401  registers the classes with Keras
    import bert_tf.pretraining.model  # noqa: F401
    file = _keras_file(path) if os.path.isdir(path) else path
    if not file or not os.path.isfile(file):
        raise FileNotFoundError(f"{path}: no .keras file")
    if not zipfile.is_zipfile(file):
        raise ValueError(f"{file}: not a readable .keras file (a .keras file is a zip "
                         f"archive; this one is cut short or damaged)")
    try:
        with zipfile.ZipFile(file) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        damaged = str(e)
    if damaged:
        raise ValueError(f"{file}: not a readable .keras file (damaged member {damaged})")
    model = keras.saving.load_model(file, compile=False)
    encoder, _ = _split_model(model)
    return Checkpoint(file, "keras", encoder.bert_config, google_variables(model),
                      _find_file(os.path.dirname(file) or ".", (VOCAB_NAME,)))


def read_checkpoint(path, input_format="auto", bert_config_file=None):
    """Reads any supported checkpoint into a Checkpoint (config + tensors). `path` may
    also be a released checkpoint's name, downloaded once (bert_tf/registry.py)."""
    path = resolve_checkpoint(path)
    if input_format == "auto":
        input_format = detect_format(path)
    if input_format == "google":
        return read_google_checkpoint(path, bert_config_file)
    if input_format == "hf":
        return read_hf_checkpoint(path, bert_config_file)
    if input_format == "keras":
        return read_keras_model(path)
    if input_format == "keras_hub":
        from bert_tf.keras_hub_format import read_keras_hub_preset
        return read_keras_hub_preset(path)
    raise ValueError(f"input_format must be 'auto' or one of {FORMATS}, got {input_format!r}")


def load_pretrainer(path, input_format="auto", bert_config_file=None,
                    allow_missing_heads=False, ignore=(), dtype=None):
    """A BertPretrainer initialised from any checkpoint the readers understand.

    An encoder-only checkpoint raises unless allow_missing_heads=True (the heads then keep
    their initialisation; a warning lists them).

    Args:
        path: google TF1 (bert_model.ckpt prefix or its directory), HF directory
            (model.safetensors / pytorch_model.bin + config.json) or a .keras file; or a
            released checkpoint's name ("uncased_L-12_H-768_A-12", "bert-base-uncased",
            ...), downloaded once into the cache (bert_tf/registry.py).
        input_format: "auto", "google", "hf" or "keras".
        bert_config_file: the config when it is not beside the weights.
        allow_missing_heads, ignore: see above; tensor names to leave unrestored.
        dtype: a Keras dtype policy for the model.

    Example:
        >>> model = bert_tf.load_pretrainer("uncased_L-12_H-768_A-12")  # doctest: +SKIP
    """
    from bert_tf.pretraining.model import BertPretrainer
    checkpoint = read_checkpoint(path, input_format, bert_config_file)
    model = BertPretrainer.from_config_object(checkpoint.config, dtype=dtype)
    restore(model, checkpoint, allow_missing_heads=allow_missing_heads, ignore=ignore)
    return model


def load_encoder(path, input_format="auto", bert_config_file=None, ignore=(), dtype=None):
    """A BertEncoder initialised from any checkpoint; head tensors, if any, are unused.

    Args: as `load_pretrainer` (path, input_format, bert_config_file, ignore, dtype).

    Example:
        >>> encoder = bert_tf.load_encoder("bert-hf", dtype="mixed_bfloat16")  # doctest: +SKIP
    """
    from bert_tf.encoder import BertEncoder
    checkpoint = read_checkpoint(path, input_format, bert_config_file)
    model = BertEncoder.from_config_object(checkpoint.config, dtype=dtype)
    restore(model, checkpoint, ignore=ignore)
    return model


# -- writing ----------------------------------------------------------------------------

def _copy_vocab(vocab_file, directory):
    if vocab_file:
        if not os.path.isfile(vocab_file):
            raise FileNotFoundError(f"{vocab_file}: vocab file not found")
        shutil.copyfile(vocab_file, os.path.join(directory, VOCAB_NAME))


def write_google_checkpoint(model, directory, vocab_file=None):
    """Writes `bert_model.ckpt` (TF1 index + data, google's variable names), and
    `bert_config.json` (+ `vocab.txt`) into `directory`. Returns the checkpoint prefix.

    SaveV2 is the op `tf.compat.v1.train.Saver` runs, so google's `init_from_checkpoint`
    and `Saver.restore` read the result; no meta graph is written (init_from_checkpoint
    does not need one)."""
    import tensorflow as tf
    encoder, _ = _split_model(model)
    os.makedirs(directory, exist_ok=True)
    prefix = os.path.join(directory, GOOGLE_CKPT_NAME)
    variables = google_variables(model)
    names = list(variables)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(variables[n]) for n in names])
    # The state file lets tf.train.latest_checkpoint(directory) find the prefix.
    with open(os.path.join(directory, "checkpoint"), "w", encoding="utf-8") as f:
        f.write(f'model_checkpoint_path: "{GOOGLE_CKPT_NAME}"\n'
                f'all_model_checkpoint_paths: "{GOOGLE_CKPT_NAME}"\n')
    encoder.bert_config.to_json_file(os.path.join(directory, GOOGLE_CONFIG_NAME), "google")
    _copy_vocab(vocab_file, directory)
    return prefix


def hf_config_dict(config, with_heads):
    """HF config.json contents for `config`. HF's activation table has no "gelu_tanh": its
    tanh GELU is called "gelu_new"."""
    values = config.to_hf_dict()
    values["architectures"] = ["BertForPreTraining" if with_heads else "BertModel"]
    if values["hidden_act"] == "gelu_tanh":
        values["hidden_act"] = "gelu_new"
    return values


def write_hf_checkpoint(model, directory, vocab_file=None):
    """Writes `model.safetensors` + `config.json` (+ `vocab.txt`) into `directory`.

    A pretrainer is written as `BertForPreTraining` saves itself (`bert.` prefix, tied
    decoder tensors omitted), an encoder as `BertModel` does (no prefix)."""
    from safetensors.numpy import save_file
    encoder, pretrainer = _split_model(model)
    os.makedirs(directory, exist_ok=True)
    # transformers refuses safetensors files without the "pt" format tag.
    weights = os.path.join(directory, HF_WEIGHTS_NAME)
    try:
        save_file(hf_state_dict(model), weights, metadata={"format": "pt"})
    except Exception as e:  # noqa: BLE001  safetensors reports a full disk as its own error
        number = re.search(r"\(os error (\d+)\)", str(e))
        if number is None:
            raise
        raise OSError(int(number.group(1)), os.strerror(int(number.group(1))), weights) \
            from None
    usual_mode(weights)
    with open(os.path.join(directory, HF_CONFIG_NAME), "w", encoding="utf-8") as f:
        json.dump(hf_config_dict(encoder.bert_config, pretrainer is not None), f,
                  indent=2, sort_keys=True)
        f.write("\n")
    _copy_vocab(vocab_file, directory)
    return directory


def write_keras_model(model, path, vocab_file=None):
    """Saves `model` to a `.keras` file; a path not ending in .keras is a directory that
    gets `model.keras`, `bert_config.json` (+ `vocab.txt`)."""
    encoder, _ = _split_model(model)
    if path.endswith(".keras"):
        model.save(path)
        return path
    os.makedirs(path, exist_ok=True)
    model.save(os.path.join(path, KERAS_MODEL_NAME))
    encoder.bert_config.to_json_file(os.path.join(path, GOOGLE_CONFIG_NAME), "google")
    _copy_vocab(vocab_file, path)
    return path


def save_checkpoint(model, output, output_format, vocab_file=None, overwrite=False):
    """Writes `model` in `output_format` to `output`, under a temporary name in the same
    folder first, then renamed: a crash never leaves a half-written `output`."""
    from bert_tf.keras_hub_format import write_keras_hub_preset
    writers = {"google": write_google_checkpoint, "hf": write_hf_checkpoint,
               "keras": write_keras_model, "keras_hub": write_keras_hub_preset}
    if output_format not in writers:
        raise ValueError(f"output_format must be one of {FORMATS}, got {output_format!r}")
    output = os.path.abspath(output)
    is_file = output_format == "keras" and output.endswith(".keras")
    if os.path.exists(output):
        empty_dir = os.path.isdir(output) and not os.listdir(output)
        if not (overwrite or empty_dir):
            raise FileExistsError(f"{output}: already exists (pass overwrite to replace it)")
    parent = os.path.dirname(output)
    os.makedirs(parent, exist_ok=True)
    tmp_dir = tempfile.mkdtemp(prefix=f".{os.path.basename(output)}.tmp-", dir=parent)
    # mkdtemp makes the folder private (0700); the renamed output should get the usual mode.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_dir, 0o777 & ~umask)
    try:
        tmp = os.path.join(tmp_dir, os.path.basename(output)) if is_file else tmp_dir
        writers[output_format](model, tmp, vocab_file=vocab_file)
        if os.path.isdir(output) and not is_file:
            shutil.rmtree(output)
        elif os.path.exists(output):
            os.remove(output)
        os.replace(tmp, output)
    finally:
        if os.path.exists(tmp_dir):
            shutil.rmtree(tmp_dir)
    return output
