"""Every command that writes, into a full file system and into a read-only one: exit
status 1, one `error: ...` line naming the path and the system's reason, no traceback,
and nothing new left on the file system (no half-written output, no temporary file, no
empty model folder).

Both are tmpfs mounts in a private mount namespace (`unshare --mount --map-root-user`,
so no root is needed where user namespaces are allowed); where that is not possible the
test skips and says why. The commands run in one worker process
(tests/full_disk_worker.py) so TensorFlow starts once, on the session's inputs of
tests/fuzz_inputs.py (conftest.py's `bad_inputs`, which the fuzz table reads too)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests import TESTS

WORKER = os.path.join(TESTS, "full_disk_worker.py")
COMMANDS = ("build_vocab", "create_pretraining_data", "run_pretraining",
            "convert_checkpoint", "extract_features", "glue", "saved_model", "batch_predict",
            "quickstart")
REASONS = {"full": "No space left on device", "read_only": "Read-only file system"}


def _namespace_works(tmp_path):
    if shutil.which("unshare") is None:
        return "no unshare command"
    probe = subprocess.run(
        ["unshare", "--mount", "--map-root-user", "sh", "-c",
         f"mount -t tmpfs -o size=64k tmpfs {tmp_path}"], capture_output=True, text=True)
    return None if probe.returncode == 0 else \
        f"cannot mount a tmpfs in a private namespace: {probe.stderr.strip()}"


@pytest.fixture(scope="module")
def results(tmp_path_factory, bad_inputs):
    root = tmp_path_factory.mktemp("full_disk")
    why = _namespace_works(root)
    if why:
        pytest.skip(why)
    full, read_only, work, tight = (root / "full", root / "read_only", root / "work",
                                    root / "tight")
    for d in (full, read_only, work, tight):
        d.mkdir()
    script = (f"mount -t tmpfs -o size=8m tmpfs {full} && "
              f"mount -t tmpfs -o ro,size=8m tmpfs {read_only} && "
              f"mount -t tmpfs -o size=40m tmpfs {tight} && "
              f"exec {sys.executable} {WORKER} {full} {read_only} {bad_inputs.root} {work} "
              f"{tight}")
    run = subprocess.run(["unshare", "--mount", "--map-root-user", "sh", "-c", script],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", sorted(REASONS))
@pytest.mark.parametrize("command", COMMANDS)
def test_write_fails_in_one_line_and_leaves_nothing(results, command, kind):
    result = results[f"{command}:{kind}"]
    err = result["stderr"]
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert result["code"] == 1, (result["code"], err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert REASONS[kind] in lines[0], lines[0]
    assert f"/{kind}/" in lines[0], lines[0]         # the path it could not write
    assert result["after"] == result["before"], (result["before"], result["after"])


# The disk fills while the command works (tests/full_disk_worker.py's `stages`): the file
# it was writing when the room ran out, and what it had written whole before.
DURING = {
    "glue_eval:last": ("glue/last.weights.h5", ()),
    "glue_eval:best": ("glue/best.weights.h5", ("glue/last.weights.h5",)),
    "glue_eval:resume": ("glue/resume/step-", ("glue/last.weights.h5",
                                                "glue/best.weights.h5")),
    "run_pretraining:checkpoint": ("pretraining", ()),
    "saved_model:variables": ("models/embeddings", ()),
    "convert_checkpoint:keras_hub": ("preset", ()),
}


@pytest.mark.parametrize("row", sorted(DURING))
def test_a_disk_that_fills_while_a_command_works(results, row):
    """One line naming the file being written (a fine-tune with --do_eval crashed with a
    segmentation fault in HDF5 and left .best.tmp.weights.h5; the worker's exit status
    shows a crash at exit), no temporary file left, what was complete before kept."""
    result = results[row]
    err = result["stderr"]
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert result["code"] == 1, (result["code"], err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    writing, whole = DURING[row]
    assert "No space left on device" in lines[0], lines[0]
    assert f"/tight/{writing}" in lines[0], lines[0]
    assert not [p for p in result["after"] if ".tmp" in p], result["after"]
    assert set(whole) <= set(result["after"]), result["after"]
