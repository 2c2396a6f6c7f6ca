"""The sandbox's default target: trace a snippet, return the trace as JSON bytes."""

from __future__ import annotations

import orjson

from gradstep.tracer import record
from gradstep.tracer.recorder import Limits


def run(code: str) -> bytes:
    return orjson.dumps(record(code, Limits.sandboxed()))
