"""Fine-tuning tasks: one module per task family (see README.md)."""

import bert_tf  # noqa: F401  (CPU kernel settings that must precede TensorFlow's import)
