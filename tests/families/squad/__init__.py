"""Tests of tasks/families/squad/ (its training, export and serving)."""
