"""The span tasks' text pipeline (NER and SQuAD: words, windows with a stride, max
context, packing, answer decoding): the code's features, on the training and the serving
path, equal the features frozen in tests/fixtures/span_features.npz (tests/span_features.py
says what they are and on which texts)."""

import numpy as np
import pytest

from tests import span_features, span_oracles

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


def test_training_features_built_in_tf_data_batches_equal_the_frozen_ones(frozen,
                                                                          monkeypatch):
    """A file of more rows than one batch goes through tf.data, several batches at once
    (batching.map_chunks); cut into batches of 2 rows, NER's and SQuAD's training
    features (and the command's answers from them) are still the frozen ones."""
    from bert_tf.text import batching
    whole = batching.map_chunks
    batches = []

    def two_rows(fn, elements, chunk):
        for out in whole(fn, elements, 2):
            batches.append(tf_rows(out))
            yield out

    monkeypatch.setattr(batching, "map_chunks", two_rows)
    computed = span_features.compute()
    assert len(batches) > 20 and max(batches) > 2      # windows of 2 rows' texts at once
    for prefix in ("ner_train/", "ner_python/", "squad_train/", "squad_python/"):
        assert_equal_arrays(computed, frozen, prefix)


def tf_rows(out):
    """Rows of a map_chunks output's first tensor (its windows, or its pieces)."""
    import tensorflow as tf
    first = tf.nest.flatten(out, expand_composites=True)[0]
    return int(first.shape[0])


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


def graph_windows(rows, room, stride, one_piece=False, max_windows=0, empty_window=False):
    """bert_tf/text/windows.py's ops on rows of unit lengths -> per row, (spans, best)
    in the oracle's terms (unit indexes within the row)."""
    from bert_tf.text import windows
    lengths = [n for row in rows for n in row]
    splits = np.concatenate([[0], np.cumsum([len(row) for row in rows])]).astype(np.int64)
    piece_splits = None if one_piece else \
        np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    row, first, end = windows.windows(splits[:-1], splits[1:], room, stride, piece_splits,
                                      max_windows, empty_window)
    best, _ = windows.max_context(row, first, end, splits[:-1], splits[1:], piece_splits)
    row, first, end, best = (x.numpy() for x in (row, first, end, best))
    out = []
    for r in range(len(rows)):
        mine = np.flatnonzero(row == r)
        spans = [(int(first[i] - splits[r]), int(end[i] - splits[r])) for i in mine]
        picked = best[splits[r]:splits[r + 1]]
        out.append((spans, (picked - (mine[0] if len(mine) else 0)).tolist()))
    return out


def test_graph_windows_and_max_context_equal_the_oracle():
    """Many rows at once (units of several pieces and of one), against the plain-Python
    oracle row by row: the windows, each unit's window, max_windows and empty rows."""
    rng = np.random.default_rng(0)
    for trial in range(30):
        room = int(rng.integers(1, 12))
        stride = [None, int(rng.integers(1, room + 1)), room + 3][trial % 3]
        rows = [list(rng.integers(1, room + 1, int(rng.integers(1, 25))))
                for _ in range(int(rng.integers(1, 6)))]
        for one_piece in (False, True):
            if one_piece:
                rows = [[1] * len(row) for row in rows]
            got = graph_windows(rows, room, stride, one_piece)
            for row, (spans, best) in zip(rows, got):
                assert spans == span_oracles.windows(row, room, stride), (row, room, stride)
                assert best == span_oracles.max_context(row, spans).tolist()
            limited = graph_windows(rows, room, stride, one_piece, max_windows=2)
            assert [s for s, _ in limited] == [s[:2] for s, _ in got]
    for one_piece in (False, True):
        got = graph_windows([[1, 1], [], [1]], 4, 2, one_piece, empty_window=True)
        assert [s for s, _ in got] == [[(0, 2)], [(0, 0)], [(0, 1)]]
        assert [s for s, _ in graph_windows([[], [1]], 4, 2, one_piece)] == [[], [(0, 1)]]
    with pytest.raises(ValueError, match="room and stride must be >= 1"):
        graph_windows([[1]], 0, 1)


def test_windows_of_rows_sharing_units_and_of_rooms_per_row():
    """SQuAD's rows: questions over one context's pieces (shared units), each with the
    room its question leaves."""
    from bert_tf.text import windows
    row, first, end = windows.windows([0, 0, 10], [10, 10, 13], [4, 6, 4], 2)
    assert list(zip(row.numpy(), first.numpy(), end.numpy())) == [
        (0, 0, 4), (0, 2, 6), (0, 4, 8), (0, 6, 10), (1, 0, 6), (1, 2, 8), (1, 4, 10),
        (2, 10, 13)]
    best, _ = windows.max_context(row, first, end, [0, 0, 10], [10, 10, 13])
    want = [span_oracles.max_context([1] * 10, span_oracles.windows([1] * 10, room, 2))
            for room in (4, 6)]
    assert best.numpy().tolist() == want[0].tolist() + (want[1] + 4).tolist() + [7, 7, 7]
