"""The training plumbing shared by the pretraining loop and the fine-tuning driver: one chief
rule read from TF_CONFIG and from a strategy's cluster resolver alike, the step log cut
back to the resumed step, and signals turned into a stop request. No TensorFlow here: the
module must stay importable before it."""

import json
import os
import signal
import subprocess
import sys

import pytest

from bert_tf.base.training_plumbing import MetricLog, is_chief, stop_requests
from tests import ROOT


# (task, cluster) -> chief?
CASES = [
    (None, {}, True),
    ({"type": "chief", "index": 0}, {"chief": ["a"], "worker": ["b"]}, True),
    ({"type": "worker", "index": 0}, {"chief": ["a"], "worker": ["b"]}, False),
    ({"type": "worker", "index": 0}, {"worker": ["a", "b"]}, True),
    ({"type": "worker", "index": 1}, {"worker": ["a", "b"]}, False),
    ({"type": "evaluator", "index": 0}, {"worker": ["a"]}, False),
]


class _Spec:
    def __init__(self, cluster):
        self.cluster = cluster

    def as_dict(self):
        return self.cluster


class _Resolver:
    def __init__(self, task, cluster):
        self.task_type = task and task["type"]
        self.task_id = task["index"] if task else 0
        self._spec = _Spec(cluster)

    def cluster_spec(self):
        return self._spec


class _Strategy:
    def __init__(self, task, cluster):
        self.cluster_resolver = _Resolver(task, cluster)


@pytest.mark.parametrize("task, cluster, chief", CASES)
def test_one_chief_rule_from_tf_config_and_from_a_strategy(task, cluster, chief, monkeypatch):
    config = {"cluster": cluster, **({"task": task} if task else {})}
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    assert is_chief() is chief
    assert is_chief(_Strategy(task, cluster)) is chief


def test_no_cluster_and_a_broken_tf_config_are_the_chief(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert is_chief()
    monkeypatch.setenv("TF_CONFIG", "{not json")
    assert is_chief()
    assert is_chief(object())    # a strategy without a cluster resolver


def test_metric_log_keeps_the_lines_up_to_the_resumed_step(tmp_path):
    path = str(tmp_path / "train_log.jsonl")
    log = MetricLog(path, 0)
    for step in (1, 2, 3):
        log.write({"step": step, "loss": 1.0 / step})
    log.file.close()
    with open(path, "a") as f:
        f.write('{"step": 4, "lo')    # a line cut by a kill
    log = MetricLog(path, 2)
    log.write({"step": 3, "loss": 0.5})
    log.file.close()
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[-1]["loss"] == 0.5
    MetricLog(str(tmp_path / "worker.jsonl"), 0, enabled=False).write({"step": 1})
    assert not os.path.exists(tmp_path / "worker.jsonl")


def test_sigterm_and_sigint_become_a_stop_request():
    previous = signal.getsignal(signal.SIGTERM)
    with stop_requests() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
    assert stop == ["SIGTERM", "SIGINT"]
    assert signal.getsignal(signal.SIGTERM) is previous


def test_importing_the_plumbing_loads_no_tensorflow():
    code = ("import sys, bert_tf.base.training_plumbing, bert_tf.base.output_lock, bert_tf.base.cli; "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=ROOT), check=True).stdout
    assert out.strip() == "False"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_metric_log_on_a_full_disk_names_its_file(tmp_path):
    """A line that cannot be written is an OSError naming the log (Python's own names no
    file: `[Errno 28] No space left on device`), and nothing stays buffered for the
    file's close to write again."""
    path = str(tmp_path / "train_log.jsonl")
    log = MetricLog(path, 0)
    log.write({"step": 1, "loss": 1.0})
    log.file.close()
    log.file = open("/dev/full", "ab", buffering=0)      # every write: ENOSPC
    with pytest.raises(OSError) as error:
        log.write({"step": 2, "loss": 0.5})
    assert (error.value.filename, error.value.strerror) == (path, "No space left on device")
    log.file.close()
    with open(path) as f:
        assert [json.loads(line)["step"] for line in f] == [1]
