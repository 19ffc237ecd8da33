"""The base floor: what every floor above may use. Files written atomically, locks,
file patterns, input checks, the CLI kit, logs and progress, the TF-free TFRecord codec
and shard schema, the training plumbing and `BertConfig`. Nothing here imports
TensorFlow at import time. bert_tf/README.md lists every file."""
