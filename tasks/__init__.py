"""Fine-tuning tasks: the driver, one module per task family (families/) and a thin command
line per family (see README.md)."""

import bert_tf  # noqa: F401  (CPU kernel settings that must precede TensorFlow's import)
