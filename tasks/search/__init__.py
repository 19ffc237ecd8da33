"""The BERT paper's fine-tuning protocol for any task family: a grid of settings (the
learning rate among 5e-5, 4e-5, 3e-5 and 2e-5 by default), random restarts of each, the
setting chosen on dev by its mean score, the test set scored after the choice for that
setting's restarts only. `python -m tasks.search` is its command (__main__.py); plan.py
holds what it checks and records before anything trains (TF-free), tuner.py runs the
trials through KerasTuner, report.py chooses and writes the reports.
"""
