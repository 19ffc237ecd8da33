"""`python -m tasks.search`: the BERT paper's fine-tuning protocol for any task family.
Every setting of a grid (default: the learning rate among 5e-5, 4e-5, 3e-5 and 2e-5, with
the families' batches of 32 and 3 epochs) is trained --restarts times (seeds SEED,
SEED+1, ...: another data order and initialisation of the new layers; the encoder always
starts from the family's init_checkpoint), each trial an ordinary run of the family's
command; the setting with the best mean dev score is chosen, and only its restarts are
then scored on --test_file.

    python -m tasks.search --task=ner --output_dir=runs/ner_search \\
        --grid='learning_rate=5e-5,4e-5,3e-5,2e-5' --restarts=5 --test_file=eng.testb \\
        -- --init_checkpoint=bert-base-cased --do_lower_case=false \\
           --train_file=eng.train --eval_file=eng.testa

Flags after `--` are the family's own (`python -m tasks.<family> --help`), given to every
trial; --output_dir, --do_train, --do_eval and --do_predict are the search's. The dev
score each family chooses by, the reports, resuming and several machines: tasks/README.md,
"Choosing settings: the paper's protocol".
"""

import importlib
import os
import sys

from bert_tf.base.cli import (ArgumentParser, check_flags, check_not_inputs,
                              check_output_place, run_main)
from bert_tf.base.training_plumbing import Interrupted
from tasks.families import REGISTRY, family_class
from tasks.search import plan as plans

HELP = {
    "task": "the task family (tasks/families/): its command trains each trial",
    "output_dir": ("the search's folder: search.json, tuner/ (KerasTuner's trials), runs/ "
                   "(one run folder of the family per trial), test/, results.json, "
                   "results.md, dev_scores.png, tensorboard/"),
    "grid": (f"the settings: NAME=V1,V2,... for any flag of the family, axes separated "
             f"by ';' (or the flag given again); 'paper' ({plans.PAPER_GRID}; batch 32 "
             f"and 3 epochs are the flags' defaults) or 'appendix' "
             f"({plans.GRIDS['appendix']})"),
    "restarts": ("trials of each setting, with seeds SEED, SEED+1, ... (the family's "
                 "seed flag, default 12345): the data order and the new layers' "
                 "initialisation change, the encoder's starting weights do not"),
    "metric": ("the dev score to choose by, an eval_results.txt name (default: the "
               "family's main score: classification its GLUE metric or accuracy, "
               "regression Pearson, ner eval_f1, squad f1, swag eval_accuracy, "
               "multilabel eval_micro_f1); a name with 'loss' in it is minimised"),
    "test_file": ("scored after the choice, by the chosen setting's restarts only, in "
                  "place of the family's dev file; never read before"),
    "export_dir": ("export the chosen setting's best restart there (export.saved_model: a "
                   "new version folder); without it, results.md gives the command"),
}


EPILOG = ("The family's own flags follow `--` (python -m tasks.<family> --help) and go to "
          "every trial; the search sets each command's output folder and its do_train, "
          "do_eval and do_predict switches itself. Each trial is an ordinary run folder "
          "(OUTPUT_DIR/runs/trial_N); a search stopped (SIGTERM, kill -9) continues where "
          "it was when run again, and one asked to run another grid, other flags or on "
          "changed data in the same folder is refused. Several processes or machines: "
          "tasks/README.md, Choosing settings.")


class FamilyParser(ArgumentParser):
    """A family's flags, parsed by the search: a bad one is the search's one-line error."""

    def error(self, message):
        raise ValueError(f"the family's flags (after --): {' '.join(message.split())} "
                         f"(see python -m {self.prog} --help)")


def parser():
    p = ArgumentParser(prog="python -m tasks.search", usage=(
        "python -m tasks.search --task=FAMILY --output_dir=DIR [--grid=NAME=V1,V2,...] "
        "[--restarts=N] [--metric=NAME] [--test_file=PATH] [--export_dir=DIR] -- "
        "FAMILY_FLAGS"), description=__doc__.split("\n\n")[0], epilog=EPILOG)
    p.add_argument("--task", required=True, choices=tuple(REGISTRY), help=HELP["task"])
    p.add_argument("--output_dir", required=True, help=HELP["output_dir"])
    p.add_argument("--grid", action="append", default=None, help=HELP["grid"])
    p.add_argument("--restarts", type=int, default=plans.RESTARTS, help=HELP["restarts"])
    p.add_argument("--metric", default=None, help=HELP["metric"])
    p.add_argument("--test_file", default=None, help=HELP["test_file"])
    p.add_argument("--export_dir", default=None, help=HELP["export_dir"])
    return p


def family_parser(task_class):
    """(the family's command module, its flags' parser)."""
    command = task_class.__module__.rpartition(".")[0]
    try:
        module = importlib.import_module(command + ".__main__")
    except ImportError:
        raise ValueError(f"--task={task_class.export_name}: the family has no command "
                         f"({command}/__main__.py) to run its trials") from None
    return command, module.add_flags(FamilyParser(prog=command))


