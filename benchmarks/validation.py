"""How long the server takes to validate a child's trace: the TypedDicts it uses (trace_dicts.TRACE)
against building the pydantic models (the baseline), interleaved, on the 24-layer trace (~1 MB).

    .venv/bin/python benchmarks/validation.py [--runs 25]

Both check the same keys and types (tests/trace/test_trace_dicts.py holds them to the same verdict);
both run with the collector paused, as the server does.
"""

from __future__ import annotations

import argparse
import statistics
import time

import orjson
from gradstep.columns import pack
from gradstep.pipeline import explained
from gradstep.schema import Trace
from gradstep.trace_dicts import TRACE, collector_paused
from tracer_overhead import SNIPPET


def timed(validate, raw: bytes) -> float:
    data = orjson.loads(raw)  # a fresh parse each time, as each child's bytes are
    with collector_paused():
        t = time.perf_counter()
        validate(data)
        return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=25)
    args = ap.parse_args()
    raw = orjson.dumps(pack(explained(SNIPPET)))  # as a child writes it
    models, typed = [], []
    for _ in range(args.runs):
        models.append(timed(Trace.model_validate, raw))
        typed.append(timed(TRACE.validate_python, raw))
    ratios = [m / t for m, t in zip(models, typed, strict=True)]
    print(f"trace {len(raw) / 1e6:.2f} MB, {args.runs} interleaved runs")
    print(f"models (baseline)  {statistics.median(models) * 1e3:6.1f} ms median")
    print(f"TypedDicts         {statistics.median(typed) * 1e3:6.1f} ms median")
    print(f"baseline / TypedDicts per pair: median {statistics.median(ratios):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
