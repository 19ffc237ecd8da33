"""MultiLabelConfig, the multi-label family's settings, and the checks its flags and label
file allow before anything loads: TensorFlow-free, so that `python -m
tasks.families.multilabel` refuses a bad command in one line before TensorFlow and the
model load (task.py's MultiLabelTask runs the same checks, for Python callers)."""

import dataclasses
from typing import ClassVar

from tasks import driver, text_inputs
from tasks.families.multilabel import data
from tasks.task import Task


@dataclasses.dataclass(frozen=True)
class MultiLabelConfig(text_inputs.WindowConfig):
    """FineTuneConfig + how a long text is read (tasks/text_inputs.py) + the files, their
    columns, the labels and how each label's output starts (`label_prior_bias`)."""
    train_file: str = None
    dev_file: str = None
    test_file: str = None
    text_a_column: str = "text"
    text_b_column: str = None
    label_column: str = "labels"
    label_file: str = None
    label_delimiter: str = ","
    has_header: bool = True
    allow_empty_labels: bool = True
    # Each label's output bias starts at the log-odds of its training frequency (task.py's
    # `prior_bias`); False: at 0 (the plain start, HF's).
    label_prior_bias: bool = True

    # Help texts in --help's order; defaults and types are the fields above.
    FLAGS: ClassVar[dict] = {
        "train_file": dict(help=(
            "training .tsv/.csv/.jsonl (with --do_train): a text (or text pair) and its label "
            "set per row")),
        "dev_file": dict(help=(
            "a file with labels, scored with --do_eval (eval_* lines in eval_results.txt); "
            "when the run also trains (--do_train), it picks the best weights and tunes each "
            "label's threshold; without --do_train it is only scored, with the thresholds "
            "the run tuned")),
        "test_file": dict(help=(
            "the file to predict with --do_predict (test_results.jsonl); when it has the "
            "label column too, its predictions are scored (test_* lines in "
            "eval_results.txt)")),
        "text_a_column": dict(help="column/key of the text"),
        "text_b_column": dict(help="column/key of a second text, for text pairs (default: "
                                   "none, a single text)"),
        "label_column": dict(help="column/key of the label set: a JSON list (.jsonl) or "
                                  "names separated by --label_delimiter"),
        "label_file": dict(help="the labels, one per line, in class-id order (default: the "
                                "training file's, sorted)"),
        "label_delimiter": dict(help=(
            "what separates the names of a label set written as text, and joins a text's "
            "predicted labels in the export's `labels` output; a label that contains it is "
            "refused")),
        "has_header": dict(help=".tsv/.csv: first row names the columns (else columns are "
                                "0-based indices)"),
        "allow_empty_labels": dict(help="a row may have no label (false: such a row is an "
                                        "error)"),
        "label_prior_bias": dict(help=(
            "with --do_train: start each label's output bias at the log-odds of its training "
            "frequency, (positives + 0.5) / (rows + 1), instead of 0. With many rare labels a "
            "zero start can learn nothing at all (every label collapses to its frequency); "
            "false gives the plain start (docs/benchmarks.md, Multi-label)")),
        **text_inputs.FLAGS,
        **driver.JIT_COMPILE_FLAG,
    }


def check(config):
    """ValueError for what the flags and the label file alone get wrong: nothing to do, a
    --do_* without its file, an empty --label_delimiter, a training run's label file that
    cannot be the classes (tasks.families.multilabel.data.read_label_file)."""
    Task().check(config)
    for flag, name in (("do_train", "train_file"), ("do_eval", "dev_file"),
                       ("do_predict", "test_file")):
        if getattr(config, flag) and not getattr(config, name):
            raise ValueError(f"--{flag} needs --{name}")
    if not config.label_delimiter:
        raise ValueError("--label_delimiter must not be empty")
    if config.do_train:        # a later run's pairs are the trained run's (restore)
        text_inputs.check(config, config.text_b_column is not None)
    if config.do_train and config.label_file:
        data.read_label_file(config.label_file, config.label_delimiter)
