"""The trials of a search, run by KerasTuner: its grid oracle enumerates (restart, setting)
pairs and keeps each trial's status and scores in OUTPUT_DIR/tuner/ (resumed from there
when the search is run again: complete trials are not run again), and its distributed
mode (KERASTUNER_ORACLE_IP / _PORT / KERASTUNER_TUNER_ID) hands trials to several
processes, machines or GPUs. Each trial is the family's own command in a process of its
own (`launch`), writing an ordinary run folder, OUTPUT_DIR/runs/trial_N/ (its locks,
fingerprints and exact resume are the driver's); its dev scores are that run's
eval_results.txt. Nothing in a trial's process outlives it: memory cannot leak from one
trial into the next.
"""

import os
import shutil
import signal
import subprocess
import sys
import time

import keras_tuner

from bert_tf.base.files import read_results, write_json
from bert_tf.base.output_lock import OutputLock, OutputLockedError
from bert_tf.base.training_plumbing import Interrupted, stop_requests
from tasks.search.plan import RUNS_DIR, TEST_DIR, TUNER_DIR

COMPLETED = keras_tuner.engine.trial.TrialStatus.COMPLETED


class GridOracle(keras_tuner.oracles.GridSearchOracle):
    """KerasTuner's grid oracle, resumable after kill -9. KerasTuner 1.4 keeps the grid's
    order (`_ordered_ids`) and the trials whose successor is still to be drawn
    (`_populate_next`) in memory only, so a reloaded grid search stops early or fails
    (keras-team/keras-tuner#1055): here they are saved with the oracle and, as the grid's
    trials are created in the grid's order, rebuilt from `start_order` on reload. Its
    files (oracle.json, trial_N/trial.json) are written under a temporary name and
    renamed, so a kill never leaves half of one."""

    def get_state(self):
        return dict(super().get_state(), populate_next=list(self._populate_next))

    def set_state(self, state):
        super().set_state(state)
        self._ordered_ids = type(self._ordered_ids)()
        for trial_id in self.start_order:
            self._ordered_ids.insert(trial_id)
        # The last trial created: its successor is the first combination not drawn.
        self._populate_next = list(state.get("populate_next", [])) + self.start_order[-1:]

    def save(self):
        write_json(self._get_oracle_fname(), self.get_state(), indent=None)

    def _save_trial(self, trial):
        write_json(os.path.join(self._get_trial_dir(trial.trial_id), "trial.json"),
                   trial.get_state(), indent=None)


def oracle(plan):
    """The grid oracle of `plan`: the restart outermost, so the first restart of every
    setting runs before the second of any (a stopped search has comparable settings)."""
    space = keras_tuner.HyperParameters()
    space.Choice("restart", list(range(plan.restarts)))
    for name, values in plan.grid:
        space.Choice(name, list(values))
    return GridOracle(objective=keras_tuner.Objective(plan.metric, plan.direction),
                      max_trials=plan.num_trials, hyperparameters=space,
                      allow_new_entries=False, seed=1)


def trial_setting(plan, values):
    """(setting, restart) of a trial's hyperparameter values."""
    return {name: values[name] for name, _ in plan.grid}, int(values["restart"])


class SearchTuner(keras_tuner.engine.base_tuner.BaseTuner):
    """Runs each trial as the family's command in its own process (`run_trial`) and
    reports its run's dev scores to the oracle."""

    def __init__(self, plan, output_dir, progress=None):
        self.plan, self.output_dir, self.progress = plan, output_dir, progress
        super().__init__(oracle(plan), directory=output_dir, project_name=TUNER_DIR)

    def run_trial(self, trial, *args, **kwargs):
        setting, restart = trial_setting(self.plan, trial.hyperparameters.values)
        run_dir = trial_run_dir(self.output_dir, trial.trial_id)
        trial_dir = self.get_trial_dir(trial.trial_id)
        argv = [sys.executable, "-m", self.plan.command,
                *self.plan.trial_argv(setting, restart, run_dir)]
        record = dict(argv=argv, setting=setting, restart=restart,
                      seed=self.plan.restart_seed(restart), run_dir=run_dir)
        write_json(os.path.join(trial_dir, "command.json"), record)
        what = f"trial {trial.trial_id} ({_label(setting)}, restart {restart})"
        start = time.time()
        launch(argv, os.path.join(trial_dir, "output.log"), run_dir, what)
        results = read_results(os.path.join(run_dir, "eval_results.txt"))
        if self.plan.metric not in results:
            raise keras_tuner.errors.FatalError(
                f"--metric={self.plan.metric}: {what} scored no such thing on dev; its "
                f"scores: {', '.join(sorted(results))}")
        write_json(os.path.join(trial_dir, "command.json"),
                   dict(record, seconds=round(time.time() - start, 1)))
        self.last_score = results[self.plan.metric]
        return {k: v for k, v in results.items() if isinstance(v, float)}

    def on_trial_end(self, trial):
        super().on_trial_end(trial)
        if self.progress is not None and trial.status == COMPLETED:
            setting, restart = trial_setting(self.plan, trial.hyperparameters.values)
            # (A worker's trial does not hold its metrics: the chief's oracle does.)
            score = getattr(self, "last_score", float("nan"))
            self.progress.set_postfix_str(f"trial {trial.trial_id} ({_label(setting)}, "
                                          f"restart {restart}): {self.plan.metric}={score:.4f}")
            self.progress.update(1)

    def save(self):
        if not self._is_worker():
            self.oracle.save()
        write_json(self._get_tuner_fname(), self.get_state(), indent=None)


