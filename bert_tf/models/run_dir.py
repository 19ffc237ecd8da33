"""What a fine-tuning run leaves in --output_dir besides the logs, and reading it back.

    output_dir/
      TASK_config.json     the task's settings (sequence length, labels, thresholds, ...)
      bert_config.json     the encoder's hyperparameters (all fields, epsilon included)
      vocab.txt            the vocabulary the run tokenized with
      best.weights.h5      the task model at its best validation score (when evaluated)
      last.weights.h5      the task model after the last epoch

The directory is self-contained: an exporter (or `--do_predict` without `--do_train`)
rebuilds the Keras task model (bert_tf/models/task_models.py) from the two JSON files and loads
the weights, without the pretrained checkpoint. The `tasks.*` commands write it while they
train; `save_task_model` writes one for a model trained in Python, and
`load_task_model` reads either.
"""

import json
import os

# write_json: JSON with sorted keys, atomically (the tasks write their files with it too).
from bert_tf.base.files import atomic_copy, close_hdf5_files, system_error, write_json

WEIGHT_FILES = ("best.weights.h5", "last.weights.h5")


def save_task_files(output_dir, task, task_config, bert_config, vocab_file):
    """Writes TASK_config.json, bert_config.json and a copy of vocab.txt."""
    os.makedirs(output_dir, exist_ok=True)
    write_json(os.path.join(output_dir, f"{task}_config.json"), task_config)
    bert_config.to_json_file(os.path.join(output_dir, "bert_config.json"), "full")
    target = os.path.join(output_dir, "vocab.txt")
    if os.path.abspath(vocab_file) != os.path.abspath(target):
        atomic_copy(vocab_file, target)


def task_config(model, max_seq_length, do_lower_case=True, labels=None, **settings):
    """(task name, TASK_config dict) of a task model: what a run directory records to
    rebuild the model, its preprocessing and its post-processing.

    Args:
        model: a BertClassifier, BertMultipleChoice, BertTokenClassifier or
            BertSpanLabeler.
        max_seq_length: the sequence length inputs are packed to.
        do_lower_case: the tokenizer's setting.
        labels: label names in class-id order (classifier: None for regression;
            token classifier: the tags).
        settings: classifier: `text_inputs` (default ("text_a",); ("text_a", "text_b")
            for pairs), `task_name`; span labeler: its run's window and decoding
            settings (SQuAD's doc_stride, max_query_length, ...), recorded as given.
            The model's class says what its run keeps (its `settings`).
    """
    from bert_tf.models.task_models import TASK_MODELS
    if not isinstance(model, tuple(TASK_MODELS.values())):
        raise ValueError(f"model: expected a bert_tf task model, got {type(model).__name__}")
    config = model.run_settings(max_seq_length, do_lower_case, labels, **settings)
    return config["task"], config


def save_task_model(model, output_dir, vocab_file, max_seq_length, do_lower_case=True,
                    labels=None, **settings):
    """Writes a run directory for a task model trained in Python: TASK_config.json,
    bert_config.json, vocab.txt and last.weights.h5 (each under a temporary name, then
    renamed). `load_task_model(output_dir)` and `python -m export.saved_model` read it.

    Args:
        model: a bert_tf task model (BertClassifier, ...).
        output_dir: the directory to write (created if missing).
        vocab_file: the vocabulary the model's inputs were tokenized with (copied).
        max_seq_length, do_lower_case, labels, settings: as in `task_config`.

    Example:
        >>> bert_tf.save_task_model(model, "runs/topics", "vocab.txt",  # doctest: +SKIP
        ...                         max_seq_length=128, labels=["sports", "music"])
    """
    task, config = task_config(model, max_seq_length, do_lower_case, labels, **settings)
    save_task_files(output_dir, task, config, model.encoder.bert_config, vocab_file)
    save_weights(model, os.path.join(output_dir, "last.weights.h5"))
    return output_dir


