"""A fine-tuning run's resumable state and the Keras callback that keeps it.

    state = ResumeState(output_dir, model, saved, resume_settings(config, spe, epochs))
    start, saved_state = state.restore()      # (0, None) on a fresh run

tasks/driver.py's `fit` saves the state every --save_checkpoints_steps steps, after every
epoch, and on SIGTERM/SIGINT, then stops with Interrupted (the signal handling and error
of bert_tf/base/training_plumbing.py, shared with the pretraining loop, which saves and stops
the same way). Run again, the same command resumes at the saved step and the rest of the
run is the uninterrupted one's, bit for bit (tests/tasks/test_resume.py).
"""

import dataclasses
import json
import os
import shutil

import keras
import numpy as np
import tensorflow as tf

from bert_tf.base.files import changed_data, system_error, write_json
from bert_tf.base.training_plumbing import Interrupted, is_chief
from bert_tf.checkpoints.bundle import bundle_damage, read_failure, restore_or_refuse

RESUME_DIR = "resume"

# Config fields that say how a run goes, not what it computes: a resumed run may change
# them. Every other field must be the one of the run that saved the state.
RESUME_FREE = ("output_dir", "do_eval", "do_predict", "eval_batch_size", "predict_batch_size",
               "save_checkpoints_steps", "strategy", "cpu_devices", "tpu", "jit_compile")


# The settings a refused resume names first (the model, what it reads, the sequences,
# the labels), then the other flags in name order, then the step plan they derive.
MOST_IMPORTANT = ("init_checkpoint", "bert_config_file", "vocab_file", "do_lower_case",
                  "max_seq_length", "task_name", "labels", "regression", "train_file",
                  "data_dir", "train_batch_size", "learning_rate", "num_train_epochs")
DERIVED = ("steps_per_epoch", "epochs")


def resume_settings(config, steps_per_epoch, epochs, data=None, resolved=None):
    """What a resumable state must match to be resumed: the training config's fields
    (all but RESUME_FREE), the step plan and `data`, what the run learns from by
    content (`data_fingerprints`), as JSON values. `resolved`: the run's settings (its
    TASK_config.json dict); a field it holds is compared as it resolved there, not as
    the flag said (--doc_stride given at the value its default resolves to, --labels
    given as the training file's, are the same settings as the defaults)."""
    values = {k: v for k, v in dataclasses.asdict(config).items() if k not in RESUME_FREE}
    values.update({k: v for k, v in (resolved or {}).items() if k in values})
    values.update(steps_per_epoch=steps_per_epoch, epochs=epochs, data=data or {})
    return json.loads(json.dumps(values, default=str))


def remove_resume_state(output_dir):
    """Deletes output_dir/resume/ (at the end of a run that trained)."""
    path = os.path.join(output_dir, RESUME_DIR)
    if "://" in path:
        if tf.io.gfile.exists(path):
            tf.io.gfile.rmtree(path)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _complete_states(resume_dir):
    """{step: path} of the complete states in resume_dir."""
    gfile = tf.io.gfile
    found = {}
    if not gfile.isdir(resume_dir):
        return found
    for name in gfile.listdir(resume_dir):
        name = name.rstrip("/")
        if name.startswith("step-") and name[5:].isdigit() and \
                gfile.exists(os.path.join(resume_dir, name, "state.json")):
            found[int(name[5:])] = os.path.join(resume_dir, name)
    return found


