"""`python -m tasks.squad` (or `python -m tasks.families.squad`): fine-tune, predict and
score SQuAD v1.1 / v2.0. Flags -> SquadConfig -> tasks/driver.py; the family (span model,
SquadTask) is task.py beside this, whose docstring lists what a run writes.

    python -m tasks.squad --init_checkpoint=MODEL_DIR --output_dir=out \\
        --do_train --train_file=train-v1.1.json \\
        --do_predict --do_eval --predict_file=dev-v1.1.json [--version_2_with_negative]
"""

from tasks import common
from tasks.families.squad.config import SquadConfig, check


def add_flags(parser):
    return common.add_flags(parser, SquadConfig)  # max_seq_length: unset (the run's)


def family(config):
    """The family's Task, imported once the flags passed their checks: a bad command
    (and --help) is answered before TensorFlow is imported."""
    check(config)
    from tasks.families.squad.task import SquadTask
    return SquadTask()


def main(argv=None):
    parser = add_flags(common.parser("Fine-tune and evaluate BERT on SQuAD v1.1 / v2.0."))
    return common.run(family, SquadConfig, parser.parse_args(argv))


if __name__ == "__main__":
    main()
