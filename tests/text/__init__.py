"""Tests of bert_tf/text."""
