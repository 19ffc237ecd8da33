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

from tasks import common
from tasks.families.classification.config import ClassificationConfig, check


def add_flags(parser):
    return common.add_flags(parser, ClassificationConfig)


def family(config):
    """The family's Task, imported once the flags passed their checks: a bad command
    (and --help) is answered before TensorFlow is imported."""
    check(config)
    from tasks.families.classification.task import ClassificationTask
    return ClassificationTask()


def main(argv=None):
    parser = add_flags(common.parser(
        "Fine-tune, evaluate and predict GLUE tasks or your own sentence (pair) "
        "classification / regression data with BERT."))
    return common.run(family, ClassificationConfig, parser.parse_args(argv))


if __name__ == "__main__":
    main()
