"""`python -m tasks.families.multilabel`: fine-tune, evaluate and predict multi-label
classification of texts or text pairs (tasks/families/multilabel/__init__.py).

The flags are checked (config.py's `check`: the flags and the label file) before the
family, and so TensorFlow and the model, are imported: a bad command is refused at once."""

from tasks import common, text_inputs
from tasks.families.multilabel.config import MultiLabelConfig, check

# Help texts in --help's order; defaults and types are MultiLabelConfig's fields.
FLAGS = {
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
    **common.JIT_COMPILE_FLAG,
}


def add_flags(parser):
    common.add_common_flags(parser, MultiLabelConfig)
    return common.add_config_flags(parser, MultiLabelConfig, FLAGS)


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
