"""What the server's voice costs (gradstep.voice: the meaning check, notes, status and narration,
written in the checker from a child's facts), on the 24-layer TransformerEncoder trace.

    .venv/bin/python benchmarks/voice_cost.py [--repeat 15]

Interleaved in one run, medians of: the plain run (the baseline); the whole check the server makes
of the child's bytes (gradstep.checker.check: parse, validate, voice, serialize, compress); the same
check's parts without the voice (parse, validate, serialize, compress: what a check cost when the
child narrated); and the voice's parts alone (the meaning check; unpacking the rows and narrating).
Printed as milliseconds and as ratios to the plain run. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import orjson
import torch
from gradstep import encoding
from gradstep.checker import check
from gradstep.columns import pack, unpack
from gradstep.meaning import check_meaning
from gradstep.narrate import narrate
from gradstep.runs import served_fields
from gradstep.trace_dicts import collector_paused, validate
from gradstep.tracer import Limits, record
from gradstep.voice import Observed
from tracer_overhead import SNIPPET, plain


def without_voice(raw: bytes, fields: dict) -> None:
    """The check as it was before the server wrote the sentences: parse, validate, write the
    server's fields in, serialize, compress."""
    with collector_paused():
        trace = orjson.loads(raw)
        validate(trace)
        trace.update(fields)
        encoding.compress(orjson.dumps(trace))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(1)
    plain(SNIPPET)
    trace = record(SNIPPET, Limits.sandboxed())
    raw = orjson.dumps(pack({k: v for k, v in trace.items() if k not in ("code", "notes")}), default=repr)
    fields, seen = served_fields(SNIPPET), Observed()
    gc.collect()
    gc.freeze()
    times: dict[str, list[float]] = {
        k: [] for k in ("plain", "check", "check w/o voice", "meaning", "narrate")
    }
    for _ in range(args.repeat):  # interleaved: the machine's drift hits each alike
        t = time.perf_counter()
        plain(SNIPPET)
        times["plain"].append(time.perf_counter() - t)
        t = time.perf_counter()
        assert check(raw, fields, seen).problem is None
        times["check"].append(time.perf_counter() - t)
        t = time.perf_counter()
        without_voice(raw, fields)
        times["check w/o voice"].append(time.perf_counter() - t)
        wire = {**orjson.loads(raw), **fields}
        with collector_paused():
            t = time.perf_counter()
            check_meaning(wire)
            times["meaning"].append(time.perf_counter() - t)
            t = time.perf_counter()
            narrate(unpack(wire))
            times["narrate"].append(time.perf_counter() - t)
    median = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    base = median["plain"]
    print(f"24-layer trace: {len(raw) / 1e3:,.0f} KB from the child, {args.repeat} interleaved rounds")
    for name, ms in median.items():
        print(f"  {name:18s} {ms:8.2f} ms   {ms / base:6.3f}x plain")
    print(f"  the voice adds     {median['check'] - median['check w/o voice']:8.2f} ms to the check")


if __name__ == "__main__":
    main()
