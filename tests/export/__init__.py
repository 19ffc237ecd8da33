"""Tests of export/."""
