"""A classifier's inputs, shared by the families on bert_tf.BertClassifier (classification,
multi-label): rows of one text or a text pair and their targets -> tf.data batches,
tokenized in the pipeline by the preprocessor every export runs; and how a text longer
than max_seq_length - 2 pieces is read.

A long text is cut there by default (`--max_windows=1`, google's run_classifier). With
`--max_windows=N` (0: no limit) it is read in up to N windows of max_seq_length - 2
pieces starting `--doc_stride` pieces apart (default: half a window), every window goes
through the model, and the text's logits are the mean of its windows' (`--window_pooling
=max`: their maximum): at training (the loss is the pooled logits'), at evaluation and in
the export's signatures, which read the same windows (BertPreprocessor.windows) and pool
them with the same function (task_layers.pool_windows). The run keeps the three in its
TASK_config.json (BertClassifier.settings); a later run or an export reads them there.
Sentence pairs are always cut (google's longest-first rule): --max_windows other than 1
is refused for them. A training batch of texts of several windows is a [batch, windows,
seq] input of which only the texts' own windows are computed (BertClassifier): its
memory grows with the batch's windows, which --max_windows bounds; --length_batching
sort or bucket, which regroup single sequences, and --jit_compile, which needs fixed
shapes, are refused with windows.
"""

import dataclasses
from typing import ClassVar

import numpy as np

from bert_tf.text.windows import WINDOW_POOLINGS, check_doc_stride, default_doc_stride
from tasks.driver import FineTuneConfig

# TensorFlow and Keras are imported where they are used: the commands build their flags
# and check them from this module before TensorFlow loads.

# Help texts of the window flags, for the families' commands (tasks/common.py's
# add_config_flags); the fields are `WindowConfig`'s.
FLAGS = {
    "max_windows": dict(help=(
        "a text longer than max_seq_length - 2 pieces: 1 cuts it there (google's); N "
        "reads up to N overlapping windows of it (0: all) and answers with their pooled "
        "logits, at training, evaluation and in the export (default: 1, or the trained "
        "run's). Single texts only")),
    "doc_stride": dict(help=(
        "with --max_windows other than 1: pieces between the starts of two windows, "
        "at most max_seq_length - 2 (windows end to end; default: half a window, or "
        "the trained run's)")),
    "window_pooling": dict(choices=WINDOW_POOLINGS, help=(
        "with --max_windows other than 1: a text's logits are the mean or the max of "
        "its windows' (default: mean, or the trained run's)")),
}


@dataclasses.dataclass(frozen=True)
class WindowConfig(FineTuneConfig):
    """FineTuneConfig + how a long text is read (None: the default, or the trained
    run's): the config the classifier families' configs extend."""
    max_windows: int = None
    doc_stride: int = None
    window_pooling: str = None

    FLAGS: ClassVar[dict] = FLAGS
    RANGES: ClassVar[dict] = dict(positive=("doc_stride",), non_negative=("max_windows",))


def check(config, pair):
    """The window flags against the rest: one text, a batching that keeps windows, a
    stride within a window."""
    if config.max_seq_length is not None:
        check_doc_stride(config.doc_stride, config.max_seq_length)
    if config.do_train:           # a later run's windows are checked as they resolve
        check_window_flags(config, 1 if config.max_windows is None else config.max_windows)
    if config.max_windows is not None and config.max_windows < 0:
        raise ValueError(f"--max_windows must be 0 (no limit) or more, got "
                         f"{config.max_windows}")
    if config.max_windows not in (None, 1) and pair:
        raise ValueError(f"--max_windows={config.max_windows}: windows read one text; "
                         f"sentence pairs are cut by google's longest-first rule (drop "
                         f"--max_windows)")
    if config.max_windows not in (None, 1) and config.do_train and \
            config.length_batching in ("sort", "bucket"):
        raise ValueError(f"--length_batching={config.length_batching} regroups single "
                         f"sequences; with --max_windows={config.max_windows} use longest "
                         f"or off")
    if config.max_windows not in (None, 1) and config.jit_compile:
        raise ValueError(f"--jit_compile compiles fixed shapes; with "
                         f"--max_windows={config.max_windows} a batch computes as many "
                         f"windows as its texts have: drop one of the two")


def check_window_flags(config, max_windows, trained=False):
    """--doc_stride and --window_pooling shape windows: a run that cuts its texts
    (max_windows 1: given, the default, or `trained`, the trained run's) refuses them
    rather than ignore them."""
    if max_windows != 1:
        return
    for flag in ("doc_stride", "window_pooling"):
        value = getattr(config, flag)
        if value is not None:
            raise ValueError(
                f"--{flag}={value}: only texts read in windows have it, and this run "
                f"cuts a text at max_seq_length - 2 pieces (max_windows 1"
                f"{', as the trained run' if trained else ''}): add --max_windows "
                f"(0: every window), or drop --{flag}")


