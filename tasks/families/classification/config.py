"""ClassificationConfig, the classification family's settings: its flags (help texts,
defaults, ranges), the columns custom data defaults to, and the checks of its flags.
TensorFlow-free (the flags and GLUE's task table only)."""

import dataclasses
from typing import ClassVar

from tasks import driver, text_inputs
from tasks.families.classification.data import GLUE_TASKS, TASK_NAMES
from tasks.task import Task

# Custom data's columns when the flags name none (and the trained run kept none).
CUSTOM_COLUMNS = {"text_a_column": "sentence", "text_b_column": None,
                  "label_column": "label"}


@dataclasses.dataclass(frozen=True)
class ClassificationConfig(text_inputs.WindowConfig):
    """FineTuneConfig + where the data is (a GLUE task, or --task_name=custom files) + how
    a long text is read (tasks/text_inputs.py)."""
    task_name: str = "custom"
    data_dir: str = None
    tfds_data_dir: str = None
    train_file: str = None
    dev_file: str = None
    test_file: str = None
    text_a_column: str = None
    text_b_column: str = None
    label_column: str = None
    has_header: bool = True
    labels: str = None
    regression: bool = False
    bad_rows: str = "skip"

    # Help texts in --help's order; defaults and types are the fields above.
    FLAGS: ClassVar[dict] = {
        "task_name": dict(required=True, choices=TASK_NAMES),
        "data_dir": dict(help="GLUE task folder (train.tsv, dev.tsv, test.tsv; MNLI: "
                              "dev_matched.tsv ...) or the GLUE root holding it"),
        "tfds_data_dir": dict(help="read tensorflow-datasets glue/<task> prepared under "
                                   "this directory instead (never downloads)"),
        "train_file": dict(help="custom: training .tsv/.csv/.jsonl"),
        "dev_file": dict(help="custom: evaluation file (with labels)"),
        "test_file": dict(help="custom: file to predict (labels not needed)"),
        "text_a_column": dict(help="custom: column/key of the first text (default: "
                                   "sentence, or the trained run's)"),
        "text_b_column": dict(help="custom: column/key of the second text, for sentence "
                                   "pairs (default: none, or the trained run's)"),
        "label_column": dict(help="custom: column/key of the label (default: label, or the "
                                  "trained run's)"),
        "has_header": dict(help="custom .tsv/.csv: first row names the columns (else "
                                "columns are 0-based indices)"),
        "labels": dict(help="custom: comma-separated label names in class-id order "
                            "(default: the sorted labels of --train_file)"),
        "regression": dict(help="custom: the label is a number (MSE loss, "
                                "Pearson/Spearman)"),
        "bad_rows": dict(choices=("skip", "error"), help=(
            "skip: count bad rows (malformed, empty text, unknown label) and report them; "
            "error: stop at the first with its file and line")),
        **text_inputs.FLAGS,
        **driver.JIT_COMPILE_FLAG,
    }


def text_segments(config):
    """How many texts one sequence packs: a GLUE task's, else 2 with --text_b_column."""
    task = GLUE_TASKS.get(config.task_name)
    return 2 if (task.pair if task else config.text_b_column is not None) else 1


def check(config):
    """ValueError for what the flags alone get wrong: nothing to do, custom data's --do_*
    without its file, a GLUE task without its data, the window flags of a training run."""
    Task().check(config)
    if config.task_name == "custom":
        for flag, name in (("do_train", "train_file"), ("do_eval", "dev_file"),
                           ("do_predict", "test_file")):
            if getattr(config, flag) and not getattr(config, name):
                raise ValueError(f"--task_name=custom --{flag} needs --{name}")
    elif not (config.data_dir or config.tfds_data_dir):
        raise ValueError(f"--task_name={config.task_name} needs --data_dir (GLUE TSV "
                         f"files) or --tfds_data_dir (prepared tfds "
                         f"glue/{config.task_name})")
    if config.do_train:        # a later run's pairs are the trained run's (restore)
        text_inputs.check(config, text_segments(config) == 2)
