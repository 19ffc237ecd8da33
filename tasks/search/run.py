"""A search from its plan to its reports, in the order that keeps the test set out of
the choice: record what the search depends on (search.json), run the trials
(tuner.py), read each run's dev scores, choose (report.choose) and write the choice,
then score --test_file with the chosen setting's restarts only, write every report and,
if asked, export the chosen setting's best restart.
"""

import os
import shutil
import subprocess
import sys

import keras_tuner

from bert_tf.base.files import fingerprint, read_results, write_json
from bert_tf.base.output_lock import OutputLock
from bert_tf.base.progress import LineProgress
from bert_tf.base.training_plumbing import Interrupted
from tasks.search import plan as plans
from tasks.search import report, tuner as trials_module
from tasks.search.plan import TrialFailed


class _Stop(keras_tuner.errors.FatalError):
    """Ends KerasTuner's search loop (which would otherwise mark the trial invalid and go
    on) and carries the error out of it."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


class _Tuner(trials_module.SearchTuner):
    def run_trial(self, trial, *args, **kwargs):
        try:
            return super().run_trial(trial, *args, **kwargs)
        except keras_tuner.errors.FatalError as e:
            raise _Stop(TrialFailed(str(e))) from None
        except (Interrupted, ValueError, OSError) as e:
            raise _Stop(e) from None


def search(plan, output_dir, inputs, checkpoint, saved, export_dir=None):
    """Runs (or continues) the search of `plan` in output_dir and returns results.json's
    content (None on a worker of a distributed search, which only runs trials). `saved`:
    output_dir's search.json, already checked against this plan (plan.check_request,
    check_inputs), or None for a new search."""
    worker = trials_module.is_worker()
    lock = None
    if not worker:
        lock = OutputLock(output_dir, "--output_dir")
        lock.__enter__()
    try:
        return _search(plan, output_dir, inputs, checkpoint, saved, export_dir, worker)
    finally:
        if lock is not None:
            lock.__exit__(None, None, None)


def _search(plan, output_dir, inputs, checkpoint, saved, export_dir, worker):
    os.makedirs(output_dir, exist_ok=True)
    previous = report.read(output_dir) or {}
    if saved is None:
        write_json(os.path.join(output_dir, plans.STATE),
                   plans.record(plan, inputs, plans.checkpoint_fingerprint(checkpoint)))
    tuner = _Tuner(plan, output_dir)
    # A worker's oracle is the chief's, reached by gRPC: it hands out trials, no state.
    done = 0 if worker else len(trials_module.completed_trials(tuner))
    tests = plan.restarts if plan.test_file and not worker else 0
    print(f"search{' worker ' + os.environ['KERASTUNER_TUNER_ID'] if worker else ''}: "
          f"{len(plan.settings)} settings x {plan.restarts} restarts = "
          f"{plan.num_trials} trials ({done} complete), chosen on dev {plan.metric} "
          f"({plan.direction})" + (f", then {tests} scored on {plan.test_file}"
                                   if tests else ", no --test_file"), flush=True)
    progress = LineProgress(plan.num_trials + tests, "search", unit="run", initial=done,
                            every=1, min_seconds=0)
    tuner.progress = progress
    try:
        tuner.search(verbose=0)
    except _Stop as e:
        raise e.error from None
    if worker:
        print(f"search: no trial left for {os.environ.get('KERASTUNER_TUNER_ID')}; the "
              f"chief chooses and reports", flush=True)
        return None
    trials = trials_module.completed_trials(tuner)
    if len(trials) != plan.num_trials:
        raise TrialFailed(f"{output_dir}: {len(trials)} of {plan.num_trials} trials are "
                          f"complete after the search; run the same command again")
    progress.n = max(progress.n, len(trials))    # a chief's trials ran on its workers
    runs = {tid: trials_module.trial_run_dir(output_dir, tid) for tid in trials}
    dev = {tid: read_results(os.path.join(runs[tid], "eval_results.txt")) for tid in trials}
    seconds = {tid: _seconds(output_dir, tid) for tid in trials}
    choice = report.choose(plan, trials, dev)
    # The choice is written before the test file is read.
    report.write(output_dir, report.results(plan, trials, dev, seconds, choice,
                                            runs=runs), figures=False)
    test, test_file = None, None
    if plan.test_file:
        test_file = _test_record(output_dir, plan.test_file)
        chosen = {tid: trials[tid] for tid in choice["chosen"]["trials"]}
        try:
            test = trials_module.score_test(plan, output_dir, chosen, progress)
        except (keras_tuner.errors.FatalError, Interrupted) as e:
            raise e if isinstance(e, Interrupted) else TrialFailed(str(e)) from None
    progress.close()
    result = report.results(plan, trials, dev, seconds, choice, test, test_file, runs,
                            previous.get("export"))
    if export_dir:
        result["export"] = export(plan, result, export_dir)
    report.write(output_dir, result)
    _summary(result, output_dir)
    return result


def _seconds(output_dir, trial_id):
    import json
    path = os.path.join(output_dir, plans.TUNER_DIR, f"trial_{trial_id}", "command.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f).get("seconds")
    except (OSError, ValueError):
        return None


def _test_record(output_dir, test_file):
    """{"path", "bytes", "sha256"} of --test_file, read now (after the choice); the copies
    in OUTPUT_DIR/test/ scored on another file are scored again."""
    record = dict(path=os.path.realpath(test_file), **fingerprint(test_file))
    path = os.path.join(output_dir, plans.TEST_DIR, "test_file.json")
    if os.path.exists(path):
        import json
        with open(path, encoding="utf-8") as f:
            if json.load(f) != record:
                print(f"note: --test_file differs from the one {output_dir}/test was "
                      f"scored on: scoring again", flush=True)
                shutil.rmtree(os.path.join(output_dir, plans.TEST_DIR))
    os.makedirs(os.path.join(output_dir, plans.TEST_DIR), exist_ok=True)
    write_json(path, record)
    return record


def export(plan, result, export_dir):
    """Exports the chosen setting's best restart with export.saved_model into a new
    version folder of export_dir (once: a search run again finds it there)."""
    run_dir = result["chosen"]["run_dir"]
    done = result.get("export")
    if done and done.get("run_dir") == run_dir and os.path.isdir(done.get("path", "")):
        return done
    before = set(os.listdir(export_dir)) if os.path.isdir(export_dir) else set()
    argv = [sys.executable, "-m", "export.saved_model", f"--task={plan.family}",
            f"--checkpoint_dir={run_dir}", f"--output_dir={export_dir}"]
    print(f"search: exporting {run_dir} to {export_dir}", flush=True)
    finished = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    if finished.returncode != 0:
        lines = [line for line in finished.stdout.splitlines() if line.strip()]
        raise TrialFailed(f"exporting {run_dir} failed: "
                          f"{(lines or ['(no output)'])[-1]}")
    new = sorted(set(os.listdir(export_dir)) - before, key=lambda d: int(d)
                 if d.isdigit() else -1)
    return {"run_dir": run_dir, "path": os.path.join(export_dir, new[-1]) if new
            else export_dir}


def _summary(result, output_dir):
    chosen, metric = result["chosen"], result["metric"]
    dev = chosen["dev"]
    line = (f"chosen: {plans.setting_label(chosen['setting'])}: dev {metric} "
            f"{dev['mean']:.4f} ± {dev['std']:.4f} over {dev['n']} restarts")
    if chosen.get("test"):
        test = chosen["test"]
        line += f", {result['test_metric']} {test['mean']:.4f} ± {test['std']:.4f}"
    print(line, flush=True)
    print(f"best restart: {chosen['run_dir']} (python -m export.saved_model --task "
          f"{result['family']} --checkpoint_dir {chosen['run_dir']} --output_dir "
          f"models/NAME)", flush=True)
    print(f"reports: {os.path.join(output_dir, 'results.md')}, results.json, "
          f"dev_scores.png, tensorboard/", flush=True)
