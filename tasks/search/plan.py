"""What a search is before anything trains (no TensorFlow here): its grid of settings, its
restarts and their seeds, each trial's command line, and the record of what it depends on
(`OUTPUT_DIR/search.json`: the family, grid, restarts, family flags, and the inputs and
checkpoint by content), checked on every rerun so that a search never mixes trials of two
grids, two data sets or two checkpoints.

    grid = parse_grid(["learning_rate=5e-5,3e-5;train_batch_size=16,32"])
    plan = Plan(family="classification", command="tasks.families.classification", flags=[...],
                grid=grid, restarts=5, seed=12345, ...)
    plan.trial_argv(setting, restart, run_dir)      # the family's flags for one trial
"""

import argparse
import dataclasses
import itertools
import json
import os

from bert_tf.base.checks import checkpoint_place, real_path
from bert_tf.base.files import changed_data, data_fingerprints, fingerprint

# The paper's protocol (Devlin et al., 2018, section 4 and appendix A.3): the learning rate
# chosen among these on dev, batches of 32, 3 epochs (the fine-tuning flags' defaults).
PAPER_GRID = "learning_rate=5e-5,4e-5,3e-5,2e-5"
# The appendix's wider grid: batch 16 or 32, learning rate 5e-5, 3e-5 or 2e-5, 2 to 4 epochs.
GRIDS = {"paper": PAPER_GRID,
         "appendix": "train_batch_size=16,32;learning_rate=5e-5,3e-5,2e-5;"
                     "num_train_epochs=2,3,4"}
RESTARTS = 5            # the paper's ablations average 5 restarts

# Family flags the search sets itself on every command it runs.
SEARCH_FLAGS = ("output_dir", "do_train", "do_eval", "do_predict")
# Flags that are no setting to choose: the restarts vary the seed, and every trial starts
# from the same encoder.
NOT_AXES = SEARCH_FLAGS + ("seed", "init_checkpoint", "bert_config_file", "vocab_file")

# What a search writes into its --output_dir.
STATE = "search.json"
TUNER_DIR = "tuner"      # KerasTuner's project: oracle.json, trial_N/trial.json, logs
RUNS_DIR = "runs"        # one run folder of the family per trial
TEST_DIR = "test"        # copies of the chosen runs, scored on --test_file
WRITES = (STATE, TUNER_DIR, RUNS_DIR, TEST_DIR, "results.json", "results.md",
          "dev_scores.png", "tensorboard")

# Score names that are no dev score: a test or prediction file's.
HELD_OUT_PREFIXES = ("test_", "predict_")


class TrialFailed(RuntimeError):
    """A trial's command failed: the search stops, keeping the trials done."""


def parse_grid(texts):
    """[(flag name, [values as typed])] of --grid texts: each `NAME=V1,V2,...`, several
    axes separated by `;`, or a named grid (GRIDS); ValueError naming what is wrong."""
    axes = []
    for text in texts:
        for part in GRIDS.get(text.strip(), text).split(";"):
            part = part.strip()
            if not part:
                continue
            name, equals, values = part.partition("=")
            name = name.strip().removeprefix("--")
            values = [v.strip() for v in values.split(",")]
            if not equals or not name or not all(values):
                raise ValueError(f"--grid: expected NAME=V1,V2,... (axes separated by "
                                 f"';', or one of {', '.join(GRIDS)}), got {part!r}")
            if name in dict(axes):
                raise ValueError(f"--grid: {name} is given twice")
            if len(set(values)) != len(values):
                raise ValueError(f"--grid: {name} repeats a value ({','.join(values)})")
            axes.append((name, values))
    if not axes:
        raise ValueError("--grid: no axis (expected NAME=V1,V2,...)")
    return axes


def grid_text(grid):
    return ";".join(f"{name}={','.join(values)}" for name, values in grid)


def grid_settings(grid):
    """The settings ({flag: value}) of a grid, the last axis varying fastest."""
    names = [name for name, _ in grid]
    return [dict(zip(names, values)) for values in
            itertools.product(*(values for _, values in grid))]


def setting_label(setting):
    return ", ".join(f"{name}={value}" for name, value in setting.items())


_MARK = object()
_MARK_DIR = "\0search-output-dir"


def given_flags(parser, argv):
    """The flags (argparse dests) `argv` sets, however spelled (argparse takes
    abbreviations): a namespace whose every field is a mark keeps the mark where no flag
    was parsed."""
    fields = vars(parser.parse_args(["--output_dir", _MARK_DIR, *argv]))
    args = parser.parse_args(["--output_dir", _MARK_DIR, *argv],
                             namespace=argparse.Namespace(**dict.fromkeys(fields, _MARK)))
    given = {name for name, value in vars(args).items() if value is not _MARK}
    if args.output_dir == _MARK_DIR:
        given.discard("output_dir")
    return given


