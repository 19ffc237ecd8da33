"""Evaluation metrics of the fine-tuning tasks, in plain numpy.

GLUE reports one or two numbers per task (Wang et al., 2018): Matthews correlation for
CoLA, F1 and accuracy for MRPC and QQP, Pearson and Spearman correlation for STS-B,
accuracy for the rest. Each function here matches its usual reference on the same input
(scikit-learn's matthews_corrcoef / f1_score / accuracy_score, scipy's pearsonr /
spearmanr; tests/tasks/test_metrics.py checks them against each other and against hand-worked
cases), including the degenerate cases: a constant prediction gives MCC 0, F1 with no
predicted and no true positives gives 0. The runtime needs only numpy, so exported models
and small installs do not pull in scikit-learn or scipy.
"""

import numpy as np

# Metric names per GLUE task, the first being the one that selects the best checkpoint
# ("glue score" for tasks with two numbers is their mean, as on the leaderboard).
GLUE_METRICS = {
    "cola": ("mcc",),
    "sst2": ("accuracy",),
    "mrpc": ("f1", "accuracy"),
    "stsb": ("pearson", "spearman"),
    "qqp": ("f1", "accuracy"),
    "mnli": ("accuracy",),
    "qnli": ("accuracy",),
    "rte": ("accuracy",),
    "wnli": ("accuracy",),
}


def _pair(labels, predictions, dtype=None):
    labels = np.asarray(labels, dtype=dtype).reshape(-1)
    predictions = np.asarray(predictions, dtype=dtype).reshape(-1)
    if labels.shape != predictions.shape:
        raise ValueError(f"labels and predictions differ in length: {labels.size} vs "
                         f"{predictions.size}")
    if labels.size == 0:
        raise ValueError("no examples to score")
    return labels, predictions


def accuracy(labels, predictions):
    """Fraction of exact matches."""
    labels, predictions = _pair(labels, predictions)
    return float(np.mean(labels == predictions))


def confusion_matrix(labels, predictions, num_classes=None):
    """[num_classes, num_classes] counts, rows = true class, columns = predicted class."""
    labels, predictions = _pair(labels, predictions, np.int64)
    if num_classes is None:
        num_classes = int(max(labels.max(), predictions.max())) + 1
    if labels.min() < 0 or predictions.min() < 0:
        raise ValueError("class ids must be >= 0")
    matrix = np.zeros((num_classes, num_classes), np.int64)
    np.add.at(matrix, (labels, predictions), 1)
    return matrix


def matthews_corrcoef(labels, predictions):
    """Matthews correlation coefficient, multi-class form (Gorodkin 2004), which for two
    classes is (tp*tn - fp*fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)).

    0 when either side is constant (the denominator vanishes), as scikit-learn returns.
    Computed in float64 from integer counts; the products reach ~1e20 on large sets, which
    int64 would overflow.
    """
    c = confusion_matrix(labels, predictions).astype(np.float64)
    t = c.sum(axis=1)          # [K] true occurrences of each class
    p = c.sum(axis=0)          # [K] predicted occurrences of each class
    n = c.sum()
    correct = np.trace(c)
    cov_yp = correct * n - np.dot(t, p)
    cov_yy = n * n - np.dot(t, t)
    cov_pp = n * n - np.dot(p, p)
    denominator = np.sqrt(cov_yy * cov_pp)
    return float(cov_yp / denominator) if denominator > 0 else 0.0


def f1_score(labels, predictions, average="binary", pos_label=1):
    """F1 = 2 * precision * recall / (precision + recall).

    average "binary": of class `pos_label` (GLUE's MRPC and QQP: label 1 = paraphrase /
    duplicate). "macro": the unweighted mean over the classes present in labels or
    predictions. A class with no true and no predicted members has F1 0 (scikit-learn's
    zero_division=0).
    """
    labels, predictions = _pair(labels, predictions)
    if average == "binary":
        classes = [pos_label]
    elif average == "macro":
        classes = np.union1d(labels, predictions)
    else:
        raise ValueError(f"average must be 'binary' or 'macro', got {average!r}")
    scores = []
    for c in classes:
        tp = np.sum((predictions == c) & (labels == c))
        # 2tp / (2tp + fp + fn) is the same F1 without dividing by zero precision/recall.
        denominator = np.sum(predictions == c) + np.sum(labels == c)
        scores.append(2.0 * tp / denominator if denominator else 0.0)
    return float(np.mean(scores))


def pearson(x, y):
    """Pearson correlation; nan when either side is constant (as scipy)."""
    x, y = _pair(x, y, np.float64)
    if x.size < 2:
        raise ValueError("correlation needs at least 2 examples")
    dx, dy = x - x.mean(), y - y.mean()
    denominator = np.sqrt(np.dot(dx, dx) * np.dot(dy, dy))
    if denominator == 0:
        return float("nan")
    # Clipped: rounding can put a perfect correlation a hair above 1.
    return float(np.clip(np.dot(dx, dy) / denominator, -1.0, 1.0))


def rankdata(values):
    """Ranks from 1, ties sharing the mean of the ranks they span (scipy's "average")."""
    values = np.asarray(values, np.float64).reshape(-1)
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    # Start index of each run of equal values in sorted order.
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    ends = np.r_[starts[1:], values.size]
    mean_rank = (starts + ends + 1) / 2.0      # mean of ranks start+1 .. end
    ranks = np.empty(values.size, np.float64)
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


def spearman(x, y):
    """Spearman rank correlation = Pearson correlation of the average ranks."""
    x, y = _pair(x, y, np.float64)
    return pearson(rankdata(x), rankdata(y))


_FUNCTIONS = {
    "accuracy": accuracy,
    "mcc": matthews_corrcoef,
    "f1": f1_score,
    "pearson": pearson,
    "spearman": spearman,
}


def glue_metrics(task_name, labels, predictions):
    """The official metrics of a GLUE task: {name: value}, plus "score", the leaderboard's
    per-task number (the mean when the task reports two). labels/predictions are class ids
    (STS-B: float scores)."""
    if task_name not in GLUE_METRICS:
        raise ValueError(f"unknown GLUE task {task_name!r}; one of {sorted(GLUE_METRICS)}")
    names = GLUE_METRICS[task_name]
    results = {name: _FUNCTIONS[name](labels, predictions) for name in names}
    results["score"] = float(np.mean([results[name] for name in names]))
    return results


def classification_metrics(labels, predictions, num_classes):
    """Metrics of a user-defined classifier: accuracy, MCC and F1 (binary F1 of class 1
    for two classes, macro F1 otherwise); "score" = accuracy."""
    results = {"accuracy": accuracy(labels, predictions),
               "mcc": matthews_corrcoef(labels, predictions),
               "f1": f1_score(labels, predictions,
                              average="binary" if num_classes == 2 else "macro")}
    results["score"] = results["accuracy"]
    return results


def regression_metrics(labels, predictions):
    """Pearson, Spearman, mean squared error; "score" = mean of the two correlations."""
    labels, predictions = _pair(labels, predictions, np.float64)
    results = {"pearson": pearson(labels, predictions),
               "spearman": spearman(labels, predictions),
               "mse": float(np.mean((labels - predictions) ** 2))}
    results["score"] = (results["pearson"] + results["spearman"]) / 2
    return results
