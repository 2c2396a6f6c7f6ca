"""Rules run strict here: a rule that raises fails its test with its traceback, instead of showing
only as a missing diagnosis (in production a crashing rule is skipped and logged)."""

import gradstep.diagnose
import pytest


@pytest.fixture(autouse=True)
def strict_rules(monkeypatch):
    monkeypatch.setattr(gradstep.diagnose, "STRICT", True)
