"""Our own models saved by Keras: a `.keras` file of a BertEncoder or BertPretrainer, or a
directory holding `model.keras` (+ `bert_config.json`, `vocab.txt`). Read back into
google's names through the core's table, so it converts like any other format.
"""

import glob
import os
import zipfile

from bert_tf.checkpoints.formats.core import (
    GOOGLE_CONFIG_NAME, VOCAB_NAME, Checkpoint, CheckpointFormat, copy_vocab, find_file,
    google_variables, register_format, split_model)

KERAS_MODEL_NAME = "model.keras"


def keras_file(directory):
    """The .keras file in `directory`: model.keras, else the only *.keras; or None."""
    if os.path.isfile(os.path.join(directory, KERAS_MODEL_NAME)):
        return os.path.join(directory, KERAS_MODEL_NAME)
    found = glob.glob(os.path.join(glob.escape(directory), "*.keras"))
    return found[0] if len(found) == 1 else None


def is_keras(path):
    """True for a .keras file or a directory holding one."""
    if os.path.isdir(path):
        return keras_file(path) is not None
    return path.endswith(".keras") and os.path.isfile(path)


def read_keras_model(path, bert_config_file=None):
    """Reads one of our `.keras` files (BertEncoder or BertPretrainer) into a Checkpoint.
    `bert_config_file` is not used: the file holds its own config."""
    path = os.fspath(path)
    import keras

    import bert_tf.models.encoder  # noqa: F401  registers the classes with Keras
    import bert_tf.models.pretrainer  # noqa: F401
    file = keras_file(path) if os.path.isdir(path) else path
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
    encoder, _ = split_model(model)
    return Checkpoint(file, "keras", encoder.bert_config, google_variables(model),
                      find_file(os.path.dirname(file) or ".", (VOCAB_NAME,)))


def write_keras_model(model, path, vocab_file=None):
    """Saves `model` to a `.keras` file; a path not ending in .keras is a directory that
    gets `model.keras`, `bert_config.json` (+ `vocab.txt`)."""
    encoder, _ = split_model(model)
    if path.endswith(".keras"):
        model.save(path)
        return path
    os.makedirs(path, exist_ok=True)
    model.save(os.path.join(path, KERAS_MODEL_NAME))
    encoder.bert_config.to_json_file(os.path.join(path, GOOGLE_CONFIG_NAME), "google")
    copy_vocab(vocab_file, path)
    return path


register_format(CheckpointFormat("keras", detect=is_keras, read=read_keras_model,
                                 write=write_keras_model, file_suffix=".keras",
                                 holds=f"a .keras file, or {KERAS_MODEL_NAME} in a folder"))
