"""GLUE's readers moved to tasks/families/glue/data.py; this name is that module."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("tasks.families.glue.data")
