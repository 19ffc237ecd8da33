"""The base floor: what every floor above may use. Files written atomically, locks,
file patterns, input checks, the CLI kit, logs and progress, the TF-free TFRecord codec
and shard schema, the training plumbing, `BertConfig`, and the old module names
(`moved.py`). Nothing here imports TensorFlow at import time. bert_tf/README.md lists
every file."""
