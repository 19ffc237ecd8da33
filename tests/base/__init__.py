"""Tests of bert_tf/base."""
