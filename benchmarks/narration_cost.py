"""Cost of narration (``gradstep.narrate``) on the 24-layer TransformerEncoder trace.

Narration runs after ``record()`` on every trace (gradstep.pipeline), so it adds to the tracer's
overhead. Prints median milliseconds of narrating the finished trace next to
the plain run and the tracing itself (interleaved in one run), and their ratios.
Usage:
    python benchmarks/narration_cost.py [--repeat N]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import torch
from gradstep.narrate import narrate
from gradstep.tracer.limits import Limits
from gradstep.tracer.recorder import Recorder
from tracer_overhead import SNIPPET, plain


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(1)
    plain(SNIPPET)
    trace = Recorder(SNIPPET, Limits()).run()
    narrate(trace)
    gc.collect()
    gc.freeze()
    plain_ms, trace_ms, narrate_ms = [], [], []
    for _ in range(args.repeat):  # interleaved: machine noise hits all three alike
        t0 = time.perf_counter()
        plain(SNIPPET)
        t1 = time.perf_counter()
        trace = Recorder(SNIPPET, Limits()).run()
        t2 = time.perf_counter()
        narrate(trace)
        t3 = time.perf_counter()
        plain_ms.append((t1 - t0) * 1e3)
        trace_ms.append((t2 - t1) * 1e3)
        narrate_ms.append((t3 - t2) * 1e3)
    p, t, n = (statistics.median(v) for v in (plain_ms, trace_ms, narrate_ms))
    nodes = len(trace["nodes"])
    print(f"24-layer trace: {nodes} nodes, {len(trace['steps'])} steps")
    print(f"plain run  {p:8.2f} ms (median of {args.repeat})")
    print(f"traced     {t:8.2f} ms  ({t / p:.2f}x plain)")
    print(f"narration  {n:8.2f} ms  ({n / p:.3f}x plain, {n / t:.3f}x tracing)")


if __name__ == "__main__":
    main()
