"""The checkpoints floor: the formats (`formats/`: the core and one module per format),
the dispatcher on top of them (`dispatch.py`: detect, read, restore, load, save) and the
released checkpoints by name (`registry.py`). The dispatcher's main names are bert_tf's
(`bert_tf.load_encoder`, ...); the rest import from `bert_tf.checkpoints.dispatch`."""