def _optimizer(model):
    """[the model's optimizer], or [] when it has none: the weights files hold the
    model's weights only. Keras would add the optimizer's slots (AdamW: two per weight,
    three times the file: 1.3 GB for each of BERT-base's best and last files, and a
    third of each save's time); a run resumes from its own state in resume/."""
    optimizer = getattr(model, "optimizer", None)
    return [optimizer] if optimizer is not None else []


def save_weights(model, path):
    """The model's weights (not its optimizer's) into `path`, by way of a temporary file
    renamed onto `path` when complete. A reader of `path` (an export while training goes
    on) never sees half a file, and never blocks the writer: HDF5 locks the file it
    opens, and the writer's is a new one. A failure (a full disk, a read-only folder)
    closes what HDF5 still holds open of the temporary file (files.close_hdf5_files: left
    open, it crashes the process at exit), removes it, and names `path` with the
    system's reason (h5py's own errors name no file, or the temporary one)."""
    import keras
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name[:-len('.weights.h5')]}.tmp.weights.h5")  # Keras
    try:                                                 # wants the .weights.h5 ending
        keras.saving.save_weights(model, tmp, objects_to_skip=_optimizer(model))
        os.replace(tmp, path)
    except BaseException as e:
        close_hdf5_files(tmp)
        if os.path.exists(tmp):
            os.remove(tmp)
        failure = system_error(e, path)
        if failure is not None:
            raise failure from None
        if isinstance(e, (OSError, RuntimeError, ValueError)):
            reason = (str(e).splitlines() or [type(e).__name__])[0]
            raise OSError(f"{path}: could not write the weights ({reason})") from None
        raise


def WeightsCheckpoint(model, path, **options):  # noqa: N802  (makes a Keras callback)
    """keras.callbacks.ModelCheckpoint(path, save_weights_only=True, **options) that
    saves `model` (whatever model fit trains: a task may train a part of it) through
    save_weights: the file is replaced whole, never left half-written."""
    import keras

    class Saver:   # what ModelCheckpoint saves through: it calls only save_weights
        def save_weights(self, filepath, overwrite=True):
            save_weights(model, filepath)

    class Checkpoint(keras.callbacks.ModelCheckpoint):
        def set_model(self, _):     # fit hands over the model it trains
            super().set_model(Saver())

    return Checkpoint(path, save_weights_only=True, **options)


def read_task_config(output_dir, task):
    path = os.path.join(output_dir, f"{task}_config.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: not found (train first with --do_train, or "
                                f"point --output_dir at a fine-tuned {task} run)") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None


def weights_file(output_dir):
    """best.weights.h5 if the run had an eval set, else last.weights.h5; error if none."""
    for name in WEIGHT_FILES:
        path = os.path.join(output_dir, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"{output_dir}: no fine-tuned weights ({' or '.join(WEIGHT_FILES)})"
                            f"; run with --do_train first")


def check_weights_file(path):
    """ValueError in one line naming `path` when it is not a whole HDF5 file (Keras'
    .weights.h5, a keras-hub preset's model.weights.h5): no HDF5 signature, or cut
    shorter than its superblock says, or a superblock HDF5 cannot read. h5py's own
    errors name no file. (HDF5 keeps no checksum of the data: a changed byte inside a
    weight's values reads back as a value.)"""
    import re
    with open(path, "rb") as f:
        signature = f.read(8)
    if signature != b"\x89HDF\r\n\x1a\n":      # HDF5's file signature (Keras writes it first)
        raise ValueError(f"{path}: not a readable weights file (no HDF5 signature: cut "
                         f"short or damaged?)")
    import h5py
    try:
        with h5py.File(path, "r"):
            pass
    except (OSError, ValueError, RuntimeError) as e:
        text = (str(e).splitlines() or [type(e).__name__])[0]
        cut = re.search(r"truncated file: eof = (\d+).*stored_eof = (\d+)", text)
        reason = (f"cut short: {int(cut.group(1)):,} bytes, its superblock says "
                  f"{int(cut.group(2)):,}" if cut else
                  re.sub(r"^Unable to (synchronously )?open file \((.*)\)$", r"\2", text) +
                  "; cut short or damaged?")
        raise ValueError(f"{path}: not a readable weights file ({reason})") from None


