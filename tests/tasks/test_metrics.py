"""tasks.metrics against hand-worked cases and the references (scikit-learn, scipy), the
degenerate cases those define, the GLUE table, and the streaming Keras metrics that pick
the best checkpoint against the numpy ones."""

import math

import numpy as np
import pytest

from tasks import metrics

sklearn_metrics = pytest.importorskip("sklearn.metrics")
scipy_stats = pytest.importorskip("scipy.stats")


# ----------------------------------------------------------------------------- by hand

def test_binary_counts_by_hand():
    # tp=3, tn=2, fp=1, fn=2 (labels 1 1 1 1 1 0 0 0, predictions 1 1 1 0 0 1 0 0)
    y = [1, 1, 1, 1, 1, 0, 0, 0]
    p = [1, 1, 1, 0, 0, 1, 0, 0]
    assert metrics.accuracy(y, p) == 5 / 8
    # precision 3/4, recall 3/5 -> F1 = 2*3 / (2*3 + 1 + 2) = 6/9
    assert metrics.f1_score(y, p) == pytest.approx(6 / 9, abs=1e-15)
    # (tp*tn - fp*fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)) = (6 - 2) / sqrt(4*5*3*4)
    assert metrics.matthews_corrcoef(y, p) == pytest.approx(4 / math.sqrt(240), abs=1e-15)
    np.testing.assert_array_equal(metrics.confusion_matrix(y, p), [[2, 1], [2, 3]])


def test_multiclass_mcc_and_macro_f1_by_hand():
    y = [0, 0, 1, 1, 2, 2]
    p = [0, 1, 1, 1, 2, 0]
    # Confusion [[1,1,0],[0,2,0],[1,0,1]]: true counts t = (2,2,2), predicted p = (2,3,1),
    # correct c = 4, total s = 6:
    # cov_yp = 4*6 - (2*2 + 2*3 + 2*1) = 12; cov_yy = 36 - 12 = 24; cov_pp = 36 - 14 = 22
    assert metrics.matthews_corrcoef(y, p) == pytest.approx(12 / math.sqrt(24 * 22),
                                                           abs=1e-15)
    # per-class F1: 2*1/(2+2) = .5, 2*2/(2+3) = .8, 2*1/(2+1) = 2/3
    assert metrics.f1_score(y, p, average="macro") == pytest.approx((.5 + .8 + 2 / 3) / 3)


def test_correlations_by_hand():
    x = [1.0, 2.0, 3.0, 4.0]
    y = [2.0, 4.0, 5.0, 9.0]
    # dx = (-1.5,-.5,.5,1.5), dy = (-3,-1,0,4): sum dx*dy = 4.5+.5+0+6 = 11,
    # |dx|^2 = 5, |dy|^2 = 26
    assert metrics.pearson(x, y) == pytest.approx(11 / math.sqrt(5 * 26), abs=1e-15)
    assert metrics.spearman(x, y) == pytest.approx(1.0)
    # Ties take the mean rank: (10, 20, 20, 30) -> (1, 2.5, 2.5, 4)
    np.testing.assert_array_equal(metrics.rankdata([10, 20, 20, 30]), [1, 2.5, 2.5, 4])
    assert metrics.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)


