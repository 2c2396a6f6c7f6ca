"""Diagnoses for the server and the CLI: trace bytes in, trace bytes with verified diagnoses out.

Most runs have nothing to diagnose, and they must not pay for it: a scan of the
bytes for what every rule needs (an error, torch's non-leaf warning, a call line
that ran twice) skips the rest.
"""

from __future__ import annotations

import re

import orjson

from gradstep.diagnose import Run, diagnose, facts

_HINTS = (b'"error":{', facts.NON_LEAF_MARK.encode())
# a call step as the tracer writes it (kind, then line): the rules without an error or a warning to go
# on need the same call line twice (a backward in a loop); tests/test_diagnose_service.py pins the shape
_CALL_LINE = re.compile(rb'"kind":"(?:backward|grad)","line":(\d+)')


def may_need_diagnosis(body: bytes) -> bool:
    if any(hint in body for hint in _HINTS):
        return True
    lines = _CALL_LINE.findall(body)
    return len(set(lines)) < len(lines)


def with_diagnoses(body: bytes, run: Run) -> bytes:
    """``body`` (a validated trace) with ``diagnoses`` filled in; unchanged when there are none."""
    if not may_need_diagnosis(body):
        return body
    trace = orjson.loads(body)
    try:
        found = diagnose(trace, run)
    except Exception:  # e.g. the sandbox closed under a fix's run: the trace is still the answer
        return body
    if not found:
        return body
    trace["diagnoses"] = found
    return orjson.dumps(trace)
