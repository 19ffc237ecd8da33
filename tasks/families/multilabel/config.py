"""MultiLabelConfig, the multi-label family's settings, and the checks its flags and label
file allow before anything loads: TensorFlow-free, so that `python -m
tasks.families.multilabel` refuses a bad command in one line before TensorFlow and the
model load (task.py's MultiLabelTask runs the same checks, for Python callers)."""

import dataclasses

from tasks import text_inputs
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
