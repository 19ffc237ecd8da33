"""Tests of tasks/families/classification/ (its training, export and serving)."""
