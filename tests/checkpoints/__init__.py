"""Tests of bert_tf/checkpoints."""
