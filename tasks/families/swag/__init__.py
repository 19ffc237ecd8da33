"""SWAG, multiple choice: the family in one folder. `task.py` (reader, preprocessing,
metrics, `SwagTask`), `serving.py` (`MultipleChoiceModule`, its export) and `__main__.py`
(its command: `python -m tasks.families.swag`, or `python -m tasks.swag`). The family's
names are here too, as `tasks.families.swag.<name>`."""

from tasks.families.swag.task import *  # noqa: F401,F403  (the family's names)
from tasks.families.swag.task import (MultipleChoicePreprocessor, SwagConfig,  # noqa: F401
                                      SwagExample, SwagTask)
