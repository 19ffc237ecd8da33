"""The test suite: a folder per floor of the code (docs/architecture.md) and per task
family, named after what they test (tests/README.md). ROOT is the repository, TESTS this
folder (the helpers, fixtures/ and the C and worker files the tests start)."""

import os

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
