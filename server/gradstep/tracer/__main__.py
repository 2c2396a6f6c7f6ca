"""Trace the snippet on stdin; write the recording (no narration) as JSON to stdout: the tracer
alone in a fresh interpreter (tests/tracer/test_tracer_features.py compares its warnings)."""

import sys

import orjson

from gradstep.tracer import record

code = sys.stdin.buffer.read().decode("utf-8", errors="replace")
out = sys.stdout.buffer  # taken before the snippet runs: the tracer captures sys.stdout
out.write(orjson.dumps(record(code)))
out.flush()
