"""bert_tf: BERT for TensorFlow 2 and Keras 3 (see README.md)."""

import os

# TensorFlow's oneDNN CPU kernels (MatMul, BatchMatMul and their fusions) are on by default
# only on CPUs with AVX-512; elsewhere (AMD, older Intel) TensorFlow uses Eigen, which
# trained BERT markedly slower on a 2-core AVX2 EPYC (the fine-tuning and pretraining
# steps of docs/benchmarks.md). Importing bert_tf before TensorFlow turns them on unless the
# variable is already set; TF_ENABLE_ONEDNN_OPTS=0 keeps TensorFlow's own default.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

# TensorFlow's C++ start-up lines (twice per process) are hidden unless
# TF_CPP_MIN_LOG_LEVEL is set; see bert_tf/base/tf_logs.py.
from bert_tf.base import tf_logs as _tf_logs  # noqa: E402

_tf_logs.install()


# The public API, imported on first use (`import bert_tf` itself must stay light: it runs
# before TensorFlow is imported, to set the variables above).
_API = {
    "BertConfig": "bert_tf.base.config",
    "BertTokenizer": "bert_tf.text.tokenization",
    "BertPacker": "bert_tf.text.packing",
    "BertEncoder": "bert_tf.models.encoder",
    "BertPretrainer": "bert_tf.models.pretrainer",
    "BertClassifier": "bert_tf.models.task_models",
    "BertMultipleChoice": "bert_tf.models.task_models",
    "BertTokenClassifier": "bert_tf.models.task_models",
    "BertSpanLabeler": "bert_tf.models.task_models",
    "load_encoder": "bert_tf.checkpoints.dispatch",
    "load_pretrainer": "bert_tf.checkpoints.dispatch",
    "save_checkpoint": "bert_tf.checkpoints.dispatch",
    "load_task_model": "bert_tf.models.run_dir",
    "save_task_model": "bert_tf.models.run_dir",
    "create_optimizer": "bert_tf.training.optimization",
}
__all__ = sorted(_API)


def __getattr__(name):
    if name not in _API:
        raise AttributeError(f"module 'bert_tf' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_API))
