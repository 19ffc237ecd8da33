"""Tests of bert_tf/data."""
