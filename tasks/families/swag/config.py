"""SwagConfig, the SWAG family's settings: its files and its flags (help texts; defaults
and types are the fields'). TensorFlow-free."""

import dataclasses
from typing import ClassVar

from tasks import driver


@dataclasses.dataclass(frozen=True)
class SwagConfig(driver.FineTuneConfig):
    data_dir: str = None
    train_file: str = None
    dev_file: str = None
    test_file: str = None
    bad_rows: str = "skip"

    # Help texts in --help's order; defaults and types are the fields above.
    FLAGS: ClassVar[dict] = {
        "data_dir": dict(help="folder with train.csv, val.csv, test.csv"),
        "train_file": dict(help="default: DATA_DIR/train.csv"),
        "dev_file": dict(help="default: DATA_DIR/val.csv"),
        "test_file": dict(help="default: DATA_DIR/test.csv"),
        "bad_rows": dict(choices=("skip", "error"),
                         help="skip: count bad rows and report them; error: stop at the "
                              "first"),
        **driver.JIT_COMPILE_FLAG,
    }
