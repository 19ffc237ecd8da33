"""SQuAD v1.1 / v2.0, extractive question answering: the family in one folder. `data.py`
(the reader and windowed features with character offsets), `postprocess.py` (windows,
max context, answer decoding), `metrics.py` (the official EM/F1), `task.py` (span model,
training, prediction, `SquadTask`), `serving.py` (`SquadModule`, its export) and
`__main__.py` (its command: `python -m tasks.families.squad`, or `python -m tasks.squad`)."""
