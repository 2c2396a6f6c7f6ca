"""Tracer overhead on a 24-layer TransformerEncoder: traced vs plain, in one run.

Prints the ratio of median wall times (target <= 1.3x for the recording; the narration,
gradstep.narrate, derived from it afterwards, shown on top), the node count, and the
trace size raw and gzip (target <= 150 KB gzip, as the server sends it: GZipMiddleware's
level 9; level 6 shown too). Usage:
    python benchmarks/tracer_overhead.py [--repeat N]
"""

from __future__ import annotations

import argparse
import gc
import gzip
import statistics
import time

import orjson
import torch
from gradstep.tracer import record

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
    record(code, explain=False)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--no-freeze", action="store_true", help="don't gc.freeze() after warm-up")
    args = ap.parse_args()
    torch.set_num_threads(1)
    plain(SNIPPET)  # warm every path (lazy imports, allocator)
    record(SNIPPET)
    if not args.no_freeze:
        gc.collect()
        gc.freeze()  # as the sandbox's zygote does before it forks a child per run
    runs = {"plain": plain, "traced": recording, "traced + narration": record}
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
    for _ in range(args.repeat):  # interleave, so machine noise hits all alike
        for name, fn in runs.items():
            times[name].append(timed(fn, SNIPPET))
    trace = record(SNIPPET)
    raw = orjson.dumps(trace)
    served = gzip.compress(raw, compresslevel=9)  # what GZipMiddleware sends (its default level)
    gz6 = gzip.compress(raw, compresslevel=6)
    for i, what in enumerate(("wall", "cpu ")):
        p = statistics.median(t[i] for t in times["plain"])
        line = f"{what}  plain {p * 1e3:6.1f} ms"
        for name in ("traced", "traced + narration"):
            t = statistics.median(x[i] for x in times[name])
            line += f"  {name} {t * 1e3:6.1f} ms ({t / p:.2f}x)"
        print(line + "  (target <= 1.30x traced)")
    print(f"nodes  {len(trace['nodes'])}  steps {len(trace['steps'])}  status {trace['status']}")
    print(
        f"trace  raw {len(raw) / 1024:.0f} KB  gzip as served {len(served) / 1024:.1f} KB ({len(served)} bytes, "
        f"level 9)  (target <= 150 KB gzip); at level 6 {len(gz6) / 1024:.1f} KB"
    )


if __name__ == "__main__":
    main()
