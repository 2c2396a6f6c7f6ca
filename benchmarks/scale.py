"""Scale-out on this machine: runs/s through nginx with 1 vs 2 replicas, and cache-hit latency.

    .venv/bin/python benchmarks/scale.py [--rounds 3] [--seconds 10] [--clients 16] [--workers N]

Starts redis-server, two ``gradstep serve`` replicas sharing it (GRADSTEP_CACHE_URL, ``--workers``
sandboxed runs each, default the CPU count) and two Debian nginx instances with
deploy/nginx/nginx.conf (per-client rate lifted: the load comes from one address): one in front
of replica 1 only, one in front of both. Then, ``--rounds`` times, interleaved so both see the
same machine: ``--clients`` concurrent clients for ``--seconds`` through each nginx, every request
a new snippet (no cache hits). Printed: median runs/s of each, their ratio, runs/s per CPU.

Cache-hit latency, sequential, same run: a miss (the snippet runs), a hit in the replica's own
memory, a hit in Redis (the trace was computed by the other replica), and a memory hit through
nginx; medians and their ratio to the miss.

Needs nginx and redis-server (``apt-get install nginx redis-server``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import statistics
import sys
import time

import httpx
from harness import SEED, Server, percentile
from load import run_load
from testkit.sandbox_guard import uid_base
from testkit.services import Nginx, RedisServer

UID_BASES = (uid_base(1000), uid_base(1100))


def throughput(url: str, clients: int, seconds: float) -> tuple[float, dict]:
    stats, elapsed = asyncio.run(run_load(url, clients, seconds, cap=10**6))
    return stats.codes.get(200, 0) / elapsed, dict(stats.codes) | {"errors": sum(stats.errors.values())}


def timed_post(client: httpx.Client, url: str, code: str) -> tuple[float, str]:
    t = time.perf_counter()
    r = client.post(f"{url}/api/trace", json={"code": code})
    dt = time.perf_counter() - t
    r.raise_for_status()
    return dt, r.headers.get("x-gradstep-cache", "?")


def hit_latency(one: Server, two: Server, front: str, n: int) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {"miss": [], "memory hit": [], "redis hit": [], "hit via nginx": []}
    with httpx.Client(timeout=60, trust_env=False) as client:
        for i in range(n):
            code = f"{SEED}# hit {i} {os.urandom(4).hex()}\n"
            for label, url in (("miss", one.url), ("memory hit", one.url), ("redis hit", two.url)):
                dt, how = timed_post(client, url, code)
                expected = "miss" if label == "miss" else "hit"
                assert how == expected, f"{label}: X-Gradstep-Cache {how}"
                found[label].append(dt)
            # both replicas now hold it in memory: whichever nginx picks, it is a memory hit
            found["hit via nginx"].append(timed_post(client, front, code)[0])
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="per replica (default: CPUs)")
    ap.add_argument("--hits", type=int, default=50)
    args = ap.parse_args()
    for binary in ("nginx", "redis-server"):
        if shutil.which(binary) is None:
            print(f"{binary} is not installed: apt-get install nginx redis-server")
            return 2

    redis = RedisServer()
    env = {
        "GRADSTEP_CACHE_URL": redis.url,
        "GRADSTEP_CACHE_SECRET": secrets.token_hex(32),
        "GRADSTEP_TRUST_PROXY": "1",
    }
    replicas = [Server(args.workers, env, uid_base=base) for base in UID_BASES]
    fronts: list[Nginx] = []
    try:
        for r in replicas:
            r.launch()
        for r in replicas:
            r.wait_ready()
        addrs = [f"127.0.0.1:{r.port}" for r in replicas]
        fronts = [Nginx(addrs[:1], rate="100000r/s"), Nginx(addrs, rate="100000r/s")]
        cpus = os.cpu_count() or 1
        print(
            f"{cpus} CPUs; replicas with {args.workers} workers each; {args.clients} clients x {args.seconds:g} s"
        )
        throughput(fronts[1].url, args.clients, 3)  # warm both replicas and nginx
        rates: dict[int, list[float]] = {1: [], 2: []}
        for rnd in range(args.rounds):
            for n, front in (
                ((1, fronts[0]), (2, fronts[1])) if rnd % 2 == 0 else ((2, fronts[1]), (1, fronts[0]))
            ):
                rate, codes = throughput(front.url, args.clients, args.seconds)
                rates[n].append(rate)
                print(f"  round {rnd + 1}: {n} replica{'s' if n > 1 else ' '} {rate:7.1f} runs/s   {codes}")
        one, two = statistics.median(rates[1]), statistics.median(rates[2])
        print(f"\nruns/s through nginx, median of {args.rounds} rounds (every request a new snippet)")
        print(f"  1 replica               {one:7.1f}   ({one / cpus:.1f} per CPU)")
        print(f"  2 replicas              {two:7.1f}   ({two / cpus:.1f} per CPU)")
        print(
            f"  2 / 1                   {two / one:7.2f}x   (same {cpus} CPUs: more replicas add no CPU here)"
        )

        lat = hit_latency(replicas[0], replicas[1], fronts[1].url, args.hits)
        miss = statistics.median(lat["miss"])
        print(f"\nlatency, sequential, median of {args.hits} (p95), ratio to a miss")
        for label, values in lat.items():
            med = statistics.median(values)
            print(
                f"  {label:22} {med * 1e3:7.2f} ms  (p95 {percentile(values, 95) * 1e3:6.2f})  {med / miss:6.3f}x"
            )
        health = replicas[1].get_health()["cache"]["shared"]
        print(f"\nreplica 2's Redis tier: {health}")
    finally:
        for f in fronts:
            f.stop()
        for r in replicas:
            left = r.stop()
            if not left.clean:
                print("\n".join(left.report()))
        redis.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
