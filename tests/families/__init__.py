"""Tests of tasks/families/."""
