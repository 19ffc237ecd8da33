"""`python -m tasks.glue` (or `python -m tasks.families.classification`): fine-tune, evaluate and
predict GLUE tasks or the user's sentence (pair) classification / regression files.
Flags -> ClassificationConfig -> tasks/driver.py; the family (model, metrics,
ClassificationTask) is task.py beside this, whose docstring describes the data and what a
run writes.

    python -m tasks.glue --task_name=mrpc --data_dir=glue_data/MRPC \\
        --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt --output_dir=runs/mrpc \\
        --do_train --do_eval --do_predict
    python -m tasks.glue --task_name=custom --train_file=train.csv --dev_file=dev.csv \\
        --test_file=test.jsonl --text_a_column=review --label_column=stars ...
"""

from tasks import common, text_inputs
from tasks.families.classification.task import TASK_NAMES, ClassificationConfig, ClassificationTask

# Help texts in --help's order; defaults and types are ClassificationConfig's fields.
FLAGS = {
    "task_name": dict(required=True, choices=TASK_NAMES),
    "data_dir": dict(help="GLUE task folder (train.tsv, dev.tsv, test.tsv; MNLI: "
                          "dev_matched.tsv ...) or the GLUE root holding it"),
    "tfds_data_dir": dict(help="read tensorflow-datasets glue/<task> prepared under this "
                               "directory instead (never downloads)"),
    "train_file": dict(help="custom: training .tsv/.csv/.jsonl"),
    "dev_file": dict(help="custom: evaluation file (with labels)"),
    "test_file": dict(help="custom: file to predict (labels not needed)"),
    "text_a_column": dict(help="custom: column/key of the first text (default: sentence, "
                               "or the trained run's)"),
    "text_b_column": dict(help="custom: column/key of the second text, for sentence pairs "
                               "(default: none, or the trained run's)"),
    "label_column": dict(help="custom: column/key of the label (default: label, or the "
                              "trained run's)"),
    "has_header": dict(help="custom .tsv/.csv: first row names the columns (else columns "
                            "are 0-based indices)"),
    "labels": dict(help="custom: comma-separated label names in class-id order (default: "
                        "the sorted labels of --train_file)"),
    "regression": dict(help="custom: the label is a number (MSE loss, Pearson/Spearman)"),
    "bad_rows": dict(choices=("skip", "error"), help=(
        "skip: count bad rows (malformed, empty text, unknown label) and report them; "
        "error: stop at the first with its file and line")),
    **text_inputs.FLAGS,
    **common.JIT_COMPILE_FLAG,
}


def add_flags(parser):
    common.add_common_flags(parser, ClassificationConfig)
    return common.add_config_flags(parser, ClassificationConfig, FLAGS)


def main(argv=None):
    parser = add_flags(common.parser(
        "Fine-tune, evaluate and predict GLUE tasks or your own sentence (pair) "
        "classification / regression data with BERT."))
    return common.run(ClassificationTask(), ClassificationConfig, parser.parse_args(argv))


if __name__ == "__main__":
    main()
