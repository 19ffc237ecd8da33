"""What every training loop shares, whatever it trains: stopping on a signal, the step log,
and which process of a cluster owns the output.

    with stop_requests() as stop:              # SIGTERM/SIGINT append their name to `stop`
        while step < total and not stop:
            ...
            log.write(metrics)                 # log = MetricLog(path, start_step)
    if stop:
        raise Interrupted(f"{stop[0]} at step {step}: ...")

Used by the pretraining loop (bert_tf/training/trainer.py), the fine-tuning driver
(tasks/driver.py, tasks/resume.py), run_pretraining and the output locks (bert_tf/base/cli.py
takes an OutputLock on the chief only). No TensorFlow at import: the command-line kit
decides who owns an output before a command loads TensorFlow, so `is_chief()` reads
TF_CONFIG itself, by the same rule as a strategy's cluster resolver.
"""

import contextlib
import json
import os
import signal
import threading

from bert_tf.base.files import atomic_write


class Interrupted(RuntimeError):
    """SIGTERM (preemption) or SIGINT stopped training; a checkpoint was saved first."""


@contextlib.contextmanager
def stop_requests():
    """SIGTERM and SIGINT set a flag instead of killing the process, so the loop can save
    at the end of its current step and stop (a step in flight is not cut short). The
    previous handlers come back afterwards. The yielded list names what arrived."""
    signals = []
    if threading.current_thread() is not threading.main_thread():
        yield signals  # handlers can only be installed from the main thread
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    for s in previous:
        signal.signal(s, lambda number, frame: signals.append(signal.Signals(number).name))
    try:
        yield signals
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _chief_rule(task_type, task_id, jobs):
    # The chief is the "chief" task, or worker 0 of a cluster that has none; a process
    # outside any cluster is its own chief.
    return task_type in (None, "chief") or (
        task_type == "worker" and task_id == 0 and "chief" not in jobs)


def is_chief(strategy=None):
    """False on a worker of a multi-worker cluster that is not its chief: the workers of
    one run share its output folder, and only the chief writes what is kept there.

    `strategy`: a tf.distribute strategy, whose cluster resolver says where this process
    stands; None reads the TF_CONFIG environment variable instead (no TensorFlow needed).
    """
    if strategy is not None:
        resolver = getattr(strategy, "cluster_resolver", None)
        if resolver is None or not resolver.task_type:
            return True
        return _chief_rule(resolver.task_type, resolver.task_id,
                           resolver.cluster_spec().as_dict())
    try:
        tf_config = json.loads(os.environ.get("TF_CONFIG", "{}"))
        task, cluster = tf_config.get("task") or {}, tf_config.get("cluster") or {}
    except (ValueError, AttributeError):
        return True   # a broken TF_CONFIG is the strategy's to report
    return _chief_rule(task.get("type"), task.get("index", 0), cluster)


class MetricLog:
    """Per-step metrics as JSON lines. On resume, lines past the restored step (written
    after the last checkpoint by the interrupted run) are dropped, so the file always
    reads as one uninterrupted run. `enabled=False` (a worker that is not the chief)
    writes nothing."""

    def __init__(self, path, start_step, enabled=True):
        self.path = path
        self.enabled = enabled
        if not enabled:
            return
        kept = []
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:
                        break  # a line cut by a kill
                    if row["step"] <= start_step:
                        kept.append(line if line.endswith("\n") else line + "\n")
        with atomic_write(path) as f:
            f.writelines(kept)
        # Unbuffered: a line that cannot be written (a full disk) is not kept in a buffer
        # that the file's close would try to write again.
        self.file = open(path, "ab", buffering=0)

    def write(self, row):
        """Appends `row` as one line; OSError naming the file when it cannot, the file
        cut back to its complete lines."""
        if not self.enabled:
            return
        line = (json.dumps(row) + "\n").encode("utf-8")
        start = self.file.tell()
        try:
            written = 0
            while written < len(line):
                written += self.file.write(line[written:])
        except OSError as e:
            with contextlib.suppress(OSError):
                self.file.truncate(start)
            raise OSError(e.errno, os.strerror(e.errno) if e.errno else str(e),
                          self.path) from None