@dataclasses.dataclass(frozen=True)
class Plan:
    """A search: the family (its export name and command module), the user's family flags,
    the grid, restarts and base seed, the dev score it chooses by and the test file."""
    family: str
    command: str
    flags: tuple
    grid: tuple
    restarts: int
    seed: int
    metric: str
    direction: str
    dev_flag: str = None
    test_file: str = None

    @property
    def settings(self):
        return grid_settings(self.grid)

    @property
    def num_trials(self):
        return len(self.settings) * self.restarts

    def restart_seed(self, restart):
        """Restart r runs with --seed=SEED+r: the family's one seed draws the data order,
        the new layers' initialisation and dropout; the encoder's weights are the
        checkpoint's whatever the seed."""
        return self.seed + restart

    def _argv(self, setting, restart, output_dir):
        return [*self.flags, *(f"--{name}={value}" for name, value in setting.items()),
                f"--seed={self.restart_seed(restart)}", f"--output_dir={output_dir}"]

    def trial_argv(self, setting, restart, run_dir):
        """The family's flags of one trial: trains on the training data, scores dev."""
        return self._argv(setting, restart, run_dir) + [
            "--do_train=true", "--do_eval=true", "--do_predict=false"]

    def test_argv(self, setting, restart, test_dir):
        """The family's flags that score --test_file with a chosen trial's model (a copy
        of its run in test_dir), in place of the dev file."""
        return self._argv(setting, restart, test_dir) + [
            "--do_train=false", "--do_eval=true", "--do_predict=false",
            f"--{self.dev_flag}={self.test_file}"]

    def request(self):
        """What a rerun must ask for again to continue this search."""
        return {"family": self.family, "grid": [[n, list(v)] for n, v in self.grid],
                "restarts": self.restarts, "flags": list(self.flags)}


def checkpoint_fingerprint(path):
    """What --init_checkpoint is by content: its folder or file (checkpoint_place),
    sampled (fingerprint's `sample`: size and first and last MiB of each file); a
    released name or URL by its name; None without one."""
    if not path:
        return None
    place = checkpoint_place(path)
    if place is None:
        return {"name": path}
    return dict(path=real_path(place), **fingerprint(place, sample=1 << 20))


def record(plan, inputs, checkpoint):
    """search.json's content: the request, the inputs' fingerprints (data_fingerprints
    of (flag, path) pairs) and the checkpoint's."""
    return dict(plan.request(), inputs=data_fingerprints(inputs), checkpoint=checkpoint)


def read_record(output_dir):
    """search.json of output_dir, or None when there is none."""
    path = os.path.join(output_dir, STATE)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
        saved["request"] = {k: saved[k] for k in ("family", "grid", "restarts", "flags")}
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{path}: unreadable (not a search's record): delete "
                         f"{output_dir} to start over") from None
    return saved


def _flags_phrase(there, now):
    gone = [f for f in there if f not in now]
    new = [f for f in now if f not in there]
    if not gone and not new:
        return "the same flags in another order"
    return "; ".join(part for part in (f"there only: {' '.join(gone)}" if gone else "",
                                       f"now only: {' '.join(new)}" if new else "") if part)


def check_request(saved, request, output_dir):
    """ValueError when output_dir's search (saved: read_record) asked for another family,
    grid, number of restarts or family flags than `request`."""
    there = saved["request"]
    if there == request:
        return
    if there["family"] != request["family"]:
        what = f"of {there['family']}, not {request['family']}"
    elif there["grid"] != request["grid"] or there["restarts"] != request["restarts"]:
        what = (f"over --grid='{grid_text(there['grid'])}' with --restarts="
                f"{there['restarts']}, not --grid='{grid_text(request['grid'])}' with "
                f"--restarts={request['restarts']}")
    else:
        what = (f"with other family flags ({_flags_phrase(there['flags'], request['flags'])})")
    raise ValueError(f"--output_dir={output_dir} holds a search {what}: its trials would "
                     f"mix with this one's; run that command again to continue it, or "
                     f"choose another --output_dir")


def check_inputs(saved, output_dir):
    """ValueError when an input or the checkpoint recorded in search.json is missing or
    has changed (their fingerprints now against saved's)."""
    theirs = saved.get("inputs") or {}
    for path, info in sorted(theirs.items()):
        if not os.path.exists(path):
            raise ValueError(f"{info.get('flag')} {path} is missing: the search in "
                             f"{output_dir} was started on it; put it back, or choose "
                             f"another --output_dir")
    changed = changed_data(theirs, data_fingerprints(
        [(info.get("flag"), path) for path, info in theirs.items()]))
    checkpoint = saved.get("checkpoint")
    if not changed and checkpoint and "path" in checkpoint:
        now = fingerprint(checkpoint["path"], sample=1 << 20) \
            if os.path.exists(checkpoint["path"]) else {"bytes": 0, "sha256": "missing"}
        changed = changed_data(
            {checkpoint["path"]: dict(checkpoint, flag="--init_checkpoint")},
            {checkpoint["path"]: dict(now, flag="--init_checkpoint")})
    if changed:
        changed = changed.replace("since it was saved", f"since the search in {output_dir} "
                                                        f"started")
        raise ValueError(f"{changed}: its trials would mix two data sets or checkpoints; "
                         f"put it back as it was, or choose another --output_dir")