def check_resume_state(output_dir, settings):
    """(path, state.json) of the latest complete resumable state in output_dir/resume/,
    or (None, None) when there is none. ValueError when its state.json is unreadable or
    it was saved by a run whose resume_settings differ from `settings`.

    The driver calls this before a training run writes anything in output_dir (its
    TASK_config.json, vocab.txt, ...), so a refused resume leaves the folder as it found
    it; ResumeState.restore checks again and then reads the weights."""
    resume_dir = os.path.join(output_dir, RESUME_DIR)
    complete = _complete_states(resume_dir)
    if not complete:
        return None, None
    path = complete[max(complete)]
    with tf.io.gfile.GFile(os.path.join(path, "state.json")) as f:
        try:
            state = json.load(f)
            state["step"]
        except (ValueError, TypeError, KeyError):
            raise ValueError(f"{path}/state.json: unreadable resumable state (not the "
                             f"JSON of a saved step): delete {resume_dir} to start "
                             f"over") from None
    theirs = state.get("settings", {})
    # "data" of a state saved before fingerprints were kept: not known, not compared.
    changed = changed_data(theirs.get("data") or {}, settings.get("data") or {})
    if changed:
        raise ValueError(f"{path} is the resumable state of a run on other data: {changed}; "
                         f"resuming would train on a mixture: put the file back as it was, "
                         f"or delete {resume_dir} to start over")
    differ = sorted((k for k in set(theirs) | set(settings)
                     if k != "data" and theirs.get(k) != settings.get(k)),
                    key=lambda k: (k in DERIVED, k not in MOST_IMPORTANT,
                                   MOST_IMPORTANT.index(k) if k in MOST_IMPORTANT else 0, k))
    if differ:
        shown = "; ".join(f"{k}: {theirs.get(k)!r} there, {settings.get(k)!r} now"
                          for k in differ[:3])
        rest = f"; also {len(differ) - 3} more: {', '.join(differ[3:])}" \
            if len(differ) > 3 else ""
        raise ValueError(f"{path} is the resumable state of a run with other settings "
                         f"({shown}{rest}): run that command again to resume it, or delete "
                         f"{resume_dir} to start over")
    return path, state


class ResumeState:
    """A fine-tuning run's resumable state: output_dir/resume/step-N/ holds `ckpt.*` (a
    tf.train.Checkpoint of the task model, the model fit trains, the optimizer with its
    step count, the dropout layers' seed generators and the running training metrics)
    and `state.json` (step N, the best monitored value so far, resume_settings); under
    several replicas also `metric_parts.*`, each replica's part of the running metrics. The
    input position is N: the training stream is deterministic given the seed, so a
    resumed run skips its first N batches.

    Written as step-N.tmp/ and renamed to step-N/ when complete (on gs://, which cannot
    rename folders, state.json is written last and marks it complete); the older states
    are deleted after. A kill at any point leaves the last complete state to resume from.
    Only the chief of a multi-worker cluster writes."""

    def __init__(self, output_dir, model, saved, settings):
        self.output_dir = output_dir
        self.dir = os.path.join(output_dir, RESUME_DIR)
        self.settings = settings
        self.latest_path = None
        self.remote = "://" in self.dir
        self.chief = is_chief(model.distribute_strategy)
        # The seed generators' states are variables tf.train.Checkpoint does not reach
        # through the model (they are not weights): without them a resumed run draws
        # other dropout masks. The metrics' sums make the logged running means match.
        seeds, seen = [], set()
        for v in (*saved.variables, *model.variables):
            if "seed_generator_state" in v.path and id(v) not in seen:
                seen.add(id(v))
                seeds.append(v)
        self.metrics = [v for m in model.metrics for v in m.variables]
        # Under a strategy with several replicas a metric variable is a sum over
        # per-replica parts; the checkpoint holds only the sum, and a sum put back in one
        # part adds the later steps' values in another order (a last-bit difference in
        # the logged means). The parts are kept too, restored when the replicas match.
        self.metric_parts = [part for v in self.metrics for part in _replica_parts(v)]
        self.replicas = model.distribute_strategy.num_replicas_in_sync
        objects = dict(model=saved, optimizer=model.optimizer, dropout_seeds=seeds,
                       metrics=self.metrics)
        if model is not saved:
            objects["trained"] = model
        self.checkpoint = tf.train.Checkpoint(**objects)

    def restore(self):
        """Restores the latest complete state, if any -> (its step, its state.json), else
        (0, None). ValueError when it was saved by a run with other settings or is
        damaged."""
        path, state = check_resume_state(self.output_dir, self.settings)
        if path is None:
            return 0, None
        if not state.get("finished"):
            prefixes = [os.path.join(path, "ckpt")] + (
                [os.path.join(path, "metric_parts")] if self.metric_parts and
                state.get("metric_replicas") == self.replicas else [])
            damage = next(filter(None, (bundle_damage(p, path) for p in prefixes)), None)
            again = f"delete {self.dir} to start over"
            if damage:
                raise ValueError(f"{path}: unreadable resumable state ({damage}): {again}")
            status = restore_or_refuse(lambda: self.checkpoint.read(prefixes[0]), path,
                                       "resumable state", again)
            try:
                status.assert_existing_objects_matched()
            except AssertionError as e:
                raise ValueError(f"{path}: unreadable resumable state ({read_failure(e)}): "
                                 f"{again}") from None
        self.latest_path = path
        return state["step"], state

    def restore_metrics(self, path):
        """The running metrics of the state at `path` (fit resets them as an epoch
        begins, so a run resumed inside an epoch puts them back after that)."""
        tf.train.Checkpoint(metrics=self.metrics).read(
            os.path.join(path, "ckpt")).expect_partial()
        with tf.io.gfile.GFile(os.path.join(path, "state.json")) as f:
            replicas = json.load(f).get("metric_replicas")
        if self.metric_parts and replicas == self.replicas:
            tf.train.Checkpoint(parts=self.metric_parts).read(
                os.path.join(path, "metric_parts")).assert_existing_objects_matched()

    def save(self, step, best=None, finished=False):
        """Saves the state at `step` (finished: only state.json, saying training is
        done) and deletes the older ones -> its path."""
        final = os.path.join(self.dir, f"step-{step}")
        if not self.chief:
            return final
        gfile = tf.io.gfile
        work = final if self.remote else final + ".tmp"
        for path in (work, final):
            if gfile.exists(path):
                gfile.rmtree(path)
        try:
            gfile.makedirs(work)
            if not finished:
                self.checkpoint.write(os.path.join(work, "ckpt"))
                if self.metric_parts:
                    tf.train.Checkpoint(parts=self.metric_parts).write(
                        os.path.join(work, "metric_parts"))
            write_json(os.path.join(work, "state.json"),
                       {"step": step, "finished": finished, "best": best,
                        "settings": self.settings,
                        "metric_replicas": self.replicas if self.metric_parts else None})
            if not self.remote:
                os.replace(work, final)   # a folder: atomic, as a file's rename is
        except BaseException as e:
            # A full disk or a stop: no half state left (the older state stays).
            if gfile.exists(work):
                gfile.rmtree(work)
            # TensorFlow names its own temporary file, now gone: name the state.
            failure = system_error(e, final)
            if failure is not None:
                raise failure from None
            raise
        for name in gfile.listdir(self.dir):
            path = os.path.join(self.dir, name.rstrip("/"))
            if path != final:
                gfile.rmtree(path) if gfile.isdir(path) else gfile.remove(path)
        self.latest_path = final
        return final


