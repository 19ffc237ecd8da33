"""A run_pretraining --output_dir read as a checkpoint: its newest `ckpt-N` (the loop's
tf.train.Checkpoint of the BertPretrainer, optimizer state left out), shaped by the
run's bert_config.json and its next-sentence setting (pretraining_settings.json), with
the vocabulary its exported copies carry. So `--init_checkpoint=runs/base` (phase 2
from phase 1, a fine-tune, extract_features, an export) reads the run where it stands,
also while it still trains. Read only: its google/ and hf/ copies are the run's written
formats.
"""

import json
import os

from bert_tf.checkpoints.bundle import (check_bundle, latest_prefix, read_failure,
                                        restore_or_refuse)
from bert_tf.checkpoints.formats.core import (
    GOOGLE_CONFIG_NAME, VOCAB_NAME, Checkpoint, CheckpointFormat, config_beside,
    google_variables, register_format)

# What a run keeps in its --output_dir beside its checkpoints: the settings they were
# made with (a resumed run must share them) and its exported copies, by format name.
RUN_SETTINGS = "pretraining_settings.json"
RUN_COPIES = ("google", "hf")


def is_pretraining_run(path):
    """True for a run_pretraining --output_dir (it holds the run's settings)."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, RUN_SETTINGS))


def run_vocab(path):
    """The vocabulary a run's exported copies carry (run_pretraining --vocab_file), or
    None."""
    for copy in RUN_COPIES:
        vocab = os.path.join(path, copy, VOCAB_NAME)
        if os.path.isfile(vocab):
            return vocab
    return None


def read_pretraining_run(path, bert_config_file=None):
    """The newest checkpoint of the run_pretraining folder `path` -> Checkpoint (google's
    names, heads included)."""
    import tensorflow as tf

    from bert_tf.models.pretrainer import BertPretrainer
    path = os.fspath(path)
    latest = latest_prefix(path)
    if latest is None:
        raise ValueError(f"{path}: a run_pretraining folder without a checkpoint yet (it "
                         f"writes ckpt-N every --save_checkpoints_steps steps)")
    config = config_beside(os.path.join(path, GOOGLE_CONFIG_NAME), bert_config_file)
    try:
        with open(os.path.join(path, RUN_SETTINGS), encoding="utf-8") as f:
            next_sentence = json.load(f).get("next_sentence", "nsp") != "none"
    except (OSError, ValueError, AttributeError):
        raise ValueError(f"{os.path.join(path, RUN_SETTINGS)}: not the JSON settings of a "
                         f"run_pretraining run") from None
    check_bundle(latest, "run_pretraining checkpoint")
    model = BertPretrainer.from_config_object(config, next_sentence=next_sentence)
    status = restore_or_refuse(lambda: tf.train.Checkpoint(model=model).read(latest),
                               latest, "run_pretraining checkpoint")
    try:
        status.expect_partial().assert_existing_objects_matched()
    except (AssertionError, ValueError) as e:
        raise ValueError(f"{latest}: unreadable run_pretraining checkpoint "
                         f"({read_failure(e)}; of another model?)") from None
    return Checkpoint(latest, "pretraining_run", config, google_variables(model),
                      run_vocab(path))


register_format(CheckpointFormat(
    "pretraining_run", detect=is_pretraining_run, read=read_pretraining_run, write=None,
    looks_inside=True, vocab=run_vocab,
    holds=f"a run_pretraining --output_dir ({RUN_SETTINGS} and ckpt-N)"))