def plan_of(args):
    """The search's Plan from the flags, every check that flags and files allow done
    (nothing written), and the (flag, path) inputs and init_checkpoint of its trials."""
    grid = plans.parse_grid(args.grid or ["paper"])
    if args.metric and args.metric.startswith(plans.HELD_OUT_PREFIXES):
        raise ValueError(f"--metric={args.metric} is a score of held-out data: a setting "
                         f"is chosen on dev (the family's eval_results.txt names), the "
                         f"test set is scored after the choice (--test_file)")
    task_class = family_class(args.task)
    task = task_class()
    command, family = family_parser(task_class)
    given = plans.given_flags(family, args.family_flags)
    own = family.parse_args(["--output_dir", "-", *args.family_flags])
    fields = set(vars(own))
    for name, _ in grid:
        if name not in fields:
            raise ValueError(f"--grid: {name} is not a flag of {args.task} (python -m "
                             f"{command} --help)")
        if name in plans.NOT_AXES:
            raise ValueError(f"--grid: {name} is no setting to choose: "
                             + ("the restarts vary it (--restarts)" if name == "seed" else
                                "every trial starts from the same encoder" if name not in
                                plans.SEARCH_FLAGS else "the search sets it"))
        if name in given:
            raise ValueError(f"--{name} is both a family flag and a --grid axis: give "
                             f"it in one place")
    reserved = [f"--{name}" for name in plans.SEARCH_FLAGS if name in given]
    if reserved:
        raise ValueError(f"{', '.join(reserved)}: the search sets --output_dir, --do_train, "
                         f"--do_eval and --do_predict of every command it runs; drop "
                         f"{'it' if len(reserved) == 1 else 'them'} from the family's flags")
    config_class = task_class.config_class or _fine_tune_config()
    probe = plans.Plan(args.task, command, tuple(args.family_flags), tuple(
        (n, tuple(v)) for n, v in grid), args.restarts, 0, "", "max")
    configs = []
    for setting in probe.settings:
        values = family.parse_args(probe.trial_argv(setting, 0, args.output_dir))
        check_flags(values, **config_class.flag_ranges())
        configs.append(config_class.from_args(values))
        task.check(configs[-1])
    base = configs[0]
    metric, direction = (args.metric, "min" if "loss" in args.metric else "max") \
        if args.metric else (task.main_metric(base) or (None, None))
    if metric is None:
        raise ValueError(f"--task={args.task} names no main score: pass --metric")
    dev_flag = task.dev_file_flag(base)
    if dev_flag and not getattr(base, dev_flag, None):
        raise ValueError(f"the search chooses on a dev set: pass the family's "
                         f"--{dev_flag} (after --)")
    inputs = list(dict.fromkeys(pair for config in configs
                                for pair in task.input_files(config) if pair[1]))
    for flag, path in inputs:
        if path == getattr(base, flag.lstrip("-"), None) and "://" not in path and \
                not os.path.exists(path):
            raise FileNotFoundError(2, "No such file or directory", path)
    check_test_file(args, dev_flag, inputs)
    check_not_inputs([("output_dir", args.output_dir)],
                     inputs + ([("--test_file", args.test_file)] if args.test_file else []),
                     checkpoints=[("--init_checkpoint", base.init_checkpoint)],
                     writes=plans.WRITES)
    if args.export_dir:
        check_output_place("export_dir", args.export_dir, folder=True)
    plan = plans.Plan(args.task, command, tuple(args.family_flags),
                      probe.grid, args.restarts, own.seed, metric, direction,
                      dev_flag, args.test_file)
    return plan, inputs, base.init_checkpoint


def _fine_tune_config():
    from tasks.driver import FineTuneConfig
    return FineTuneConfig


def check_test_file(args, dev_flag, inputs):
    """--test_file: a file, scored in place of the family's dev file, that is none of
    the trials' inputs."""
    if not args.test_file:
        return
    if not os.path.isfile(args.test_file):
        raise FileNotFoundError(2, "No such file", args.test_file)
    if dev_flag is None:
        raise ValueError(f"--test_file: --task={args.task} with these flags reads its dev "
                         f"set from a data folder; no other file can be scored in its "
                         f"place (pass the dev file by name to score a test file)")
    for flag, path in inputs:
        if os.path.exists(path) and os.path.samefile(path, args.test_file):
            raise ValueError(f"--test_file={args.test_file} is also the trials' {flag}: "
                             + ("choosing on it would choose on the test set" if
                                flag == f"--{dev_flag}" else "the test set must be "
                                "data the trials never read"))


def search(args):
    from tasks.search import run
    output_dir = args.output_dir
    check_output_place("output_dir", output_dir, folder=True)
    grid = plans.parse_grid(args.grid or ["paper"])
    saved = plans.read_record(output_dir)
    if saved is not None:
        # A rerun that asks for another search is refused before the family loads.
        plans.check_request(saved, {"family": args.task,
                                    "grid": [[n, list(v)] for n, v in grid],
                                    "restarts": args.restarts,
                                    "flags": list(args.family_flags)}, output_dir)
        plans.check_inputs(saved, output_dir)
    plan, inputs, checkpoint = plan_of(args)
    return run.search(plan, output_dir, inputs, checkpoint, saved, args.export_dir)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    own, family = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) \
        if "--" in argv else (argv, [])
    args = parser().parse_args(own)
    args.family_flags = family
    # The search's folder is locked in run.search (not by a worker of a distributed
    # search, whose chief holds it).
    return run_main(search, args, errors=(Interrupted, plans.TrialFailed), positive=("restarts",),
                    lock=())


if __name__ == "__main__":
    main()
