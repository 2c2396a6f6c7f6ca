"""Latency of POST /api/trace: sequential runs on a local server vs a fresh python per run.

    .venv/bin/python benchmarks/latency.py [--runs 200] [--naive-runs 10] [--hits 50]

Starts ``gradstep serve`` on a free loopback port (rate limit off), then sends
``--runs`` sequential requests with the same small snippet, each made
distinct by a unique comment so none is a cache hit. The baseline, measured
in the same run: a fresh ``python -c`` per run that imports torch and runs the
same snippet (what serving without a warm zygote would cost at the least: no
tracer, no HTTP). The naive runs are interleaved with the server's (one naive
run, then a batch of server runs), so both see the same machine. Printed:
p50/p95 of both, the speedup, and the p50 of a cache hit. Targets: speedup
>= 40x, server p50 <= 30 ms.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import httpx
import orjson
from harness import SEED, Server, percentile, print_leftovers


def server_runs(client: httpx.Client, runs: int, tag: str) -> list[float]:
    times = []
    for i in range(runs):
        code = f"{SEED}# {tag} {i} {os.urandom(6).hex()}\n"
        t = time.perf_counter()
        r = client.post("/api/trace", json={"code": code})
        times.append(time.perf_counter() - t)
        if r.status_code != 200 or r.headers.get("x-gradstep-cache") != "miss":
            raise RuntimeError(
                f"run {i}: {r.status_code} cache={r.headers.get('x-gradstep-cache')}: {r.text[:300]}"
            )
        status = orjson.loads(r.content)["status"]
        if status != "ok":
            raise RuntimeError(f"run {i}: the trace's status is {status!r}: {r.text[:300]}")
    return times


def cache_hits(client: httpx.Client, runs: int) -> list[float]:
    code = f"{SEED}# cached {os.urandom(6).hex()}\n"
    client.post("/api/trace", json={"code": code}).raise_for_status()
    times = []
    for i in range(runs):
        t = time.perf_counter()
        r = client.post("/api/trace", json={"code": code})
        times.append(time.perf_counter() - t)
        if r.status_code != 200 or r.headers.get("x-gradstep-cache") != "hit":
            raise RuntimeError(f"hit {i}: {r.status_code} cache={r.headers.get('x-gradstep-cache')}")
    return times


def naive_run(i: int) -> float:
    """A fresh interpreter: import torch, run the snippet."""
    code = f"{SEED}# naive {i}\n"
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, stdin=subprocess.DEVNULL, capture_output=True)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--naive-runs", type=int, default=10)
    ap.add_argument("--hits", type=int, default=50)
    ap.add_argument("--workers", type=int, help="default: CPU count")
    args = ap.parse_args()

    server = Server(args.workers).start()
    try:
        layers = server.health["sandbox"]["layers"]
        inactive = [f"{k} ({v})" for k, v in layers.items() if v != "active"]
        if inactive:
            print("note: sandbox layers not active here: " + ", ".join(inactive))
        served: list[float] = []
        naive: list[float] = []
        batch = max(1, args.runs // max(1, args.naive_runs))
        with httpx.Client(base_url=server.url, trust_env=False, timeout=60) as client:
            server_runs(client, 10, "warm-up")
            while len(served) < args.runs or len(naive) < args.naive_runs:
                if len(naive) < args.naive_runs:
                    naive.append(naive_run(len(naive)))
                served += server_runs(client, min(batch, args.runs - len(served)), f"run {len(served)}")
            hits = cache_hits(client, args.hits)
    finally:
        left = server.stop()

    s50, s95 = percentile(served, 50) * 1e3, percentile(served, 95) * 1e3
    n50, n95 = percentile(naive, 50) * 1e3, percentile(naive, 95) * 1e3
    h50 = percentile(hits, 50) * 1e3
    print(f"\nPOST /api/trace, small snippet, sequential, {os.cpu_count()} CPUs (ms)")
    print(f"{'':34} {'p50':>8} {'p95':>8} {'runs':>6}")
    print(f"{'server, distinct code (cache miss)':34} {s50:8.1f} {s95:8.1f} {len(served):6}")
    print(f"{'server, cache hit':34} {h50:8.2f} {percentile(hits, 95) * 1e3:8.2f} {len(hits):6}")
    print(f"{'python -c per run (imports torch)':34} {n50:8.1f} {n95:8.1f} {len(naive):6}")
    print(
        f"\nspeedup p50 {n50 / s50:.1f}x, p95 {n95 / s95:.1f}x   (target >= 40x: {'met' if n50 / s50 >= 40 else 'NOT met'})"
    )
    print(f"server p50 {s50:.1f} ms   (target <= 30 ms: {'met' if s50 <= 30 else 'NOT met'})")
    print(f"cache hit p50 is {s50 / h50:.0f}x faster than a run")
    print_leftovers(left)
    return 0 if left.clean else 1


if __name__ == "__main__":
    sys.exit(main())