def test_degenerate_cases():
    # A constant prediction: MCC 0 (sklearn's convention), F1 0 when no positives at all.
    assert metrics.matthews_corrcoef([0, 1, 1, 0], [1, 1, 1, 1]) == 0.0
    assert metrics.f1_score([0, 0, 0], [0, 0, 0]) == 0.0
    assert metrics.matthews_corrcoef([1, 1], [1, 1]) == 0.0
    assert math.isnan(metrics.pearson([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError, match="differ in length"):
        metrics.accuracy([0, 1], [0])
    with pytest.raises(ValueError, match="no examples"):
        metrics.accuracy([], [])
    with pytest.raises(ValueError, match="average"):
        metrics.f1_score([0], [0], average="micro")


# ----------------------------------------------------------------------------- references

@pytest.mark.parametrize("seed", range(6))
def test_against_sklearn_and_scipy(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 400))
    k = int(rng.integers(2, 5))
    y = rng.integers(0, k, n)
    # Predictions correlated with the labels so the scores are not all near 0.
    p = np.where(rng.random(n) < 0.6, y, rng.integers(0, k, n))
    assert metrics.accuracy(y, p) == pytest.approx(sklearn_metrics.accuracy_score(y, p))
    assert metrics.matthews_corrcoef(y, p) == pytest.approx(
        sklearn_metrics.matthews_corrcoef(y, p), abs=1e-12)
    assert metrics.f1_score(y, p, average="macro") == pytest.approx(
        sklearn_metrics.f1_score(y, p, average="macro", zero_division=0), abs=1e-12)
    yb, pb = (y > 0).astype(int), (p > 0).astype(int)
    assert metrics.f1_score(yb, pb) == pytest.approx(
        sklearn_metrics.f1_score(yb, pb, zero_division=0), abs=1e-12)

    a = rng.normal(size=n)
    b = a + rng.normal(scale=float(rng.uniform(0.1, 3)), size=n)
    # Rounded values: many ties, which is where Spearman implementations differ.
    a_tied, b_tied = np.round(a), np.round(b * 2) / 2
    assert metrics.pearson(a, b) == pytest.approx(scipy_stats.pearsonr(a, b)[0], abs=1e-12)
    for u, v in ((a, b), (a_tied, b_tied)):
        assert metrics.spearman(u, v) == pytest.approx(scipy_stats.spearmanr(u, v)[0],
                                                       abs=1e-12)
    np.testing.assert_array_equal(metrics.rankdata(b_tied), scipy_stats.rankdata(b_tied))


def test_mcc_large_counts_do_not_overflow():
    # 2e6 examples: the products in the formula reach ~1e24, beyond int64.
    y = np.repeat([0, 1, 0, 1], [700_000, 600_000, 300_000, 400_000])
    p = np.repeat([0, 1, 1, 0], [700_000, 600_000, 300_000, 400_000])
    assert metrics.matthews_corrcoef(y, p) == pytest.approx(
        sklearn_metrics.matthews_corrcoef(y, p), abs=1e-12)


# ----------------------------------------------------------------------------- GLUE table

def test_glue_metric_table():
    y = [1, 0, 1, 1, 0, 1]
    p = [1, 0, 0, 1, 1, 1]
    cola = metrics.glue_metrics("cola", y, p)
    assert set(cola) == {"mcc", "score"}
    assert cola["score"] == cola["mcc"] == pytest.approx(
        sklearn_metrics.matthews_corrcoef(y, p))
    mrpc = metrics.glue_metrics("mrpc", y, p)
    assert mrpc["f1"] == pytest.approx(sklearn_metrics.f1_score(y, p))
    assert mrpc["accuracy"] == pytest.approx(4 / 6)
    assert mrpc["score"] == pytest.approx((mrpc["f1"] + mrpc["accuracy"]) / 2)
    for task in ("sst2", "mnli", "qnli", "rte", "wnli"):
        assert metrics.glue_metrics(task, y, p) == {"accuracy": 4 / 6, "score": 4 / 6}
    s = metrics.glue_metrics("stsb", [0.0, 1.0, 2.5, 5.0], [0.5, 0.8, 3.0, 4.0])
    assert s["pearson"] == pytest.approx(scipy_stats.pearsonr([0, 1, 2.5, 5],
                                                              [.5, .8, 3, 4])[0])
    assert s["spearman"] == pytest.approx(1.0)
    assert sorted(metrics.GLUE_METRICS) == ["cola", "mnli", "mrpc", "qnli", "qqp", "rte",
                                            "sst2", "stsb", "wnli"]
    with pytest.raises(ValueError, match="unknown GLUE task"):
        metrics.glue_metrics("squad", y, p)


# ----------------------------------------------------------------------------- streaming

@pytest.mark.parametrize("k", [2, 3])
def test_streaming_keras_metrics_match_numpy(k):
    """The Keras metrics that choose best.weights.h5 accumulate over batches, honour
    weight-0 padding, and agree with tasks.metrics on the whole set."""
    from tasks.keras_metrics import ConfusionMatrixMetric, PearsonMetric
    rng = np.random.default_rng(k)
    n = 90
    y = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) + 1.5 * np.eye(k)[y]
    p = logits.argmax(-1)
    expected = {"accuracy": metrics.accuracy(y, p), "mcc": metrics.matthews_corrcoef(y, p),
                "f1": metrics.f1_score(y, p, average="binary" if k == 2 else "macro")}
    for name, value in expected.items():
        m = ConfusionMatrixMetric(name, k)
        for start in range(0, n, 32):      # three batches, the last one padded
            yb, lb = y[start:start + 32], logits[start:start + 32]
            pad = 32 - len(yb)
            w = np.r_[np.full(len(yb), 1.7), np.zeros(pad)]     # constant scale: no effect
            m.update_state(np.r_[yb, np.zeros(pad, int)],
                           np.r_[lb, np.tile(np.eye(k)[:1] * 9, (pad, 1))], w)
        assert float(m.result()) == pytest.approx(value, abs=1e-5), name
    scores = rng.normal(size=n)
    gold = scores + rng.normal(size=n)
    m = PearsonMetric()
    for start in range(0, n, 40):
        m.update_state(gold[start:start + 40], scores[start:start + 40])
    m.update_state(np.ones(8), np.zeros(8), np.zeros(8))   # padding only: no effect
    assert float(m.result()) == pytest.approx(metrics.pearson(gold, scores), abs=1e-4)
