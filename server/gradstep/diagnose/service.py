"""Diagnoses for the server and the CLI: trace bytes in, trace bytes with verified diagnoses out.

Most runs have nothing to diagnose, and they must not pay for it: a scan of the
bytes for what every rule needs (an error, torch's non-leaf warning, a second
backward/grad call) skips the rest.
"""

from __future__ import annotations

import orjson

from gradstep.diagnose import Run, diagnose, facts

_HINTS = (b'"error":{', facts.NON_LEAF_MARK.encode())
_CALL = b'"api":"'


def may_need_diagnosis(body: bytes) -> bool:
    if any(hint in body for hint in _HINTS):
        return True
    first = body.find(_CALL)
    return first >= 0 and body.find(_CALL, first + 1) >= 0


def with_diagnoses(body: bytes, run: Run) -> bytes:
    """``body`` (a validated trace) with ``diagnoses`` filled in; unchanged when there are none."""
    if not may_need_diagnosis(body):
        return body
    trace = orjson.loads(body)
    found = diagnose(trace, run)
    if not found:
        return body
    trace["diagnoses"] = found
    return orjson.dumps(trace)
