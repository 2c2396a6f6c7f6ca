"""Throughput under load: many concurrent clients against a local server, then a leak check.

    .venv/bin/python benchmarks/load.py [--seconds 30] [--clients 64] [--workers N] [--queue Q]

Starts ``gradstep serve`` on a free loopback port (rate limit off, workers =
CPU count unless ``--workers``), warms it, then runs ``--clients`` concurrent
clients for ``--seconds``. Every request carries distinct code (a unique
comment), so nothing is served from the cache. A client that gets 503 or 429
waits its Retry-After, as a well-behaved client does. Printed: runs/s, p50/p95
latency of the 200s, responses by status code (and the traces by their
``status``), CPU per run (server and sandbox, load generator, the whole
machine), server RSS before and after (and its children's), and, after the
server is stopped, any process, cgroup, temp entry or mount left behind. Exit
status 1 on a 5xx other than 503, a failed run, a transport error or a leak.

Baselines, measured in the same run: the latency of a single run on the idle
server before the load starts, and the throughput the measured CPU cost per
run allows on this machine's CPUs.

The server harness (``Server``: start, stop, account for what was left) is
in harness.py, shared with latency.py, soak.py and scale.py.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import os
import sys
import time
from dataclasses import dataclass, field

import httpx
import orjson
from harness import SEED, Server, machine_cpu, percentile, print_leftovers

# -- the load ---------------------------------------------------------------------------------


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)  # seconds, 200 responses
    codes: collections.Counter = field(default_factory=collections.Counter)
    trace_status: collections.Counter = field(default_factory=collections.Counter)
    errors: collections.Counter = field(default_factory=collections.Counter)  # transport errors
    unexpected: list[str] = field(default_factory=list)


async def client_loop(
    cid: int, client: httpx.AsyncClient, deadline: float, budget: itertools.count, cap: int, stats: Stats
) -> None:
    token = os.urandom(4).hex()
    for n in itertools.count():
        if time.monotonic() >= deadline or next(budget) >= cap:
            return
        code = f"{SEED}# load client {cid} request {n} {token}\n"
        t = time.perf_counter()
        try:
            r = await client.post("/api/trace", json={"code": code})
        except httpx.HTTPError as e:
            stats.errors[type(e).__name__] += 1
            await asyncio.sleep(0.1)
            continue
        dt = time.perf_counter() - t
        stats.codes[r.status_code] += 1
        if r.status_code == 200:
            stats.latencies.append(dt)
            status = orjson.loads(r.content).get("status")
            stats.trace_status[status] += 1
            if r.headers.get("x-gradstep-cache") != "miss" and len(stats.unexpected) < 5:
                stats.unexpected.append(f"cache {r.headers.get('x-gradstep-cache')} for distinct code")
        elif r.status_code in (429, 503):
            wait = float(r.headers.get("retry-after", "1"))
            await asyncio.sleep(max(0.0, min(wait, deadline - time.monotonic())))
        elif len(stats.unexpected) < 5:
            stats.unexpected.append(f"{r.status_code}: {r.text[:200]}")


async def run_load(url: str, clients: int, seconds: float, cap: int) -> tuple[Stats, float]:
    stats = Stats()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    timeout = httpx.Timeout(120.0)
    async with httpx.AsyncClient(base_url=url, trust_env=False, limits=limits, timeout=timeout) as client:
        budget = itertools.count()
        t0 = time.perf_counter()
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(client_loop(i, client, deadline, budget, cap, stats) for i in range(clients)))
        elapsed = time.perf_counter() - t0
    return stats, elapsed


def idle_latency(url: str, runs: int) -> list[float]:
    """Sequential runs on the idle server (distinct code): the baseline for the ratios."""
    times = []
    with httpx.Client(base_url=url, trust_env=False, timeout=60) as client:
        for i in range(runs):
            t = time.perf_counter()
            r = client.post("/api/trace", json={"code": f"{SEED}# idle {i} {os.urandom(4).hex()}\n"})
            times.append(time.perf_counter() - t)
            r.raise_for_status()
    return times


def mb(kb: int) -> str:
    return f"{kb / 1024:.1f} MB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="default: CPU count")
    ap.add_argument("--queue", type=int, help="GRADSTEP_QUEUE (default: the server's, 32)")
    ap.add_argument("--max-requests", type=int, default=200_000, help="cap on requests, whatever the time")
    args = ap.parse_args()

    env = {} if args.queue is None else {"GRADSTEP_QUEUE": str(args.queue)}
    server = Server(args.workers, env).start()
    try:
        layers = server.health["sandbox"]["layers"]
        inactive = [f"{k} ({v})" for k, v in layers.items() if v != "active"]
        print(f"server pid {server.pid} on {server.url}, {args.workers} workers, {os.cpu_count()} CPUs")
        if inactive:
            print("note: sandbox layers not active here: " + ", ".join(inactive))
        idle_latency(server.url, 5)  # warm
        base = idle_latency(server.url, 20)
        rss_before, fds_before, threads_before = server.rss(), server.fds(), server.threads()
        cpu_before, own_before, machine_before = server.cpu(), os.times(), machine_cpu()
        stats, elapsed = asyncio.run(run_load(server.url, args.clients, args.seconds, args.max_requests))
        time.sleep(0.5)  # let the last children be reaped
        cpu_after, own_after, machine_after = server.cpu(), os.times(), machine_cpu()
        rss_after, fds_after, threads_after = server.rss(), server.fds(), server.threads()
        health = server.get_health()
    finally:
        left = server.stop()

    ok = stats.codes.get(200, 0)
    total = sum(stats.codes.values())
    p50, p95 = percentile(stats.latencies, 50), percentile(stats.latencies, 95)
    b50 = percentile(base, 50)
    print(f"\n{args.clients} clients for {args.seconds:g} s ({elapsed:.1f} s until the last response)")
    print(f"runs/s (200s)          {ok / elapsed:8.1f}   (target >= 50 on 2 cores)")
    print(f"requests/s (all)       {total / elapsed:8.1f}")
    print(f"latency of 200s        p50 {p50 * 1e3:7.1f} ms   p95 {p95 * 1e3:7.1f} ms")
    print(f"idle single run        p50 {b50 * 1e3:7.1f} ms   (baseline, same run)")
    print(
        f"p50 under load / idle  {p50 / b50:8.1f}x   (queueing: {args.clients} clients, {args.workers} workers)"
    )
    n = max(1, ok)  # CPU is charged to the runs; a 503 costs next to nothing
    user, system = cpu_after[0] - cpu_before[0], cpu_after[1] - cpu_before[1]
    client = (own_after.user - own_before.user) + (own_after.system - own_before.system)
    print(
        f"CPU per run            server + sandbox {(user + system) / n * 1e3:.1f} ms (user {user / n * 1e3:.1f},"
        f" system {system / n * 1e3:.1f}); load generator {client / n * 1e3:.1f} ms"
    )
    busy = machine_after[0] - machine_before[0]
    share = busy / (machine_after[1] - machine_before[1])
    print(
        f"machine CPU            {share:.0%} busy; {busy / n * 1e3:.1f} ms per run in all"
        f" ({(busy - user - system - client) / n * 1e3:.1f} ms outside this benchmark's processes:"
        " kernel workers, other load)"
    )
    ceiling = (os.cpu_count() or 1) * n / (user + system + client)
    print(
        f"CPU-bound ceiling      {ceiling:8.1f} runs/s on {os.cpu_count()} CPUs at these costs;"
        f" achieved {ok / elapsed / ceiling:.2f}x of it"
    )
    print("responses by code      " + ", ".join(f"{c}: {n}" for c, n in sorted(stats.codes.items())))
    print("traces by status       " + ", ".join(f"{s}: {n}" for s, n in sorted(stats.trace_status.items())))
    if stats.errors:
        print("transport errors       " + ", ".join(f"{e}: {n}" for e, n in stats.errors.most_common()))
    bad_5xx = {c: n for c, n in stats.codes.items() if c >= 500 and c != 503}
    print(f"5xx other than 503     {sum(bad_5xx.values())}" + (f"  {bad_5xx}" if bad_5xx else ""))
    for u in stats.unexpected:
        print(f"  unexpected: {u}")
    print(
        f"server RSS             before {mb(rss_before['server'])}, after {mb(rss_after['server'])}"
        f" ({(rss_after['server'] - rss_before['server']) / 1024:+.1f} MB;"
        f" trace cache now {health['cache']['bytes'] / 2**20:.1f} MB in {health['cache']['entries']} entries)"
    )
    print(
        f"children RSS (sum)     before {mb(rss_before['children'])} in {rss_before['processes']} processes,"
        f" after {mb(rss_after['children'])} in {rss_after['processes']}"
    )
    print(
        f"server fds / threads   before {fds_before} / {threads_before}, after {fds_after} / {threads_after}"
    )
    print(f"zygote starts          {health['sandbox']['starts']} (1 = it never died)")
    print_leftovers(left)
    failed = bool(bad_5xx) or not left.clean or stats.trace_status.keys() - {"ok"} or stats.errors
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
