"""GLUE and custom sentence (pair) classification / regression (export's and the
registry's `classification`): the family in one folder. `data.py` (GLUE's file layouts
and the readers), `task.py` (datasets, loss and metrics, predictions,
`ClassificationTask`), `serving.py` (`ClassifierModule`, its export) and `__main__.py`
(its command: `python -m tasks.families.classification`, or `python -m tasks.glue`)."""
