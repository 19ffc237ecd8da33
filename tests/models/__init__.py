"""Tests of bert_tf/models."""
