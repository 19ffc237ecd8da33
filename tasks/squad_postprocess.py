"""SQuAD's windows and decoding moved to tasks/families/squad/postprocess.py; this name is that module."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("tasks.families.squad.postprocess")
