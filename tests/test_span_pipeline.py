"""The span tasks' text pipeline (NER and SQuAD: words, windows with a stride, max
context, packing, answer decoding): the code's features, on the training and the serving
path, equal the features frozen in tests/fixtures/span_features.npz (tests/span_features.py
says what they are and on which texts)."""

import numpy as np
import pytest

from tests import span_features

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def computed():
    return span_features.compute()


@pytest.fixture(scope="module")
def frozen():
    return span_features.load()


def assert_equal_arrays(got, want, prefix):
    keys = sorted(k for k in want if k.startswith(prefix))
    assert keys and sorted(k for k in got if k.startswith(prefix)) == keys
    for key in keys:
        assert got[key].shape == want[key].shape, key
        if want[key].dtype.kind == "f":
            # Decoded scores: sums of the stand-in model's logits (the features are ints).
            np.testing.assert_allclose(got[key], want[key], rtol=1e-6, err_msg=key)
        else:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)


@pytest.mark.parametrize("prefix", ["ner_train/", "ner_serve/", "ner_python/",
                                    "squad_train/", "squad_serve/", "squad_python/"])
def test_features_equal_the_frozen_ones(computed, frozen, prefix):
    assert_equal_arrays(computed, frozen, prefix)


def test_fixture_covers_several_windows_and_both_paths_agree(frozen):
    """The fixture reads long texts in several overlapping windows, and the command's
    and the signature's answers already agree on it (the parity the pipeline keeps)."""
    for stride in span_features.NER_STRIDES:
        counts = np.bincount(frozen[f"ner_train/stride{stride}/sentence_index"])
        assert counts.max() >= 5, stride
        serve = frozen[f"ner_serve/stride{stride}/entity_num_entities"]
        python = np.diff(frozen[f"ner_python/stride{stride}/entities_splits"])
        assert serve.tolist() == python.tolist()
    for stride in span_features.SQUAD_STRIDES:
        for v2 in (False, True):
            serve = frozen[f"squad_serve/stride{stride}/v2{v2}/answer"]
            python = frozen[f"squad_python/stride{stride}/v2{v2}/text"]
            has = python != "-"
            assert serve[has].tolist() == python[has].tolist()
    assert np.bincount(frozen["squad_train/stride5/example_index"]).max() >= 5
    assert np.bincount(frozen["squad_train/stride128/example_index"]).max() >= 2
