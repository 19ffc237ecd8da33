"""SWAG, multiple choice: the family in one folder. `task.py` (reader, preprocessing,
metrics, `SwagTask`), `serving.py` (`MultipleChoiceModule`, its export) and `__main__.py`
(its command: `python -m tasks.families.swag`, or `python -m tasks.swag`)."""