def _replica_parts(variable):
    """The per-replica variables of a Keras variable created under a strategy with
    several replicas (a SyncOnRead metric variable), else ()."""
    value = getattr(variable, "value", variable)
    if isinstance(value, tf.distribute.DistributedValues):
        return tuple(value.values)
    return ()


class ResumeCallback(keras.callbacks.Callback):
    """Counts the global step from `start`, writes each step's logs to `log` (a JSON-lines
    writer), saves `state` every `save_steps` steps and after every epoch but the last,
    and on a requested stop (`self.stop`, stop_requests' list) saves and raises
    Interrupted out of fit, so that no validation or epoch-end checkpoint runs on a
    partial epoch (a stop asked for in an epoch's last step waits for its end). `best`:
    the ModelCheckpoint whose best value the state keeps, or None. One instance serves
    every fit call of a run; `metrics_from` (a state's path) puts that state's running
    metrics back as the next epoch begins (fit has just reset them)."""

    def __init__(self, state, start, steps_per_epoch, total_steps, save_steps, best, log):
        super().__init__()
        self.state, self.step, self.log, self.best = state, start, log, best
        self.steps_per_epoch, self.total_steps = steps_per_epoch, total_steps
        self.save_steps = save_steps
        self.stop = []
        self.metrics_from = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.metrics_from:
            self.state.restore_metrics(self.metrics_from)
            self.metrics_from = None

    def save(self):
        best = self.best.best if self.best is not None else None
        return self.state.save(self.step, best=None if best is None else float(best))

    def halt(self):
        path = self.save()
        raise Interrupted(f"{self.stop[0]} at step {self.step}: saved {path}; run the "
                          f"same command again to resume from it")

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        row = {"step": self.step, "epoch": (self.step - 1) // self.steps_per_epoch + 1}
        row.update({k: float(np.asarray(v)) for k, v in (logs or {}).items()})
        self.log.write(row)
        if self.step % self.steps_per_epoch == 0:
            return   # on_epoch_end saves (and stops) after validation
        if self.stop:
            self.halt()
        if self.step % self.save_steps == 0:
            self.save()

    def on_epoch_end(self, epoch, logs=None):
        if self.step >= self.total_steps:
            return   # done: fit marks the state finished
        if self.stop:
            self.halt()
        self.save()
