"""Tests of tasks/families/multilabel/ (its training, export and serving)."""
