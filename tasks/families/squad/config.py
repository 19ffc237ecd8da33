"""SquadConfig, the SQuAD family's settings: google's run_squad defaults (the window and
decoding settings a run keeps in squad_config.json, and the sequence length), its flags
(help texts, ranges) and the checks of its flags and of a run's settings. TensorFlow-free;
the task (task.py), the span model's run directory and the serving module (serving.py)
read them here."""

import dataclasses
from typing import ClassVar

from tasks import driver
from tasks.task import Task

# google-research/bert's run_squad defaults of the window and decoding settings: what a
# run keeps in squad_config.json (BertSpanLabeler.settings records them), what a later
# run and the export read back.
WINDOW_DEFAULTS = {"doc_stride": 128, "max_query_length": 64, "n_best_size": 20,
                   "max_answer_length": 30, "version_2_with_negative": False,
                   "null_score_diff_threshold": 0.0}
# ... and run_squad's sequence length: an unset flag's value at training.
DEFAULTS = dict(WINDOW_DEFAULTS, max_seq_length=384)


@dataclasses.dataclass(frozen=True)
class SquadConfig(driver.FineTuneConfig):
    """FineTuneConfig + SQuAD's files and window/decoding settings. None: the trained
    run's value (later runs), else DEFAULTS."""
    max_seq_length: int = None
    train_file: str = None
    predict_file: str = None
    version_2_with_negative: bool = None
    doc_stride: int = None
    max_query_length: int = None
    n_best_size: int = None
    max_answer_length: int = None
    null_score_diff_threshold: float = None

    # Help texts in --help's order; the fields' defaults are None (unset): the values
    # stored in output_dir by the training run when predicting without --do_train, else
    # DEFAULTS.
    FLAGS: ClassVar[dict] = {
        "train_file": dict(help="SQuAD JSON for training"),
        "predict_file": dict(help=(
            "SQuAD JSON to predict (--do_predict) and score (--do_eval); also the "
            "validation set that picks best.weights.h5 during training")),
        "version_2_with_negative": dict(
            help="SQuAD 2.0: questions may have no answer (default False)"),
        "doc_stride": dict(help=(
            f"pieces between the starts of two windows over a context (default "
            f"{DEFAULTS['doc_stride']}); a window holds max_seq_length - 3 - the "
            f"question's pieces of it, and a stride of that or more reads the windows end "
            f"to end, skipping none (google's run_squad)")),
        "max_query_length": dict(help=f"default {DEFAULTS['max_query_length']}"),
        "n_best_size": dict(help=f"default {DEFAULTS['n_best_size']}"),
        "max_answer_length": dict(help=f"default {DEFAULTS['max_answer_length']}"),
        "null_score_diff_threshold": dict(help=(
            "v2.0: answer '' when null score - best non-null score exceeds this; default: "
            "the value tuned on dev (stored in output_dir by --do_train --do_eval), else "
            "0.0")),
    }
    RANGES: ClassVar[dict] = dict(positive=("doc_stride", "max_query_length",
                                            "n_best_size", "max_answer_length"))


def check(config):
    """ValueError for what the flags alone get wrong: nothing to do, a --do_* without its
    file."""
    Task().check(config)
    if config.do_train and not config.train_file:
        raise ValueError("--do_train needs --train_file")
    if (config.do_predict or config.do_eval) and not config.predict_file:
        raise ValueError("--do_predict/--do_eval need --predict_file")


def check_windows(max_seq_length, max_query_length, doc_stride, n_best_size,
                  max_answer_length, flags=True):
    """ValueError for window and decoding settings SQuAD cannot run: a sequence without
    room for the question's pieces and three special tokens, a stride, n-best size or
    answer length under 1. flags: the names are the command's flags (--doc_stride), else
    squad_config.json's keys, each with its value (the serving module's)."""
    dash = "--" if flags else ""
    if max_seq_length <= max_query_length + 3:
        raise ValueError(f"{dash}max_seq_length ({max_seq_length}) must be greater than "
                         f"{dash}max_query_length ({max_query_length}) + 3")
    for name, value in (("doc_stride", doc_stride), ("n_best_size", n_best_size),
                        ("max_answer_length", max_answer_length)):
        if value < 1:
            raise ValueError(f"{dash}{name} must be >= 1" + ("" if flags else
                                                            f", got {value}"))


def filled(config, saved):
    """The config with its unset settings the training run's values (`saved`, its
    squad_config.json; {} at training), else DEFAULTS; checked (check_windows)."""
    config = config.replace(**{key: saved.get(key, default)
                               for key, default in DEFAULTS.items()
                               if getattr(config, key) is None})
    check_windows(config.max_seq_length, config.max_query_length, config.doc_stride,
                  config.n_best_size, config.max_answer_length)
    return config


def window_settings(config):
    """The window and decoding settings a training run keeps (WINDOW_DEFAULTS' keys)."""
    return {key: getattr(config, key) for key in WINDOW_DEFAULTS}
