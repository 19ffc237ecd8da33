"""Loads an exported fill-mask SavedModel in a process that imports only tensorflow and
tensorflow_text (as a serving host would) and answers one raw-text request.

    python .ci/answer_saved_model.py models/fill_mask/1
"""

import sys

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

assert not any(m.split(".")[0] in ("bert_tf", "tasks", "export") for m in sys.modules)
model = tf.saved_model.load(sys.argv[1])
serve = model.signatures["serving_default"]
out = serve(text=tf.constant(["return the [MASK] of the list.", "the [MASK] is none."]))
tokens = out["tokens"].numpy()
assert tokens.shape[0] == 2 and tokens.shape[-1] >= 1, tokens.shape
print("fill-mask from a fresh process:",
      [[t.decode() for t in row.reshape(-1)[:3]] for row in tokens])
