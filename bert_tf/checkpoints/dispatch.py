"""Checkpoint import and export, on top of the formats: google TF1 checkpoints, HF
safetensors, Keras files and keras-hub presets (bert_tf/checkpoints/formats/).

This is where a path becomes a model: `detect_format` asks each registered format whether
the path is one of its own, `read_checkpoint` reads it (a released checkpoint's name is
downloaded first, bert_tf/checkpoints/registry.py), `restore` assigns it strictly, all or nothing,
`load_encoder` / `load_pretrainer` build the model around it, and `save_checkpoint`
writes one under a temporary name, renamed when complete. The format modules never import
this one; the names they define are re-exported here for callers.
"""

import glob
import os
import shutil
import tempfile

from bert_tf.checkpoints.formats import core
from bert_tf.checkpoints.formats.core import (  # noqa: F401  (re-exported)
    GOOGLE_CONFIG_NAME, HF_CONFIG_NAME, VOCAB_NAME, Checkpoint, CheckpointFormat,
    CheckpointMismatchError, LoadReport, format_names, formats, get_format, google_variables,
    has_next_sentence_head, hf_state_dict, register_format, split_model, unregister_format,
    writable_format_names)
from bert_tf.checkpoints.formats.google import (  # noqa: F401  (re-exported)
    GOOGLE_CKPT_NAME, read_google_checkpoint, write_google_checkpoint)
from bert_tf.checkpoints.formats.hf import (  # noqa: F401  (re-exported)
    HF_INDEX_NAME, HF_TORCH_NAME, HF_WEIGHTS_NAME, hf_config_dict, read_hf_checkpoint,
    write_hf_checkpoint)
from bert_tf.checkpoints.formats.keras import (  # noqa: F401  (re-exported)
    KERAS_MODEL_NAME, read_keras_model, write_keras_model)
from bert_tf.base.files import close_hdf5_files, replace_path, system_error
from bert_tf.checkpoints.bundle import orphan_data
from bert_tf.checkpoints.registry import resolve_checkpoint

# The registered formats, in registration order: the built-in ones are formats/__init__.py's
# (google, hf, keras, keras_hub, model_garden, tfhub, pretraining_run); a format registered
# later is taken by every function below too (see `format_names()`).
FORMATS = format_names()


# -- reading ----------------------------------------------------------------------------

def detect_format(path):
    """The name of the registered format `path` holds ("google", "hf", "keras",
    "keras_hub", "model_garden", "tfhub" or "pretraining_run" among the built-in ones),
    tried in registration order, those that look inside the files first; ValueError when
    it is none of them."""
    path = os.fspath(path)
    for checkpoint_format in sorted(formats(), key=lambda f: not f.looks_inside):
        if checkpoint_format.detect(path):
            return checkpoint_format.name
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        raise ValueError(f"{path}: a SavedModel without a BERT encoder's variables (a TF Hub "
                         f"preprocessing model? give the encoder's directory)")
    orphan = orphan_data(path)
    if orphan is not None:
        raise orphan
    expected = "; ".join(f.holds for f in formats() if f.holds)
    if os.path.isdir(path):
        raise ValueError(f"{path}: no checkpoint found (expected {expected})")
    if not os.path.exists(path) and not glob.glob(glob.escape(path) + ".*"):
        raise FileNotFoundError(f"{path}: no such file or directory")
    raise ValueError(f"{path}: not a checkpoint of a known format (expected {expected})")


def read_checkpoint(path, input_format="auto", bert_config_file=None):
    """Reads any supported checkpoint into a Checkpoint (config + tensors). `path` may
    also be a released checkpoint's name, downloaded once (bert_tf/checkpoints/registry.py)."""
    path = resolve_checkpoint(path)
    if input_format == "auto":
        input_format = detect_format(path)
    checkpoint_format = get_format(input_format)
    if checkpoint_format is None:
        raise ValueError(f"input_format must be 'auto' or one of {format_names()}, "
                         f"got {input_format!r}")
    return checkpoint_format.read(path, bert_config_file)


def restore(model, checkpoint, allow_missing_heads=False, ignore=()):
    """`checkpoints.formats.core.restore` (all or nothing; its docstring gives the
    arguments) of a `Checkpoint` or of a path, read first."""
    if not isinstance(checkpoint, Checkpoint):
        checkpoint = read_checkpoint(checkpoint)
    return core.restore(model, checkpoint, allow_missing_heads=allow_missing_heads,
                        ignore=ignore)


def load_pretrainer(path, input_format="auto", bert_config_file=None,
                    allow_missing_heads=False, ignore=(), dtype=None, next_sentence=True):
    """A BertPretrainer initialised from any checkpoint the readers understand.

    An encoder-only checkpoint raises unless allow_missing_heads=True (the heads then keep
    their initialisation; a warning lists them).

    Args:
        path: google TF1 (bert_model.ckpt prefix or its directory), HF directory
            (model.safetensors / pytorch_model.bin + config.json) or a .keras file; or a
            released checkpoint's name ("uncased_L-12_H-768_A-12", "bert-base-uncased",
            ...), downloaded once into the cache (bert_tf/checkpoints/registry.py).
        input_format: "auto" or a registered format: "google", "hf", "keras", "keras_hub",
            "model_garden", "tfhub" (a TF Hub BERT SavedModel, read only).
        bert_config_file: the config when it is not beside the weights.
        allow_missing_heads, ignore: see above; tensor names to leave unrestored.
        dtype: a Keras dtype policy for the model.
        next_sentence: False for a pretrainer without the next-sentence head
            (run_pretraining --next_sentence=none); "auto" as the checkpoint has it (a
            masked-LM head without a next-sentence one: none).

    Example:
        >>> model = bert_tf.load_pretrainer("uncased_L-12_H-768_A-12")  # doctest: +SKIP
    """
    from bert_tf.checkpoints.formats.core import has_next_sentence_head
    from bert_tf.models.pretrainer import BertPretrainer
    checkpoint = read_checkpoint(path, input_format, bert_config_file)
    if next_sentence == "auto":
        next_sentence = has_next_sentence_head(checkpoint)
    model = BertPretrainer.from_config_object(checkpoint.config, dtype=dtype,
                                              next_sentence=next_sentence)
    restore(model, checkpoint, allow_missing_heads=allow_missing_heads, ignore=ignore)
    return model


