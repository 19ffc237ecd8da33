"""The checkpoints floor: the formats (`formats/`: the core and one module per format),
the dispatcher on top of them (`dispatch.py`: detect, read, restore, load, save) and the
released checkpoints by name (`registry.py`).

`bert_tf.checkpoints.<name>` gives the dispatcher's names (`load_encoder`,
`read_checkpoint`, `save_checkpoint`, ...), as it did when the dispatcher was this
module; they are imported on first use, so that importing `registry` or a format stays
as light as it is.
"""


def __getattr__(name):
    import importlib
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    if os.path.exists(os.path.join(here, name + ".py")) or \
            os.path.isdir(os.path.join(here, name)):
        raise AttributeError(name)           # a submodule, not yet imported
    try:
        dispatch = importlib.import_module("bert_tf.checkpoints.dispatch")
    except ImportError:
        raise AttributeError(name) from None
    try:
        return getattr(dispatch, name)
    except AttributeError:
        raise AttributeError(
            f"module 'bert_tf.checkpoints' has no attribute {name!r}") from None
