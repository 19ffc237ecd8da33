"""Tests of every command together: workflows, fuzz, full disk."""
