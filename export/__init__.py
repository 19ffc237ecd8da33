"""Export to SavedModels with raw-text signatures (see README.md)."""

import bert_tf  # noqa: F401  (CPU kernel settings that must precede TensorFlow's import)
