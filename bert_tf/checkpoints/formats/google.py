"""google's TF1 checkpoints (google-research/bert): `bert_model.ckpt` (index + data),
`bert_config.json` and `vocab.txt` in one directory, google's variable names as they are.

Reading drops training state (optimizer slots, step counters, loss scales); writing uses
SaveV2, the op `tf.compat.v1.train.Saver` runs, so google's `init_from_checkpoint` and
`Saver.restore` read the result.
"""

import os
import re

from bert_tf.checkpoints.bundle import check_bundle, read_failure
from bert_tf.checkpoints.formats.core import (
    GOOGLE_CONFIG_NAME, VOCAB_NAME, Checkpoint, CheckpointFormat, config_beside,
    copy_vocab, find_file, google_variables, register_format, split_model,
    tf_checkpoint_prefix)

GOOGLE_CKPT_NAME = "bert_model.ckpt"

# Top-level TF1 variables that are training state, not model weights: Adam's beta powers
# (tf.train.AdamOptimizer), NVIDIA's dynamic loss scale. Optimizer *slots* (adam_m, Adam_1,
# ...) are recognised structurally instead: see `_is_optimizer_slot`.
_GOOGLE_TRAINING_STATE = re.compile(
    r"^(global_step|beta[12]_power|current_loss_scale|good_steps|loss_scale.*)$")


def google_prefix(path):
    """The TF1 checkpoint prefix `path` names (a prefix, an .index/.data file, or a
    directory holding bert_model.ckpt or a `checkpoint` state file), or None."""
    return tf_checkpoint_prefix(path, GOOGLE_CKPT_NAME)


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
    prefix = google_prefix(path)
    if prefix is None:
        raise FileNotFoundError(f"{path}: no TF1 checkpoint (expected {path}.index or a "
                                f"directory with {GOOGLE_CKPT_NAME}.index)")
    directory = os.path.dirname(prefix)
    check_bundle(prefix, "TF1 checkpoint")
    config = config_beside(prefix, bert_config_file)
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
            # A flipped byte fails its checksum (a cut file is found by check_bundle).
            raise ValueError(f"{prefix}: unreadable TF1 checkpoint, variable {name} "
                             f"({read_failure(e)}; a damaged .data file?)") from None
    return Checkpoint(prefix, "google", config, tensors,
                      find_file(directory, (VOCAB_NAME,)), ignored)


def write_google_checkpoint(model, directory, vocab_file=None):
    """Writes `bert_model.ckpt` (TF1 index + data, google's variable names), and
    `bert_config.json` (+ `vocab.txt`) into `directory`. Returns the checkpoint prefix.

    SaveV2 is the op `tf.compat.v1.train.Saver` runs, so google's `init_from_checkpoint`
    and `Saver.restore` read the result; no meta graph is written (init_from_checkpoint
    does not need one)."""
    import tensorflow as tf
    encoder, _ = split_model(model)
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
    copy_vocab(vocab_file, directory)
    return prefix


register_format(CheckpointFormat(
    "google", detect=lambda path: google_prefix(path) is not None,
    read=read_google_checkpoint, write=write_google_checkpoint,
    holds=f"{GOOGLE_CKPT_NAME}.index (google TF1; its prefix, or its folder)"))
