"""`python -m tasks.squad` (or `python -m tasks.families.squad`): fine-tune, predict and
score SQuAD v1.1 / v2.0. Flags -> SquadConfig -> tasks/driver.py; the family (span model,
SquadTask) is task.py beside this, whose docstring lists what a run writes.

    python -m tasks.squad --init_checkpoint=MODEL_DIR --output_dir=out \\
        --do_train --train_file=train-v1.1.json \\
        --do_predict --do_eval --predict_file=dev-v1.1.json [--version_2_with_negative]
"""

from tasks import common
from tasks.families.squad.task import DEFAULTS, SquadConfig, SquadTask

# Help texts in --help's order; the fields' defaults are None (unset): the values stored
# in output_dir by the training run when predicting without --do_train, else DEFAULTS.
FLAGS = {
    "train_file": dict(help="SQuAD JSON for training"),
    "predict_file": dict(help=(
        "SQuAD JSON to predict (--do_predict) and score (--do_eval); also the "
        "validation set that picks best.weights.h5 during training")),
    "version_2_with_negative": dict(
        help="SQuAD 2.0: questions may have no answer (default False)"),
    "doc_stride": dict(help=(
        f"pieces between the starts of two windows over a context (default "
        f"{DEFAULTS['doc_stride']}); a window holds max_seq_length - 3 - the question's "
        f"pieces of it, and a stride of that or more reads the windows end to end, "
        f"skipping none (google's run_squad)")),
    "max_query_length": dict(help=f"default {DEFAULTS['max_query_length']}"),
    "n_best_size": dict(help=f"default {DEFAULTS['n_best_size']}"),
    "max_answer_length": dict(help=f"default {DEFAULTS['max_answer_length']}"),
    "null_score_diff_threshold": dict(help=(
        "v2.0: answer '' when null score - best non-null score exceeds this; default: "
        "the value tuned on dev (stored in output_dir by --do_train --do_eval), else 0.0")),
}


def add_flags(parser):
    common.add_common_flags(parser, SquadConfig)  # max_seq_length: unset (the run's)
    return common.add_config_flags(parser, SquadConfig, FLAGS)


def main(argv=None):
    parser = add_flags(common.parser("Fine-tune and evaluate BERT on SQuAD v1.1 / v2.0."))
    return common.run(SquadTask(), SquadConfig, parser.parse_args(argv))


if __name__ == "__main__":
    main()
