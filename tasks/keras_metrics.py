"""Keras metrics that accumulate over a whole validation pass, so `fit` can keep the
checkpoint with the best official score (Keras' own PearsonCorrelation averages
per-batch correlations). tasks/metrics.py holds the numpy versions that score the
written predictions.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="bert_tf")
class ConfusionMatrixMetric(keras.metrics.Metric):
    """accuracy, mcc or f1 (binary of class 1 when K == 2, else macro) of argmax
    predictions, from a [K, K] count matrix (rows true, columns predicted). Sample
    weights 0 leave padding examples out."""

    def __init__(self, metric, num_classes, name=None, **kwargs):
        super().__init__(name=name or metric, **kwargs)
        self.metric, self.num_classes = metric, num_classes
        self.matrix = self.add_variable((num_classes, num_classes), "zeros",
                                        dtype="float32", name="matrix")

    def update_state(self, y_true, y_pred, sample_weight=None):
        k = self.num_classes
        true = ops.one_hot(ops.reshape(ops.cast(y_true, "int32"), (-1,)), k)   # [B, K]
        pred = ops.one_hot(ops.argmax(ops.reshape(y_pred, (-1, k)), -1), k)   # [B, K]
        if sample_weight is not None:
            true = true * ops.reshape(ops.cast(sample_weight, "float32"), (-1, 1))
        self.matrix.assign_add(ops.matmul(ops.transpose(true), pred))

    def result(self):
        c = ops.convert_to_tensor(self.matrix)
        t, p, n = ops.sum(c, 1), ops.sum(c, 0), ops.sum(c)
        correct = ops.trace(c)
        if self.metric == "accuracy":
            return ops.divide_no_nan(correct, n)
        if self.metric == "mcc":
            cov = correct * n - ops.sum(t * p)
            den = ops.sqrt((n * n - ops.sum(t * t)) * (n * n - ops.sum(p * p)))
            return ops.divide_no_nan(cov, den)
        # f1 per class = 2 tp / (predicted + true)
        f1 = ops.divide_no_nan(2.0 * ops.diagonal(c), t + p)
        if self.num_classes == 2:
            return f1[1]
        present = ops.cast((t + p) > 0, "float32")
        return ops.divide_no_nan(ops.sum(f1 * present), ops.sum(present))

    def reset_state(self):
        self.matrix.assign(ops.zeros_like(self.matrix))

    def get_config(self):
        return {"metric": self.metric, "num_classes": self.num_classes,
                "name": self.name}


@keras.saving.register_keras_serializable(package="bert_tf")
class PearsonMetric(keras.metrics.Metric):
    """Pearson correlation over everything seen, from running sums (weights 0 leave
    padding out)."""

    def __init__(self, name="pearson", **kwargs):
        super().__init__(name=name, **kwargs)
        self.sums = self.add_variable((6,), "zeros", dtype="float32", name="sums")

    def update_state(self, y_true, y_pred, sample_weight=None):
        x = ops.reshape(ops.cast(y_true, "float32"), (-1,))
        y = ops.reshape(ops.cast(y_pred, "float32"), (-1,))
        w = ops.ones_like(x) if sample_weight is None else \
            ops.reshape(ops.cast(sample_weight, "float32"), (-1,))
        self.sums.assign_add(ops.stack([ops.sum(w), ops.sum(w * x), ops.sum(w * y),
                                        ops.sum(w * x * x), ops.sum(w * y * y),
                                        ops.sum(w * x * y)]))

    def result(self):
        n, sx, sy, sxx, syy, sxy = [self.sums[i] for i in range(6)]
        cov = n * sxy - sx * sy
        return ops.divide_no_nan(cov, ops.sqrt(ops.maximum(n * sxx - sx * sx, 0.0) *
                                               ops.maximum(n * syy - sy * sy, 0.0)))

    def reset_state(self):
        self.sums.assign(ops.zeros_like(self.sums))
