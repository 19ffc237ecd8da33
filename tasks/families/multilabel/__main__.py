"""`python -m tasks.families.multilabel`: fine-tune, evaluate and predict multi-label
classification of texts or text pairs (tasks/families/multilabel/__init__.py)."""

from tasks import common, text_inputs
from tasks.families.multilabel.task import MultiLabelConfig, MultiLabelTask

# Help texts in --help's order; defaults and types are MultiLabelConfig's fields.
FLAGS = {
    "train_file": dict(help="training .tsv/.csv/.jsonl"),
    "dev_file": dict(help="evaluation file (with labels): picks the best weights and "
                          "each label's threshold"),
    "test_file": dict(help="file to predict (labels not needed)"),
    "text_a_column": dict(help="column/key of the text"),
    "text_b_column": dict(help="column/key of a second text, for text pairs"),
    "label_column": dict(help="column/key of the label set: a JSON list (.jsonl) or "
                              "names separated by --label_delimiter"),
    "label_file": dict(help="the labels, one per line, in class-id order (default: the "
                            "training file's, sorted)"),
    "label_delimiter": dict(help="what separates the names of a label set written as text"),
    "has_header": dict(help=".tsv/.csv: first row names the columns (else columns are "
                            "0-based indices)"),
    "allow_empty_labels": dict(help="a row may have no label (false: such a row is an "
                                    "error)"),
    **text_inputs.FLAGS,
    **common.JIT_COMPILE_FLAG,
}


def add_flags(parser):
    common.add_common_flags(parser, MultiLabelConfig)
    return common.add_config_flags(parser, MultiLabelConfig, FLAGS)


def main(argv=None):
    parser = add_flags(common.parser(
        "Fine-tune, evaluate and predict multi-label classification with BERT: every "
        "text has a set of labels."))
    parser.prog = "python -m tasks.families.multilabel"
    return common.run(MultiLabelTask(), MultiLabelConfig, parser.parse_args(argv))


if __name__ == "__main__":
    main()
