"""Multi-label metrics (NumPy): per-label, micro and macro F1, the exact-match ratio
(every label right), and the per-label thresholds chosen on a dev set.

Micro F1 pools every (example, label) decision; macro F1 is the mean of the labels' F1;
a label with no positive and no predicted example has F1 1 (nothing to find, nothing
wrongly found), scikit-learn's zero_division=1.0.
"""

import numpy as np

# The thresholds tried per label: 0.05, 0.10, ..., 0.95.
THRESHOLD_GRID = np.round(np.arange(1, 20) * 0.05, 2)


def f1_scores(gold, predicted):
    """(per-label F1 [K], micro F1) of 0/1 arrays [N, K]."""
    gold, predicted = np.asarray(gold, bool), np.asarray(predicted, bool)
    tp = (gold & predicted).sum(0).astype(np.float64)
    fp = (~gold & predicted).sum(0)
    fn = (gold & ~predicted).sum(0)
    denominator = 2 * tp + fp + fn
    per_label = np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1), 1.0)
    total = 2 * tp.sum() + fp.sum() + fn.sum()
    micro = 2 * tp.sum() / total if total else 1.0
    return per_label, float(micro)


def multilabel_metrics(gold, probabilities, thresholds, labels):
    """{micro_f1, macro_f1, exact_match, loss (mean binary cross-entropy), f1_<label>}."""
    gold = np.asarray(gold, np.float64)
    p = np.clip(np.asarray(probabilities, np.float64), 1e-12, 1 - 1e-12)
    predicted = p >= np.asarray(thresholds)[None, :]
    per_label, micro = f1_scores(gold, predicted)
    values = {"micro_f1": micro, "macro_f1": float(per_label.mean()),
              "exact_match": float((predicted == gold.astype(bool)).all(1).mean()),
              "loss": float(-np.mean(gold * np.log(p) + (1 - gold) * np.log(1 - p)))}
    values.update({f"f1_{name}": float(f) for name, f in zip(labels, per_label)})
    return values


def choose_thresholds(gold, probabilities):
    """Per label, the THRESHOLD_GRID value with the best F1 on (gold, probabilities);
    ties go to the value nearest 0.5, and a label without a positive keeps 0.5."""
    gold = np.asarray(gold, bool)
    probabilities = np.asarray(probabilities)
    chosen = []
    for k in range(gold.shape[1]):
        if not gold[:, k].any():
            chosen.append(0.5)
            continue
        scores = [f1_scores(gold[:, k:k + 1], probabilities[:, k:k + 1] >= t)[1]
                  for t in THRESHOLD_GRID]
        best = max(scores)
        candidates = [t for t, s in zip(THRESHOLD_GRID, scores) if s == best]
        chosen.append(float(min(candidates, key=lambda t: (abs(t - 0.5), t))))
    return chosen
