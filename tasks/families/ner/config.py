"""NerConfig, the NER family's settings: its flags (help texts, defaults, ranges), the
feature-based head's defaults and the checks of its flags."""

import dataclasses
from typing import ClassVar

from bert_tf.models.feature_choices import (DEFAULT_FEATURE_LAYERS, DEFAULT_LSTM_UNITS,
                                            FEATURE_HEADS, FEATURE_LAYERS)
from tasks import driver
from tasks.families.ner.data import LINE_UNITS
from tasks.task import Task


@dataclasses.dataclass(frozen=True)
class NerConfig(driver.FineTuneConfig):
    max_seq_length: int = None       # training: 128; later runs: the trained run's
    train_file: str = None
    eval_file: str = None
    predict_file: str = None
    feature_based: bool = False
    feature_layers: str = DEFAULT_FEATURE_LAYERS
    feature_head: str = "linear"
    feature_lstm_units: int = DEFAULT_LSTM_UNITS
    cache_features: bool = True
    extracted_features: str = None   # extract_features' TFRecord files (frozen_features.py)
    line_unit: str = "auto"          # what a line of the files holds (data.py's LINE_UNITS)
    doc_stride: int = None           # training: half a window; later runs: the trained run's

    # Help texts in --help's order; defaults and types are the fields above.
    FLAGS: ClassVar[dict] = {
        "train_file": dict(help="CoNLL file to train on"),
        "eval_file": dict(help="CoNLL file to score (--do_eval); also the validation set for "
                               "best.weights.h5"),
        "predict_file": dict(help="CoNLL file to tag (--do_predict); scored too when it has "
                                  "gold tags"),
        "feature_based": dict(help="freeze the encoder and train only a head on its layers "
                                   "(the paper's feature-based recipe, section 5.3)"),
        "feature_layers": dict(help=(
            "with --feature_based, the layers the head reads: " + ", ".join(FEATURE_LAYERS) +
            " (sum_*: a learned softmax-weighted sum; sum_all: every transformer layer)")),
        "feature_head": dict(help="with --feature_based: linear (one dense layer) or bilstm "
                                  "(two bidirectional LSTM layers, then the dense layer: the "
                                  "paper's)"),
        "feature_lstm_units": dict(help="--feature_head=bilstm: hidden units per direction "
                                        "(the paper's 768)"),
        "cache_features": dict(help="with --feature_based: run the frozen encoder once per "
                                    "file and keep its features in OUTPUT_DIR/feature_cache/; "
                                    "false: run it at every step"),
        "extracted_features": dict(help=(
            "with --feature_based: read the frozen features from bert_tf.extract_features' "
            "TFRecord files (comma-separated globs; its tfrecord output format) over the "
            "sentences' texts, one a line, instead of running the encoder over each file; "
            "found by "
            "their word pieces, checked against the encoder")),
        "doc_stride": dict(help="a sentence longer than max_seq_length - 2 pieces is read in "
                                "overlapping windows of whole words starting this many pieces "
                                "apart, each word tagged in the window where it has the most "
                                "context (google's SQuAD rule), at most max_seq_length - 2 "
                                "(windows end to end); training: default half a "
                                "window, recorded for the export; later runs: the run's (a "
                                "run without one: consecutive parts)"),
        "line_unit": dict(help="what a line of the CoNLL files holds: word (joined with "
                               "spaces into a sentence's text: CoNLL-2003, segmented "
                               "Chinese), character (joined with nothing: MSRA, Weibo, "
                               "Latin letters one a line too) or auto (each file's own: "
                               "character when at least 99%% of its lines hold one); the "
                               "text is cut into words as the export cuts raw text"),
    }
    RANGES: ClassVar[dict] = dict(positive=("doc_stride", "feature_lstm_units"))

    def feature_settings(self):
        return {"feature_layers": self.feature_layers, "feature_head": self.feature_head,
                "feature_lstm_units": self.feature_lstm_units}


FEATURE_DEFAULTS = NerConfig("").feature_settings()


def check(config):
    """ValueError for what the flags alone get wrong: nothing to do, a --do_* without its
    file, a feature-based flag without --feature_based or out of its choices, an
    --extracted_features without the cached head, an unknown --line_unit."""
    Task().check(config)
    for flag, name in (("do_train", "train_file"), ("do_eval", "eval_file"),
                       ("do_predict", "predict_file")):
        if getattr(config, flag) and not getattr(config, name):
            raise ValueError(f"--{flag} needs --{name}")
    choices = {"feature_layers": FEATURE_LAYERS, "feature_head": FEATURE_HEADS}
    for name, value in config.feature_settings().items():
        if name in choices and value not in choices[name]:
            raise ValueError(f"--{name} must be one of {', '.join(choices[name])}; "
                             f"got {value!r}")
        if value != FEATURE_DEFAULTS[name] and not config.feature_based:
            raise ValueError(f"--{name}={value} needs --feature_based")
    if config.feature_lstm_units < 1:
        raise ValueError(f"--feature_lstm_units must be >= 1, got "
                         f"{config.feature_lstm_units}")
    if config.feature_lstm_units != DEFAULT_LSTM_UNITS and config.feature_head != "bilstm":
        raise ValueError("--feature_lstm_units needs --feature_head=bilstm")
    if config.extracted_features and not (config.feature_based and config.cache_features):
        raise ValueError("--extracted_features needs --feature_based (and "
                         "--cache_features, the head run alone on stored features)")
    if config.line_unit not in ("auto",) + LINE_UNITS:
        raise ValueError(f"--line_unit must be one of auto, {', '.join(LINE_UNITS)}; "
                         f"got {config.line_unit!r}")
