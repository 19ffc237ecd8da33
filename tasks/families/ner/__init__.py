"""Named-entity recognition on CoNLL files: the family in one folder. `data.py` (the
reader: a file's words cut into units, their tags), `task.py` (first-piece labelling,
model, predictions, `NerTask`), `serving.py` (`NerModule`, its export) and `__main__.py`
(its command: `python -m tasks.families.ner`, or `python -m tasks.ner`)."""
