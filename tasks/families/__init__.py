"""The project's task families, one module each: a `tasks.task.Task` subclass that
declares its model class, serving module and export name, its config dataclass, and the
data, metrics and predictions it needs. Importing this package registers each family in
`FAMILIES` (by export name: `python -m export.saved_model --task NAME`); a new family is a
module here and one line below.
"""

from tasks.task import FAMILIES  # noqa: F401  (filled by the modules below)
# Each registers its Task; in this order, which is --task's.
from tasks.families import glue, swag, ner, squad  # noqa: F401, I001
