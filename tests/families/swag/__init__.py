"""Tests of tasks/families/swag/ (its training, export and serving)."""
