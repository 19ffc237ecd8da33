"""`python -m tasks.swag` (or `python -m tasks.families.swag`): fine-tune, evaluate and
predict SWAG (choose the ending of a sentence among four). Flags -> SwagConfig ->
tasks/driver.py; the family (reader, preprocessing, SwagTask) is task.py beside this.

    python -m tasks.swag --data_dir=swagaf/data --init_checkpoint=MODEL_DIR \\
        --output_dir=runs/swag --do_train --do_eval --do_predict
"""

from tasks import common
from tasks.families.swag.task import SwagConfig, SwagTask

# Help texts in --help's order; defaults and types are SwagConfig's fields.
FLAGS = {
    "data_dir": dict(help="folder with train.csv, val.csv, test.csv"),
    "train_file": dict(help="default: DATA_DIR/train.csv"),
    "dev_file": dict(help="default: DATA_DIR/val.csv"),
    "test_file": dict(help="default: DATA_DIR/test.csv"),
    "bad_rows": dict(choices=("skip", "error"),
                     help="skip: count bad rows and report them; error: stop at the first"),
    **common.JIT_COMPILE_FLAG,
}


def add_flags(parser):
    common.add_common_flags(parser, SwagConfig)
    return common.add_config_flags(parser, SwagConfig, FLAGS)


def main(argv=None):
    parser = add_flags(common.parser(
        "Fine-tune, evaluate and predict SWAG (four-way multiple choice) with BERT."))
    return common.run(SwagTask(), SwagConfig, parser.parse_args(argv))


if __name__ == "__main__":
    main()
