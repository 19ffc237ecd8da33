"""`python -m tasks.squad` (or `python -m tasks.families.squad`): fine-tune, predict and
score SQuAD v1.1 / v2.0. Flags -> SquadConfig -> tasks/driver.py; the family (span model,
SquadTask) is task.py beside this, whose docstring lists what a run writes.

    python -m tasks.squad --init_checkpoint=MODEL_DIR --output_dir=out \\
        --do_train --train_file=train-v1.1.json \\
        --do_predict --do_eval --predict_file=dev-v1.1.json [--version_2_with_negative]
"""

from tasks import common
from tasks.families.squad.config import SquadConfig
from tasks.families.squad.task import SquadTask


def add_flags(parser):
    return common.add_flags(parser, SquadConfig)  # max_seq_length: unset (the run's)


def main(argv=None):
    parser = add_flags(common.parser("Fine-tune and evaluate BERT on SQuAD v1.1 / v2.0."))
    return common.run(SquadTask(), SquadConfig, parser.parse_args(argv))


if __name__ == "__main__":
    main()
