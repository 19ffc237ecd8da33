"""`python -m tasks.swag` (or `python -m tasks.families.swag`): fine-tune, evaluate and
predict SWAG (choose the ending of a sentence among four). Flags -> SwagConfig ->
tasks/driver.py; the family (reader, preprocessing, SwagTask) is task.py beside this.

    python -m tasks.swag --data_dir=swagaf/data --init_checkpoint=MODEL_DIR \\
        --output_dir=runs/swag --do_train --do_eval --do_predict
"""

from tasks import common
from tasks.families.swag.config import SwagConfig
from tasks.task import Task


def add_flags(parser):
    return common.add_flags(parser, SwagConfig)


def family(config):
    """The family's Task, imported once the flags passed their checks: a bad command
    (and --help) is answered before TensorFlow is imported."""
    Task().check(config)
    from tasks.families.swag.task import SwagTask
    return SwagTask()


def main(argv=None):
    parser = add_flags(common.parser(
        "Fine-tune, evaluate and predict SWAG (four-way multiple choice) with BERT."))
    return common.run(family, SwagConfig, parser.parse_args(argv))


if __name__ == "__main__":
    main()
