"""GLUE and custom sentence (pair) classification / regression (export's and the
registry's `classification`): the family in one folder. `data.py` (GLUE's file layouts
and the readers), `task.py` (datasets, loss and metrics, predictions,
`ClassificationTask`), `serving.py` (`ClassifierModule`, its export) and `__main__.py`
(its command: `python -m tasks.families.glue`, or `python -m tasks.glue`). The family's
names are here too, as `tasks.families.glue.<name>`."""

from tasks.families.glue.task import *  # noqa: F401,F403  (the family's names)
from tasks.families.glue.task import (ClassificationConfig, ClassificationTask,  # noqa: F401
                                      ClassifierModule, Example)