def load_weights(model, path):
    """model.load_weights(path) (a Keras .weights.h5 file; an optimizer state in it, as
    files written before the weights-only ones hold, is skipped); ValueError in one line
    naming the file when it is cut short or damaged (check_weights_file; h5py's own
    errors run to many lines)."""
    import keras
    check_weights_file(path)
    try:
        keras.saving.load_weights(model, path, objects_to_skip=_optimizer(model))
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        close_hdf5_files(path)
        reason = (str(e).splitlines() or [e.__class__.__name__])[0]
        raise ValueError(f"{path}: not a readable weights file ({reason}; cut short or "
                         f"damaged?)") from None


def encoder_from_task_dir(output_dir, dtype=None):
    """A randomly initialised encoder shaped by output_dir/bert_config.json (the
    fine-tuned weights are loaded into the whole task model afterwards)."""
    from bert_tf.base.config import BertConfig
    from bert_tf.models.encoder import BertEncoder
    config = BertConfig.from_json_file(os.path.join(output_dir, "bert_config.json"))
    return BertEncoder.from_config_object(config, dtype=dtype)


def run_task(output_dir):
    """The task name of a run directory: the stem of its TASK_config.json (a task
    model's `TASK`, or a family's stem whose config records its model class)."""
    from bert_tf.models.task_models import TASK_MODELS
    found = [task for task in TASK_MODELS
             if os.path.exists(os.path.join(output_dir, f"{task}_config.json"))]
    if os.path.isdir(output_dir) and not found:
        found = [name[:-len("_config.json")] for name in sorted(os.listdir(output_dir))
                 if name.endswith("_config.json") and name != "bert_config.json"
                 and "model" in _json_or_empty(os.path.join(output_dir, name))]
    if not os.path.isdir(output_dir):
        raise FileNotFoundError(f"{output_dir}: not a directory (pass the --output_dir of a "
                                f"fine-tuning run)")
    if len(found) != 1:
        names = " or ".join(f"{task}_config.json" for task in TASK_MODELS)
        raise FileNotFoundError(f"{output_dir}: expected exactly one of {names} (the "
                                f"--output_dir of a fine-tuning run), found "
                                f"{len(found)}")
    return found[0]


def _json_or_empty(path):
    """The JSON object in `path`, or {} when it is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def load_task_model(output_dir, task=None, dtype=None, weights=None):
    """(Keras task model, TASK_config dict, BertTokenizer) of a fine-tuning run.

    Args:
        output_dir: the run's directory (the --output_dir of tasks.glue/swag/ner/squad,
            or one written by `save_task_model`).
        task: "glue", "swag", "ner" or "squad"; None = the one whose TASK_config.json
            the directory holds.
        dtype: a Keras dtype policy name for the rebuilt model (None: the global one).
        weights: a weights file; None = best.weights.h5, else last.weights.h5.

    Example:
        >>> model, config, tokenizer = bert_tf.load_task_model("runs/mrpc")  # doctest: +SKIP
    """
    from bert_tf.models.task_models import build_task_model
    from bert_tf.text.tokenization import BertTokenizer
    task = task or run_task(output_dir)
    config = read_task_config(output_dir, task)
    model = build_task_model(task, encoder_from_task_dir(output_dir, dtype), config)
    load_weights(model, weights or weights_file(output_dir))
    tokenizer = BertTokenizer(os.path.join(output_dir, "vocab.txt"),
                              do_lower_case=config["do_lower_case"])
    return model, config, tokenizer
