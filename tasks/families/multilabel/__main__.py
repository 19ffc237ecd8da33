"""`python -m tasks.families.multilabel`: fine-tune, evaluate and predict multi-label
classification of texts or text pairs (tasks/families/multilabel/__init__.py).

The flags are checked (config.py's `check`: the flags and the label file) before the
family, and so TensorFlow and the model, are imported: a bad command is refused at once."""

from tasks import common
from tasks.families.multilabel.config import MultiLabelConfig, check


def add_flags(parser):
    return common.add_flags(parser, MultiLabelConfig)


def family(config):
    """The family's Task, imported once the flags passed their checks."""
    check(config)
    from tasks.families.multilabel.task import MultiLabelTask
    return MultiLabelTask()


def main(argv=None):
    parser = add_flags(common.parser(
        "Fine-tune, evaluate and predict multi-label classification with BERT: every "
        "text has a set of labels."))
    parser.prog = "python -m tasks.families.multilabel"
    return common.run(family, MultiLabelConfig, parser.parse_args(argv))


if __name__ == "__main__":
    main()
