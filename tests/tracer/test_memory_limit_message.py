"""An allocation the run's memory limit refuses (the sandbox's: ``Limits.memory_mb``) ends the
recording as ``status=limit`` with what it recorded; without a known limit (gradstep.record() in
one's own process) it stays the code's error, as plain Python raises it."""

from __future__ import annotations

import re

import orjson
import pytest
import torch
from gradstep.columns import pack
from gradstep.tracer import record
from gradstep.tracer.limits import Limits
from gradstep.voice import Observed, speak

TOO_BIG = """\
import torch
w = torch.randn(4, 3, requires_grad=True)
h = (w * 2).tanh()
huge = torch.empty(2**44)
h.sum().backward()
"""


def plain_error() -> BaseException:
    with pytest.raises((RuntimeError, MemoryError)) as e:
        torch.empty(2**44)
    return e.value


def test_a_refused_allocation_under_a_memory_limit_is_a_limit_with_the_steps_before_it():
    trace = record(TOO_BIG, Limits(memory_mb=512))
    assert (trace["status"], trace["limit"], trace["error"]["line"]) == ("limit", "memory", 4)
    assert [(s["kind"], s["line"]) for s in trace["steps"] if s["kind"] != "error"] == [("forward", 3)]
    assert trace["error"]["message"] == str(plain_error())  # the tracer writes torch's words only...
    served = speak(orjson.loads(orjson.dumps(pack(trace))), Observed(memory_mb=512))  # ...the server its own
    assert (served["status"], served["limit"]) == ("limit", "memory")
    message = served["error"]["message"]
    assert "512 MB of memory" in message and "w 4×3" in message  # the tensors it could name
    asked = int(re.search(r"allocate (\d+) bytes", str(plain_error())).group(1))  # torch's own count
    assert f"it asked for {asked / 2**20:,.0f} MB more" in message


def test_without_a_memory_limit_the_same_failure_is_the_codes_error():
    trace = record(TOO_BIG)
    assert (trace["status"], trace["limit"]) == ("error", None)
    assert trace["error"]["type"] == type(plain_error()).__name__