def training_config(config):
    """A training run's window fields: the flags, else the defaults (doc_stride stays
    unset: `stride` derives it from max_seq_length, and a resumed run compares the value
    TASK_config.json keeps, tasks/resume.py's resume_settings)."""
    return config.replace(
        max_windows=1 if config.max_windows is None else config.max_windows,
        window_pooling=config.window_pooling or "mean")


def stride(config):
    """The pieces between two windows' starts: --doc_stride, else half a window."""
    return config.doc_stride or default_doc_stride(config.max_seq_length)


def restored_config(config, saved):
    """A later run's window fields: the flags, else the trained run's (settings `saved`;
    a run that kept none cut its texts)."""
    if config.max_windows is None:
        check_window_flags(config, saved.get("max_windows", 1), trained=True)
    else:
        check_window_flags(config, config.max_windows)
    return config.replace(
        max_windows=saved.get("max_windows", 1) if config.max_windows is None
        else config.max_windows,
        doc_stride=config.doc_stride or saved.get("doc_stride"),
        window_pooling=config.window_pooling or saved.get("window_pooling", "mean"))


def settings(config, text_inputs):
    """The window part of TASK_config.json."""
    from bert_tf.models.task_models import window_settings
    return window_settings(config.max_windows, stride(config), config.window_pooling,
                           text_inputs)


def config_settings(config, saved):
    """A run's settings as its model is built from them: `saved` with this run's window
    fields (a later run's flags may read more or fewer windows than training did)."""
    return dict(saved, **settings(config, len(saved["text_inputs"])))


def preprocess(preprocessor, config, text_a, text_b=None):
    """Texts -> the model's inputs: [batch, seq] (cut), or [batch, windows, seq]."""
    if config.max_windows == 1:
        return preprocessor(text_a, text_b)
    return preprocessor.windowed(text_a, config.max_windows, stride(config))


def dataset(texts_a, texts_b, targets, preprocess_fn, batch_size, max_seq_length,
            output_name="logits", training=False, seed=0, length_batching="off",
            repeat=True):
    """tf.data of (inputs, {output_name: target}[, {output_name: weight}]) batches.

    texts_a (texts_b: None, or the pairs' second texts): lists of str; targets: numpy
    [N, ...]; preprocess_fn(text_a, text_b or None) -> the model's inputs (`preprocess`).
    training: shuffled, repeated, full batches. Otherwise in order, padded with empty
    texts of weight 0 to whole batches, as google's run_classifier pads for TPUs: every
    batch has one shape, so a jit-compiled model compiles once; the padded tail is sliced
    off predictions (tasks/outputs.predict_outputs). length_batching: a
    bert_tf.text.batching mode. repeat=False (training): one pass, each text exactly once
    (length buckets flush their last, smaller batches at the end).
    """
    import tensorflow as tf

    from bert_tf.text import batching
    n = len(texts_a)
    texts_a, targets = list(texts_a), np.asarray(targets)
    texts_b = None if texts_b is None else list(texts_b)
    weights = np.ones(n, np.float32)
    if not training:
        pad = -n % batch_size
        # Keras averages a loss over batch slots, padding included; weighting the real
        # texts by slots / n makes its val_loss the mean over real texts. (The
        # count-based metrics are ratios, unchanged by a common factor.)
        weights *= (n + pad) / n
        texts_a += [""] * pad
        texts_b = None if texts_b is None else texts_b + [""] * pad
        targets = np.concatenate([targets, np.zeros((pad,) + targets.shape[1:],
                                                    targets.dtype)])
        weights = np.concatenate([weights, np.zeros(pad, np.float32)])
    texts = {"text_a": tf.constant(texts_a, tf.string)}
    if texts_b is not None:
        texts["text_b"] = tf.constant(texts_b, tf.string)
    ds = tf.data.Dataset.from_tensor_slices((texts, targets, weights))
    if training:
        ds = ds.shuffle(n, seed=seed, reshuffle_each_iteration=True)
        ds = ds.repeat() if repeat else ds
    ds = ds.batch(batch_size, drop_remainder=repeat)

    def pack(texts, target, weight):
        inputs = preprocess_fn(texts["text_a"], texts.get("text_b"))
        target = {output_name: target}
        return (inputs, target) if training else (inputs, target, {output_name: weight})
    ds = ds.map(pack, num_parallel_calls=tf.data.AUTOTUNE)
    ds = batching.rebatch(ds, batch_size, length_batching, max_seq_length,
                          drop_remainder=repeat, seed=seed)
    return batching.finish(ds)


__all__ = ["FLAGS", "WindowConfig", "check", "check_window_flags", "training_config",
           "restored_config", "settings", "stride", "config_settings", "preprocess",
           "dataset"]
