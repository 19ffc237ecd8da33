"""The project's task families: the registry below, one line a family, read without
TensorFlow (`python -m export.saved_model --help` lists its names). Each entry names the
module that defines the family's `tasks.task.Task` subclass (decorated with `@family`:
its model class, serving module and name); `family_class` imports it when a family is
used. A family is a module or a folder here, and one line below.
"""

import importlib

from tasks.task import FAMILIES

# Name (export.saved_model's --task, the run directory's family) -> its module, in --task's
# order.
REGISTRY = {
    "classification": "tasks.families.classification.task",
    "swag": "tasks.families.swag.task",
    "ner": "tasks.families.ner.task",
    "squad": "tasks.families.squad.task",
    "multilabel": "tasks.families.multilabel.task",
}


def family_class(name):
    """The Task class of family `name`: a registered family (its module imported), or one
    defined with `@family` elsewhere (a test's); ValueError naming the known ones."""
    if name not in FAMILIES and name in REGISTRY:
        importlib.import_module(REGISTRY[name])
    if name not in FAMILIES:
        raise ValueError(f"unknown task family {name!r}; expected one of "
                         f"{', '.join(dict.fromkeys([*REGISTRY, *FAMILIES]))}")
    return FAMILIES[name]