def load_encoder(path, input_format="auto", bert_config_file=None, ignore=(), dtype=None):
    """A BertEncoder initialised from any checkpoint; head tensors, if any, are unused.

    Args: as `load_pretrainer` (path, input_format, bert_config_file, ignore, dtype).

    Example:
        >>> encoder = bert_tf.load_encoder("bert-hf", dtype="mixed_bfloat16")  # doctest: +SKIP
    """
    from bert_tf.models.encoder import BertEncoder
    checkpoint = read_checkpoint(path, input_format, bert_config_file)
    model = BertEncoder.from_config_object(checkpoint.config, dtype=dtype)
    restore(model, checkpoint, ignore=ignore)
    return model


def vocab_beside(checkpoint, vocab_file=None, flag="--init_checkpoint"):
    """`vocab_file` when given, else the vocabulary the checkpoint keeps: the vocab.txt in
    its directory (google's and HF's layouts), or where its format keeps one (a keras-hub
    preset's tokenizer asset, a TF Hub model's, a run_pretraining folder's exported
    copies: CheckpointFormat.vocab); one clear error naming `flag` when none.
    `checkpoint` may be a released checkpoint's name (bert_tf/checkpoints/registry.py)."""
    if vocab_file:
        return vocab_file
    checkpoint = resolve_checkpoint(checkpoint)
    base = checkpoint if checkpoint and os.path.isdir(checkpoint) else \
        os.path.dirname(checkpoint or "")
    path = os.path.join(base, VOCAB_NAME)
    if checkpoint and not os.path.isfile(path) and not os.path.exists(checkpoint) and \
            not glob.glob(glob.escape(checkpoint) + ".*"):
        raise FileNotFoundError(f"{flag} {checkpoint}: no such file, directory or "
                                f"checkpoint prefix")
    if checkpoint and not os.path.isfile(path):
        kept = _format_vocab(checkpoint)
        if kept:
            return kept
    if not checkpoint or not os.path.isfile(path):
        raise ValueError(f"{flag} {checkpoint or '(not given)'}: no vocab.txt beside the "
                         f"checkpoint; pass --vocab_file")
    return path


def _format_vocab(checkpoint):
    """The vocabulary file the format of `checkpoint` keeps in a place of its own, or
    None (not a known format, or one without a vocabulary)."""
    try:
        checkpoint_format = get_format(detect_format(checkpoint))
    except (ValueError, OSError):
        return None
    if checkpoint_format.vocab is None:
        return None
    return checkpoint_format.vocab(checkpoint)


# -- writing ----------------------------------------------------------------------------

def save_checkpoint(model, output, output_format, vocab_file=None, overwrite=False):
    """Writes `model` in `output_format` to `output`, under a temporary name in the same
    folder first, then swapped with what `output` held (files.replace_path): a crash
    never leaves a half-written `output`, and a reader loading `output` meanwhile finds
    the old checkpoint or the new one. What a killed save left is removed first: the
    caller holds the output's lock (bert_tf/base/output_lock.py)."""
    checkpoint_format = get_format(output_format)
    if checkpoint_format is None or checkpoint_format.write is None:
        raise ValueError(f"output_format must be one of {writable_format_names()}, "
                         f"got {output_format!r}")
    output = os.path.abspath(output)
    # A format with a file suffix (keras: .keras) writes one file for such a name.
    is_file = bool(checkpoint_format.file_suffix) and output.endswith(
        checkpoint_format.file_suffix)
    if os.path.exists(output):
        empty_dir = os.path.isdir(output) and not os.listdir(output)
        if not (overwrite or empty_dir):
            raise FileExistsError(f"{output}: already exists (pass overwrite to replace it)")
    parent = os.path.dirname(output)
    os.makedirs(parent, exist_ok=True)
    prefix = f".{os.path.basename(output)}.tmp-"
    # What an earlier save killed midway left (the caller holds the output's lock, so
    # no other save is writing one now).
    for stale in glob.glob(os.path.join(glob.escape(parent), glob.escape(prefix) + "*")):
        shutil.rmtree(stale, ignore_errors=True)
    tmp_dir = tempfile.mkdtemp(prefix=prefix, dir=parent)
    # mkdtemp makes the folder private (0700); the renamed output should get the usual mode.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_dir, 0o777 & ~umask)
    try:
        tmp = os.path.join(tmp_dir, os.path.basename(output)) if is_file else tmp_dir
        checkpoint_format.write(model, tmp, vocab_file=vocab_file)
        # Swapped with what is there in one step: a reader loading `output` meanwhile
        # finds the old checkpoint or the new one, never neither.
        replace_path(tmp, output)
    except BaseException as e:
        # A format written through HDF5 (keras-hub's model.weights.h5) leaves its file
        # open after a failed write, and the process would crash at exit.
        close_hdf5_files(tmp_dir)
        failure = system_error(e, output)
        if failure is not None:
            raise failure from None
        raise
    finally:
        if os.path.exists(tmp_dir):
            shutil.rmtree(tmp_dir, ignore_errors=True)
    return output
