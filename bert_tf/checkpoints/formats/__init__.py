"""Checkpoint formats: the core (name table, strict restore, format registry) and one
module per format above it, each registering itself with the core on import.

The built-in formats are imported here, so that importing any one of them registers all
seven in one order: the order detection tries them in and convert_checkpoint lists them
(those with a writer). Model Garden's, TF Hub's and a run_pretraining folder's come
last but are tried first (`looks_inside`): Model Garden's TF2 files carry google's file
name (bert_model.ckpt), and a run folder a `checkpoint` state file as google's
directories may.
A new format is one more module that calls `core.register_format` (and, if built in, one
more line below).
"""

from bert_tf.checkpoints.formats import google  # noqa: F401  (registers "google")
from bert_tf.checkpoints.formats import hf  # noqa: F401  (registers "hf")
from bert_tf.checkpoints.formats import keras  # noqa: F401  (registers "keras")
from bert_tf.checkpoints.formats import keras_hub  # noqa: F401  (registers "keras_hub")
from bert_tf.checkpoints.formats import model_garden  # noqa: F401  (registers "model_garden")
from bert_tf.checkpoints.formats import tfhub  # noqa: F401  (registers "tfhub")
from bert_tf.checkpoints.formats import pretraining_run  # noqa: F401  (registers "pretraining_run")
