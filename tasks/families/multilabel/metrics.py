"""Multi-label metrics (NumPy): per-label, micro and macro F1, the exact-match ratio
(every label right), the per-label thresholds chosen on a dev set and the check of
thresholds read back from a run; each label's training frequency and the output bias
that starts the model there.

Micro F1 pools every (example, label) decision; macro F1 is the mean of the labels' F1;
a label with no positive and no predicted example has F1 1 (nothing to find, nothing
wrongly found), scikit-learn's zero_division=1.0.
"""

import numbers

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


def _counts(gold, predicted):
    """(tp, fp, fn) per label [K] of 0/1 arrays [N, K]."""
    return ((gold & predicted).sum(0), (~gold & predicted).sum(0),
            (gold & ~predicted).sum(0))


def _micro(tp, fp, fn):
    total = 2 * tp.sum() + fp.sum() + fn.sum()
    return 2 * tp.sum() / total if total else 1.0


def choose_thresholds(gold, probabilities):
    """Per label, a threshold from THRESHOLD_GRID chosen on (gold, probabilities), or 0.5.

    A label's candidate is the grid value with its best F1 (ties: the value nearest 0.5).
    It replaces 0.5 only where tuning beats 0.5 on this set: the label's F1 rises and so
    does the micro F1 of all labels (the others at 0.5). A label's F1 alone would also
    rise by predicting a rare label for every text (a threshold of 0.05 under a model
    that learned nothing of it: every text gets it, and the micro F1 falls); then the
    label keeps 0.5. A label without a positive keeps 0.5; so does every label when the
    chosen set would score a lower micro F1 than 0.5 everywhere."""
    gold = np.asarray(gold, bool)
    probabilities = np.asarray(probabilities)
    base = probabilities >= 0.5                                           # [N, K]
    tp, fp, fn = _counts(gold, base)
    base_micro = _micro(tp, fp, fn)
    chosen = []
    for k in range(gold.shape[1]):
        if not gold[:, k].any():
            chosen.append(0.5)
            continue
        scores = [f1_scores(gold[:, k:k + 1], probabilities[:, k:k + 1] >= t)[1]
                  for t in THRESHOLD_GRID]
        best = max(scores)
        candidates = [t for t, s in zip(THRESHOLD_GRID, scores) if s == best]
        t = float(min(candidates, key=lambda t: (abs(t - 0.5), t)))
        tk, fk, nk = (c[0] for c in _counts(gold[:, k:k + 1], probabilities[:, k:k + 1] >= t))
        at_half = f1_scores(gold[:, k:k + 1], base[:, k:k + 1])[1]
        micro = _micro(tp.sum() - tp[k] + tk, fp.sum() - fp[k] + fk, fn.sum() - fn[k] + nk)
        chosen.append(t if best > at_half and micro > base_micro else 0.5)
    together = probabilities >= np.asarray(chosen)[None, :]
    if _micro(*_counts(gold, together)) < base_micro:
        return [0.5] * gold.shape[1]
    return chosen


def label_frequencies(targets):
    """Each label's training frequency, smoothed: (positives + 0.5) / (rows + 1) of the
    multi-hot targets [N, K]. Never 0 or 1, so a label on no row or on every row still
    has a finite log-odds, at most log(2N + 1) from 0."""
    targets = np.asarray(targets, np.float64)
    return (targets.sum(0) + 0.5) / (len(targets) + 1.0)


def prior_bias(targets):
    """The output bias [K] that starts each label at its training frequency (task.py's
    model): the log-odds log(p / (1 - p)) of `label_frequencies`."""
    p = label_frequencies(targets)
    return np.log(p / (1.0 - p))


# How far above its level a label must rise on some text to count as told apart: its
# odds twice those of its training frequency and of the median text (log-odds + log 2).
RISE = float(np.log(2.0))


def below_prior(probabilities, priors):
    """Indexes of the labels the model tells nothing apart on `probabilities` [N, K]: on
    no text do a label's odds reach twice those of its prior (training frequency) and
    of the median text. A model that learned nothing of a label answers about its
    frequency on every text, a little above or below it (or one level for every text,
    a head still on its way there from 0); a label it learned rises far above that on
    the texts that have it. (Its threshold still follows `choose_thresholds`.)"""
    p = np.clip(np.asarray(probabilities, np.float64), 1e-7, 1 - 1e-7)
    q = np.clip(np.asarray(priors, np.float64), 1e-7, 1 - 1e-7)
    logits, prior = np.log(p / (1 - p)), np.log(q / (1 - q))
    level = np.maximum(prior, np.median(logits, axis=0))                   # [K]
    return [int(k) for k in np.flatnonzero(logits.max(axis=0) - level < RISE)]


def check_thresholds(thresholds, labels, where):
    """ValueError naming `where` (a run's multilabel_config.json) and the label unless
    `thresholds` holds one number in (0, 1) for each of `labels`."""
    if isinstance(thresholds, (str, bytes, dict)) or not hasattr(thresholds, "__len__") \
            or len(thresholds) != len(labels):
        raise ValueError(f"{where}: thresholds: expected a list of {len(labels)} numbers "
                         f"(one per label), got {thresholds!r}")
    for name, t in zip(labels, thresholds):
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or \
                not (0 < float(t) < 1):     # NaN fails the comparison too
            raise ValueError(f"{where}: threshold of label {name!r} is {t!r}; expected a "
                             f"number greater than 0 and less than 1")
