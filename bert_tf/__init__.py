"""bert_tf: BERT for TensorFlow 2 and Keras 3 (see README.md)."""

import os

# TensorFlow's oneDNN CPU kernels (MatMul, BatchMatMul and their fusions) are on by default
# only on CPUs with AVX-512; elsewhere (AMD, older Intel) TensorFlow uses Eigen, which
# trains BERT markedly slower here (docs/benchmarks.md, "Fine-tuning (fp32)" and
# "Pretraining step (fp32)"). Importing bert_tf before TensorFlow turns them on unless the
# variable is already set; TF_ENABLE_ONEDNN_OPTS=0 keeps TensorFlow's own default.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

# TensorFlow's C++ start-up lines (twice per process) are hidden unless
# TF_CPP_MIN_LOG_LEVEL is set; see bert_tf/tf_logs.py.
from bert_tf import tf_logs as _tf_logs  # noqa: E402

_tf_logs.install()
