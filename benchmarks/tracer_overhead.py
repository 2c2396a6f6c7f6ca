"""Tracer overhead on a 24-layer TransformerEncoder: traced vs plain, in one run.

Prints the ratio of median wall times (target <= 1.4x for recording + narration; the narration,
gradstep.narrate, derived from it afterwards, shown on top), the node count, and the
trace size raw and gzip (target <= 150 KB gzip, as the server sends it: gradstep.encoding's
level; level 9 shown too). Usage:
    python benchmarks/tracer_overhead.py [--repeat N]
    python benchmarks/tracer_overhead.py --instructions   # needs valgrind; takes minutes

Every kind of run shares one process pinned to one CPU (--cpu; the scheduler moving it between
CPUs mid-run adds noise to both), interleaved; the spread of the traced/plain ratio over those
pairs (10th-90th percentile) says how much to trust the median on this machine.

--instructions counts the CPU instructions of one plain and one traced run (callgrind, the
difference between processes doing 1 and 3 runs after the same warm-up): slow, but the same
on a busy machine, where wall and CPU times can be off by tens of percent.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import orjson
import torch
from gradstep.encoding import GZIP_LEVEL, Encoded, compress, with_gzip
from gradstep.pipeline import explained
from gradstep.tracer import graph, record

SNIPPET = """
import torch
from torch import nn
torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.1, batch_first=True)
model = nn.TransformerEncoder(layer, num_layers=24, enable_nested_tensor=False)
x = torch.randn(8, 16, 64)
out = model(x)
loss = out.pow(2).mean()
loss.backward(retain_graph=True)
loss.backward()
"""


def plain(code: str) -> None:
    exec(compile(code, "<snippet>", "exec"), {"__name__": "__main__"})


def timed(fn, code: str) -> tuple[float, float]:
    """Wall and CPU seconds of one run (CPU time is less disturbed by other load)."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn(code)
    return time.perf_counter() - w0, time.process_time() - c0


def recording(code: str) -> None:
    record(code)


def recording_in_python(code: str) -> None:
    """The same recording with graph.py's Python node reader instead of the C one."""
    native, graph._nodes = graph._nodes, None
    try:
        record(code)
    finally:
        graph._nodes = native


def pin(cpu: int | None) -> None:
    if cpu == -1:
        return
    allowed = sorted(os.sched_getaffinity(0))
    cpu = allowed[-1] if cpu is None else cpu
    os.sched_setaffinity(0, {cpu})
    print(f"pinned to CPU {cpu} of {allowed}")


def warm_up(freeze: bool = True) -> None:
    torch.set_num_threads(1)
    plain(SNIPPET)  # warm every path (lazy imports, allocator)
    explained(SNIPPET)
    if freeze:
        gc.collect()
        gc.freeze()  # as the sandbox's zygote does before it forks a child per run


def _count_runs(mode: str, runs: int) -> None:
    """The process callgrind counts: the warm-up of main(), then ``runs`` runs of one kind."""
    warm_up()
    for _ in range(runs):
        plain(SNIPPET) if mode == "plain" else recording(SNIPPET)


def _instructions(mode: str, runs: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__]
            + ["--count-runs", mode, str(runs)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},  # same dict layouts in every process
        )
        found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
        if done.returncode or not found:
            raise SystemExit(f"callgrind failed ({done.returncode}):\n{done.stderr[-2000:]}")
        return int(found.group(1).replace(",", ""))


def count_instructions() -> None:
    jobs = [(mode, runs) for mode in ("plain", "traced") for runs in (1, 3)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: _instructions(*job), jobs), strict=True))
    per_run = {mode: (counts[mode, 3] - counts[mode, 1]) / 2 for mode in ("plain", "traced")}
    print(
        f"instructions per run  plain {per_run['plain'] / 1e6:.0f} M  traced {per_run['traced'] / 1e6:.0f} M "
        f"({per_run['traced'] / per_run['plain']:.3f}x)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--no-freeze", action="store_true", help="don't gc.freeze() after warm-up")
    ap.add_argument("--instructions", action="store_true", help="count instructions under callgrind")
    ap.add_argument(
        "--cpu", type=int, default=None, help="CPU to pin to (default: the last allowed; -1: no pin)"
    )
    ap.add_argument("--count-runs", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.count_runs:
        return _count_runs(args.count_runs[0], int(args.count_runs[1]))
    if args.instructions:
        return count_instructions()
    pin(args.cpu)
    warm_up(freeze=not args.no_freeze)
    runs = {"plain": plain, "traced": recording, "traced + narration": explained}
    if graph._nodes is not None:
        runs["traced, Python reader"] = recording_in_python
    else:
        print("the C node reader (tracer/_nodes.c) is not built: tracing with the Python one")
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
    for _ in range(args.repeat):  # interleave, so machine noise hits all alike
        for name, fn in runs.items():
            times[name].append(timed(fn, SNIPPET))
    trace = explained(SNIPPET)
    raw = orjson.dumps(trace)
    served = Encoded.unpack(with_gzip(compress(raw)))  # what the server stores, and sends over gzip
    gz9 = gzip.compress(raw, compresslevel=9)
    for i, what in enumerate(("wall", "cpu ")):
        p = statistics.median(t[i] for t in times["plain"])
        line = f"{what}  plain {p * 1e3:6.1f} ms"
        for name in list(runs)[1:]:
            t = statistics.median(x[i] for x in times[name])
            line += f"  {name} {t * 1e3:6.1f} ms ({t / p:.2f}x)"
        print(line + "  (target <= 1.4x traced + narration)")
    pairs = [t[0] / p[0] for t, p in zip(times["traced"], times["plain"], strict=True)]
    if len(pairs) > 1:  # quantiles need two
        low, *_, high = statistics.quantiles(pairs, n=10)
        print(
            f"traced/plain per interleaved pair (wall): median {statistics.median(pairs):.2f}x, "
            f"10-90% {low:.2f}-{high:.2f}x"
        )
    print(f"nodes  {len(trace['nodes'])}  steps {len(trace['steps'])}  status {trace['status']}")
    print(
        f"trace  raw {len(raw) / 1024:.0f} KB  gzip as served {len(served.gzip or b'') / 1024:.1f} KB "
        f"(level {GZIP_LEVEL})  (target <= 150 KB gzip); at level 9 {len(gz9) / 1024:.1f} KB; "
        f"brotli as served {len(served.br) / 1024:.1f} KB"
    )


if __name__ == "__main__":
    main()
