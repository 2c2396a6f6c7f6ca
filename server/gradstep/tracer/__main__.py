"""Trace the snippet on stdin; write the trace JSON to stdout. Used by ``gradstep trace``."""

import sys

import orjson

from gradstep.tracer import record

code = sys.stdin.buffer.read().decode("utf-8", errors="replace")
out = sys.stdout.buffer  # taken before the snippet runs: the tracer captures sys.stdout
out.write(orjson.dumps(record(code)))
out.flush()