def _label(setting):
    return ", ".join(f"{k}={v}" for k, v in setting.items())


def completed_trials(tuner):
    """{trial id: (setting, restart)} of the trials the oracle records as complete."""
    return {trial_id: trial_setting(tuner.plan, trial.hyperparameters.values)
            for trial_id, trial in sorted(tuner.oracle.trials.items())
            if trial.status == COMPLETED}


def is_worker():
    """A worker of KerasTuner's distributed mode (not its chief): it runs trials only."""
    tuner_id = os.environ.get("KERASTUNER_TUNER_ID", "")
    return "KERASTUNER_ORACLE_IP" in os.environ and "chief" not in tuner_id


# ----------------------------------------------------------------------- the processes

def _parent_death_signal():
    """In the child, before it runs: SIGTERM when the search's process dies, however it
    dies (kill -9 included), so a trial saves its state and ends instead of training on
    with nobody waiting (Linux's PR_SET_PDEATHSIG; elsewhere nothing)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)


def _load_prctl():
    # Loaded here, in the parent: the child between fork and exec only calls it.
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl() if sys.platform.startswith("linux") else None


def wait_for_free(output_dir, seconds=300):
    """Waits while another process holds output_dir's lock: the trial command of a search
    killed a moment ago, saving its state after its SIGTERM (up to `seconds`; then the
    trial's own command says who holds it)."""
    said = False
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with OutputLock(output_dir, "--output_dir"):
                return
        except OutputLockedError as e:
            if not said:
                print(f"waiting: {e}", flush=True)
                said = True
            time.sleep(1)


def last_error(log_path):
    """The last `error: ...` line of a command's output (else its last line)."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        return ""
    errors = [line for line in lines if line.startswith("error: ")]
    return (errors or lines or [""])[-1]


def launch(argv, log_path, output_dir, what):
    """Runs a family command (argv) writing output_dir, its output appended to log_path.
    SIGTERM or SIGINT to the search is passed on (the trial saves its state and stops)
    and ends the search with Interrupted; a failed command ends it with FatalError
    naming its last error line."""
    wait_for_free(output_dir)
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "ab") as log, stop_requests() as stop:
        log.write(f"$ {' '.join(argv)}\n".encode())
        log.flush()
        child = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                 preexec_fn=_parent_death_signal)
        passed_on = False
        while True:
            try:
                code = child.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if stop and not passed_on:
                    child.send_signal(signal.SIGTERM)
                    passed_on = True
    if stop:
        raise Interrupted(f"{stop[0]} during {what}, which saved its state: run the same "
                          f"command again to continue the search")
    if code != 0:
        raise keras_tuner.errors.FatalError(
            f"{what} failed (exit status {code}): {last_error(log_path)} (its output: "
            f"{log_path}); the trials done are kept: run the same command again to "
            f"continue the search")


# ----------------------------------------------------------------------- the test set

def trial_run_dir(output_dir, trial_id):
    """The family's run folder of trial `trial_id`."""
    return os.path.join(output_dir, RUNS_DIR, f"trial_{trial_id}")


def test_dir(output_dir, trial_id):
    return os.path.join(output_dir, TEST_DIR, f"trial_{trial_id}")


def copy_run(run_dir, target):
    """The files of a trained run that a later run reads (its settings, configuration,
    vocabulary and weights: every top-level file but its scores and step log), linked
    (else copied) into `target`: the test set is scored there, and the trial's own folder
    stays as training left it."""
    os.makedirs(target, exist_ok=True)
    for name in sorted(os.listdir(run_dir)):
        source, copy = os.path.join(run_dir, name), os.path.join(target, name)
        if not os.path.isfile(source) or name in ("eval_results.txt", "train_log.jsonl") \
                or os.path.exists(copy):
            continue
        try:
            os.link(source, copy)
        except OSError:
            shutil.copy2(source, copy)


def score_test(plan, output_dir, trial_ids, progress=None):
    """{trial id: test scores} of the chosen setting's trials: each run copied into
    OUTPUT_DIR/test/trial_N/ and scored there by the family's command on --test_file
    (`plan.test_argv`; its output in test/trial_N.log); a copy already scored is read
    back. Keys: `test_` + the score's
    name without its `eval_` prefix."""
    scores = {}
    for trial_id, (setting, restart) in trial_ids.items():
        target = test_dir(output_dir, trial_id)
        results_file = os.path.join(target, "eval_results.txt")
        if not os.path.exists(results_file):
            copy_run(trial_run_dir(output_dir, trial_id), target)
            argv = [sys.executable, "-m", plan.command,
                    *plan.test_argv(setting, restart, target)]
            launch(argv, target + ".log", target,
                   f"scoring trial {trial_id} on --test_file")
            if progress is not None:
                progress.set_postfix_str(f"trial {trial_id} scored on the test set")
                progress.update(1)
        scores[trial_id] = {"test_" + k.removeprefix("eval_"): v
                            for k, v in read_results(results_file).items()}
    return scores

