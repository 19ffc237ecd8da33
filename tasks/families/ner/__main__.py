"""`python -m tasks.ner` (or `python -m tasks.families.ner`): fine-tune and evaluate BERT
for named-entity recognition on CoNLL files. Flags -> NerConfig -> tasks/driver.py; the
family (first-piece labelling, NerTask) is task.py beside this, whose docstring describes
the files, the labelling and the feature-based recipe; its reader is data.py.

    python -m tasks.ner --init_checkpoint=MODEL_DIR --output_dir=out \\
        --do_train --train_file=eng.train --do_eval --eval_file=eng.testa \\
        --do_predict --predict_file=eng.testb \\
        [--feature_based [--feature_layers=sum_last_four] [--feature_head=bilstm]]
"""

from bert_tf.models.task_layers import FEATURE_LAYERS
from tasks import common
from tasks.families.ner.task import NerConfig, NerTask

# Help texts in --help's order; defaults and types are NerConfig's fields.
FLAGS = {
    "train_file": dict(help="CoNLL file to train on"),
    "eval_file": dict(help="CoNLL file to score (--do_eval); also the validation set for "
                           "best.weights.h5"),
    "predict_file": dict(help="CoNLL file to tag (--do_predict); scored too when it has "
                              "gold tags"),
    "feature_based": dict(help="freeze the encoder and train only a head on its layers "
                               "(the paper's feature-based recipe, section 5.3)"),
    "feature_layers": dict(help=(
        "with --feature_based, the layers the head reads: " + ", ".join(FEATURE_LAYERS) +
        " (sum_*: a learned softmax-weighted sum; sum_all: every transformer layer)")),
    "feature_head": dict(help="with --feature_based: linear (one dense layer) or bilstm "
                              "(two bidirectional LSTM layers, then the dense layer: the "
                              "paper's)"),
    "feature_lstm_units": dict(help="--feature_head=bilstm: hidden units per direction "
                                    "(the paper's 768)"),
    "cache_features": dict(help="with --feature_based: run the frozen encoder once per "
                                "file and keep its features in OUTPUT_DIR/feature_cache/; "
                                "false: run it at every step"),
    "extracted_features": dict(help=(
        "with --feature_based: read the frozen features from bert_tf.extract_features' "
        "TFRecord files (comma-separated globs; its tfrecord output format) over the sentences' "
        "texts, one a line, instead of running the encoder over each file; found by "
        "their word pieces, checked against the encoder")),
    "doc_stride": dict(help="a sentence longer than max_seq_length - 2 pieces is read in "
                            "overlapping windows of whole words starting this many pieces "
                            "apart, each word tagged in the window where it has the most "
                            "context (google's SQuAD rule), at most max_seq_length - 2 "
                            "(windows end to end); training: default half a "
                            "window, recorded for the export; later runs: the run's (a "
                            "run without one: consecutive parts)"),
    "line_unit": dict(help="what a line of the CoNLL files holds: word (joined with "
                           "spaces into a sentence's text: CoNLL-2003, segmented "
                           "Chinese), character (joined with nothing: MSRA, Weibo, "
                           "Latin letters one a line too) or auto (each file's own: "
                           "character when at least 99%% of its lines hold one); the "
                           "text is cut into words as the export cuts raw text"),
}


def add_flags(parser):
    common.add_common_flags(parser, NerConfig)    # max_seq_length: unset (the run's)
    return common.add_config_flags(parser, NerConfig, FLAGS)


def main(argv=None):
    parser = add_flags(common.parser("Fine-tune and evaluate BERT for CoNLL NER."))
    return common.run(NerTask(), NerConfig, parser.parse_args(argv))


if __name__ == "__main__":
    main()
