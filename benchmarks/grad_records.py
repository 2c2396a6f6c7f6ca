"""Cost of the tracer's gradient records (GradRecords.records) on the 24-layer transformer's grads.

Runs the tracer benchmark's snippet in plain PyTorch (two backward calls, as traced), then times
``GradRecords(64).records(grads)`` with a fresh cache (what each backward step of the trace pays:
every grad changed) for the working tree's grads.py and for the one of git REF (default HEAD),
loaded side by side and measured in turns. Checks both give the same records (unless
--different, for a change of what the records hold), and prints the median of each and their
ratio. Usage:
    python benchmarks/grad_records.py [--against REF] [--repeat N] [--different]
    python benchmarks/grad_records.py --against 6e177ae~1   # vs one op per gradient, before batching
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from gradstep.tracer import grads as current
from tracer_overhead import SNIPPET

ROOT = Path(__file__).resolve().parents[1]
MODULE = "server/gradstep/tracer/grads.py"
MAX_VALUES = 64  # Limits.max_values


def module_of(ref: str):
    """grads.py as it is in git `ref`, imported under another name."""
    source = subprocess.run(["git", "show", f"{ref}:{MODULE}"], cwd=ROOT, check=True, capture_output=True)
    with tempfile.NamedTemporaryFile("wb", suffix=".py", delete=False) as f:
        f.write(source.stdout)
    spec = importlib.util.spec_from_file_location("grads_baseline", f.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    Path(f.name).unlink()
    return module


def benchmark_grads() -> list[torch.Tensor | None]:
    torch.manual_seed(0)
    scope: dict = {"__name__": "__main__"}
    exec(compile(SNIPPET, "<snippet>", "exec"), scope)
    return [p.grad for p in scope["model"].parameters()]


def timed(module, grads: list) -> float:
    records = module.GradRecords(MAX_VALUES)  # fresh cache: every grad is recomputed
    t0 = time.perf_counter()
    records.records(grads)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--against", default="HEAD", metavar="REF", help="git ref of the baseline grads.py")
    ap.add_argument("--repeat", type=int, default=300)
    ap.add_argument("--different", action="store_true", help="the records may differ from REF's")
    args = ap.parse_args()
    torch.set_num_threads(1)  # as tracer_overhead.py runs
    baseline = module_of(args.against)
    grads = benchmark_grads()
    got = current.GradRecords(MAX_VALUES).records(grads)
    if repr(got) != repr(baseline.GradRecords(MAX_VALUES).records(grads)):
        if not args.different:
            sys.exit(
                f"the working tree's records differ from those of {args.against} (--different: time anyway)"
            )
        print(f"records differ from those of {args.against} (--different)")
    small = sum(g.numel() <= MAX_VALUES for g in grads)
    times: dict[str, list[float]] = {"baseline": [], "current": []}
    gc.disable()  # a collection landing in one run would be noise
    for _ in range(args.repeat):  # in turns, so machine noise hits both alike
        times["baseline"].append(timed(baseline, grads))
        times["current"].append(timed(current, grads))
    gc.enable()
    base, now = (statistics.median(times[k]) for k in ("baseline", "current"))
    print(f"{len(grads)} grads ({small} with values), median of {args.repeat}:")
    print(f"  {args.against}: {base * 1e3:.3f} ms  working tree: {now * 1e3:.3f} ms  ({now / base:.2f}x)")


if __name__ == "__main__":
    main()
