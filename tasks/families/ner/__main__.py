"""`python -m tasks.ner` (or `python -m tasks.families.ner`): fine-tune and evaluate BERT
for named-entity recognition on CoNLL files. Flags -> NerConfig -> tasks/driver.py; the
family (first-piece labelling, NerTask) is task.py beside this, whose docstring describes
the files, the labelling and the feature-based recipe; its reader is data.py.

    python -m tasks.ner --init_checkpoint=MODEL_DIR --output_dir=out \\
        --do_train --train_file=eng.train --do_eval --eval_file=eng.testa \\
        --do_predict --predict_file=eng.testb \\
        [--feature_based [--feature_layers=sum_last_four] [--feature_head=bilstm]]
"""

from tasks import common
from tasks.families.ner.config import NerConfig, check


def add_flags(parser):
    return common.add_flags(parser, NerConfig)    # max_seq_length: unset (the run's)


def family(config):
    """The family's Task, imported once the flags passed their checks: a bad command
    (and --help) is answered before TensorFlow is imported."""
    check(config)
    from tasks.families.ner.task import NerTask
    return NerTask()


def main(argv=None):
    parser = add_flags(common.parser("Fine-tune and evaluate BERT for CoNLL NER."))
    return common.run(family, NerConfig, parser.parse_args(argv))


if __name__ == "__main__":
    main()
