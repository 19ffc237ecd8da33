"""The test suite: a folder per floor of the code (docs/architecture.md) and per task
family, named after what they test (tests/README.md). ROOT is the repository, TESTS this
folder (the helpers, fixtures/ and the C and worker files the tests start); `command_main`
imports nothing heavy, for child processes that check what a command imports."""

import os

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)


def command_main(module):
    """The `main` that `python -m module` runs: the module's, or its package's __main__'s."""
    import importlib
    found = importlib.import_module(module)
    if hasattr(found, "__path__"):
        found = importlib.import_module(module + ".__main__")
    return found.main
