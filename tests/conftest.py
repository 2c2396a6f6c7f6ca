"""Shared test setup: make tests/truth.py importable as ``truth``."""

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

# the `browser` and `server` fixtures of the browser tests, for any test module that requests them
from browser_support import browser, server  # noqa: E402, F401
