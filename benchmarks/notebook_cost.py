"""The notebook path vs the recording alone: ``gradstep.show`` (and its output) and
``gradstep.trace`` on the 24-layer TransformerEncoder snippet, interleaved, in one process.

    .venv/bin/python benchmarks/notebook_cost.py [--repeat 9]

Printed: each path's median and its ratio to ``tracer.record`` alone (goal <= 1.5x). Targets are
printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time

import gradstep
import torch
from gradstep.tracer import record
from tracer_overhead import SNIPPET

PATHS = {
    "record (the recording alone)": lambda code: record(code),
    "gradstep.show + its output": lambda code: gradstep.show(code)._repr_mimebundle_(),
    "gradstep.trace (a typed Trace)": lambda code: gradstep.trace(code),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    torch.set_num_threads(1)
    times: dict[str, list[float]] = {name: [] for name in PATHS}
    for path in PATHS.values():  # warm: imports, the front end's bundle
        path(SNIPPET)
    for i in range(args.repeat):
        for name, path in PATHS.items():
            code = f"{SNIPPET}# {i}\n"
            t = time.perf_counter()
            path(code)
            times[name].append(time.perf_counter() - t)
    base = statistics.median(times["record (the recording alone)"])
    for name, values in times.items():
        m = statistics.median(values)
        print(f"{name:32s} {m * 1e3:7.1f} ms  {m / base:5.2f}x   (goal <= 1.5x)")


if __name__ == "__main__":
    main()
