"""Tests of tasks/ (shared task code, the driver, resume, search)."""
