"""Tests of bert_tf/training."""
