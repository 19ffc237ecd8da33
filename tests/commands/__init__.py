"""Tests of bert_tf's commands (bert_tf/*.py)."""
