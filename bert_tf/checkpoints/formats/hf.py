"""HF's BERT checkpoints (transformers `BertModel` / `BertForPreTraining`): a directory with
`model.safetensors` (or a sharded `model.safetensors.index.json`, or `pytorch_model.bin`
when torch is importable), `config.json` and `vocab.txt`.

Tensors keep HF's names without the `bert.` prefix (the core's `_hf_name` spelling): old
LayerNorm gamma/beta names are respelled, buffers dropped, and the tied MLM decoder
tensors checked against what they are tied to, then dropped.
"""

import json
import os
import re
import struct

import numpy as np

from bert_tf.checkpoints.formats.core import (
    GOOGLE_CONFIG_NAME, HF_CONFIG_NAME, VOCAB_NAME, Checkpoint, CheckpointFormat,
    CheckpointMismatchError, copy_vocab, find_file, hf_state_dict, register_format,
    split_model)
from bert_tf.base.config import BertConfig
from bert_tf.base.files import usual_mode

HF_WEIGHTS_NAME = "model.safetensors"
HF_INDEX_NAME = "model.safetensors.index.json"
HF_TORCH_NAME = "pytorch_model.bin"

# Non-persistent buffers older HF checkpoints saved; they are recomputed, not learned.
_HF_BUFFERS = re.compile(r"(^|\.)(position_ids|token_type_ids)$")


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


def safetensors_header(file):
    """(header length, header) of a safetensors file, its layout checked: an 8-byte
    little-endian header length, a JSON header (dtype, shape and data_offsets of each
    tensor, and __metadata__), then exactly the data the offsets cover. ValueError (or
    struct.error, for a file shorter than 8 bytes) when it is not laid out so: cut
    short, or damaged. The one reading of the layout (the download cache checks files
    with it too: bert_tf/checkpoints/registry.py)."""
    size = os.path.getsize(file)
    with open(file, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        if length > size - 8:
            raise ValueError("header longer than the file")
        header = json.loads(f.read(length))
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"),
              default=0)
    if 8 + length + end != size:
        raise ValueError(f"{size} bytes, the header describes {8 + length + end}")
    return length, header


def _read_safetensors_widened(file):
    """{name: np.ndarray} of a safetensors file read from its layout (safetensors_header),
    with BF16 and F16 widened to float32: numpy cannot hold bfloat16."""
    length, header = safetensors_header(file)
    with open(file, "rb") as f:
        f.seek(8 + length)
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
    config_file = find_file(directory, (HF_CONFIG_NAME, GOOGLE_CONFIG_NAME),
                            bert_config_file, "bert_config_file")
    if config_file is None:
        raise FileNotFoundError(f"{directory}: no {HF_CONFIG_NAME}; pass bert_config_file")
    config = BertConfig.from_json_file(config_file)
    tensors, ignored = _normalize_hf(_load_hf_tensors(directory, weights_file), path)
    return Checkpoint(path, "hf", config, tensors, find_file(directory, (VOCAB_NAME,)),
                      ignored)


def hf_config_dict(config, with_heads, next_sentence=True):
    """HF config.json contents for `config`. HF's activation table has no "gelu_tanh": its
    tanh GELU is called "gelu_new". A pretrainer without a next-sentence head is
    `BertForMaskedLM`."""
    values = config.to_hf_dict()
    values["architectures"] = ["BertModel" if not with_heads else
                               "BertForPreTraining" if next_sentence else "BertForMaskedLM"]
    if values["hidden_act"] == "gelu_tanh":
        values["hidden_act"] = "gelu_new"
    return values


def write_hf_checkpoint(model, directory, vocab_file=None):
    """Writes `model.safetensors` + `config.json` (+ `vocab.txt`) into `directory`.

    A pretrainer is written as `BertForPreTraining` saves itself (`bert.` prefix, tied
    decoder tensors omitted), an encoder as `BertModel` does (no prefix)."""
    from safetensors.numpy import save_file
    encoder, pretrainer = split_model(model)
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
        json.dump(hf_config_dict(encoder.bert_config, pretrainer is not None,
                                 pretrainer is None or pretrainer.nsp_head is not None), f,
                  indent=2, sort_keys=True)
        f.write("\n")
    copy_vocab(vocab_file, directory)
    return directory


def is_hf(path):
    """True for an HF directory (any of the weights files) or an HF weights file."""
    if os.path.isdir(path):
        return any(os.path.exists(os.path.join(path, n))
                   for n in (HF_WEIGHTS_NAME, HF_INDEX_NAME, HF_TORCH_NAME))
    return path.endswith((".safetensors", ".bin")) and os.path.isfile(path)


register_format(CheckpointFormat("hf", detect=is_hf, read=read_hf_checkpoint,
                                 write=write_hf_checkpoint, hf_names=True,
                                 holds=f"{HF_WEIGHTS_NAME} or {HF_TORCH_NAME} (HF)"))
