"""Module names that moved, and the import hook that keeps the old ones working.

bert_tf's modules stand in one folder per floor (base/, text/, models/, checkpoints/,
training/, data/: docs/architecture.md). The names they had before, flat under bert_tf
(`bert_tf.encoder`, `bert_tf.pretraining.optimization`, ...), still import: `install()`
(run by `import bert_tf`) puts a finder first on `sys.meta_path` that answers an old name
with the module of its new one, the same module object (so a monkeypatch or an
`isinstance` through either name holds), and `python -m` runs an old name's code. The
old names are kept for one release; docs/architecture.md ("Moved") lists them.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys

# Old name -> new name; a package's entry covers its modules (`bert_tf.pretraining.fit`
# -> `bert_tf.training.fit`).
MOVED = {
    "bert_tf.files": "bert_tf.base.files",
    "bert_tf.progress": "bert_tf.base.progress",
    "bert_tf.tf_logs": "bert_tf.base.tf_logs",
    "bert_tf.file_patterns": "bert_tf.base.file_patterns",
    "bert_tf.checks": "bert_tf.base.checks",
    "bert_tf.output_lock": "bert_tf.base.output_lock",
    "bert_tf.tfrecord": "bert_tf.base.tfrecord",
    "bert_tf.shard_schema": "bert_tf.base.shard_schema",
    "bert_tf.graph_calls": "bert_tf.base.graph_calls",
    "bert_tf.input_names": "bert_tf.base.input_names",
    "bert_tf.cli": "bert_tf.base.cli",
    "bert_tf.corpus": "bert_tf.base.corpus",
    "bert_tf.training_plumbing": "bert_tf.base.training_plumbing",
    "bert_tf.config": "bert_tf.base.config",
    "bert_tf.text_rules": "bert_tf.text.text_rules",
    "bert_tf.tokenization": "bert_tf.text.tokenization",
    "bert_tf.words": "bert_tf.text.words",
    "bert_tf.wordpiece_learner": "bert_tf.text.wordpiece_learner",
    "bert_tf.packing": "bert_tf.text.packing",
    "bert_tf.preprocessor": "bert_tf.text.preprocessor",
    "bert_tf.batching": "bert_tf.text.batching",
    "bert_tf.conlleval": "bert_tf.text.conlleval",
    "bert_tf.layers": "bert_tf.models.layers",
    "bert_tf.encoder": "bert_tf.models.encoder",
    "bert_tf.heads": "bert_tf.models.heads",
    "bert_tf.pretrainer": "bert_tf.models.pretrainer",
    "bert_tf.pretraining_losses": "bert_tf.models.pretraining_losses",
    "bert_tf.task_layers": "bert_tf.models.task_layers",
    "bert_tf.task_models": "bert_tf.models.task_models",
    "bert_tf.run_dir": "bert_tf.models.run_dir",
    "bert_tf.checkpoint_formats": "bert_tf.checkpoints.formats",
    "bert_tf.registry": "bert_tf.checkpoints.registry",
    "bert_tf.keras_hub_format": "bert_tf.checkpoints.formats.keras_hub",
    "bert_tf.pretraining": "bert_tf.training",
    "bert_tf.pretraining_data": "bert_tf.data",
}


def new_name(name):
    """The name module `name` has now, or None when it did not move."""
    for old in sorted(MOVED, key=len, reverse=True):
        if name == old or name.startswith(old + "."):
            return MOVED[old] + name[len(old):]
    return None


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module of its new one."""

    def __init__(self, target):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module):
        pass

    def get_code(self, name):
        """The new module's code (what `python -m old.name` runs)."""
        return importlib.util.find_spec(self.target).loader.get_code(self.target)


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        new = new_name(name)
        if new is None:
            return None
        found = importlib.util.find_spec(new)
        if found is None:
            return None
        return importlib.machinery.ModuleSpec(
            name, _Alias(new), origin=found.origin,
            is_package=found.submodule_search_locations is not None)


def install():
    """Old names import (once per process; `import bert_tf` calls it)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
