"""Tests of tasks/families/ner/ (its training, export and serving)."""
