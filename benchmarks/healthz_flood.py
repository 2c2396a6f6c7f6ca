"""Does a flood stall the server? /healthz p50/p95 idle, under a crafted-code flood and under
many-address load, in one run (issue 47, item 4 and 5).

    .venv/bin/python benchmarks/healthz_flood.py [--seconds 15] [--connections 4] [--addresses 64]

Starts ``gradstep serve`` with the production limits (rate 2/s, burst 20, runs per client: half the
workers; ``GRADSTEP_TRUST_PROXY=1`` so the load can come from many addresses through
X-Forwarded-For, as behind nginx), then probes ``/healthz`` every 20 ms from a process of its own:
* idle, for the baseline;
* the crafted-code flood: one client, ``--connections`` connections, each POSTing 60,000
  characters of nested f-string format specs (its parse ~0.5-1 s, one C call holding the GIL)
  again and again, each a little different (no cache), never backing off;
* many-address load: ``--addresses`` clients, each its own address in one of 8 networks, POSTing
  distinct small snippets (cache misses: sandbox runs) again and again.
Printed: /healthz p50/p95 of each phase and its ratio to idle, what each load got answered
(status codes), and, for the many-address load, how long a late client's trivial run took.
Targets are printed, never asserted (the issue's: /healthz stays fast, no client stalls a replica).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import multiprocessing
import os
import time

import httpx
from harness import Server, percentile, print_leftovers

PROBE_EVERY = 0.02
CRAFTED = 'f"' + "{a:{b}}a" * 7490 + '"'  # 59,922 characters: a variant (+15) still fits a request
SMALL = "import torch\nx = torch.randn(8, requires_grad=True)\n(x * x).sum().backward()\n"


def probe(url: str, seconds: float, out: multiprocessing.Queue) -> None:
    """GET /healthz every PROBE_EVERY seconds, in a process of its own (the load's clients run in
    this script's event loop)."""
    times = []
    until = time.perf_counter() + seconds
    with httpx.Client(base_url=url, trust_env=False, timeout=120) as client:
        while time.perf_counter() < until:
            t = time.perf_counter()
            client.get("/healthz").raise_for_status()
            times.append(time.perf_counter() - t)
            time.sleep(max(0.0, PROBE_EVERY - (time.perf_counter() - t)))
    out.put(times)


async def probed(url: str, seconds: float) -> list[float]:
    out: multiprocessing.Queue = multiprocessing.Queue()
    proc = multiprocessing.Process(target=probe, args=(url, seconds, out))
    proc.start()
    times = await asyncio.to_thread(out.get)
    proc.join()
    return times


async def sender(
    client: httpx.AsyncClient, address: str, code: str, until: float, seen: collections.Counter
) -> None:
    """POST variants of ``code`` as ``address`` until ``until``, never backing off."""
    while time.perf_counter() < until:
        body = {"code": f"{code}# {os.urandom(6).hex()}\n"}
        try:
            r = await client.post("/api/trace", json=body, headers={"x-forwarded-for": address})
            seen[r.status_code] += 1
        except httpx.HTTPError as e:
            seen[type(e).__name__] += 1
            await asyncio.sleep(0.05)


async def late_client(client: httpx.AsyncClient, delay: float) -> float | str:
    """A trivial run of someone else, ``delay`` s into the load: its time, or what it got."""
    await asyncio.sleep(delay)
    t = time.perf_counter()
    r = await client.post(
        "/api/trace",
        json={"code": SMALL + f"# late {os.urandom(4).hex()}\n"},
        headers={"x-forwarded-for": "192.0.2.77"},
    )
    return time.perf_counter() - t if r.status_code == 200 else f"{r.status_code}"


def row(name: str, xs: list[float], idle: list[float] | None) -> str:
    p50, p95 = (percentile(xs, q) * 1e3 for q in (50, 95))
    text = f"  {name:22s} p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  ({len(xs)} probes)"
    if idle:
        i50, i95 = (percentile(idle, q) * 1e3 for q in (50, 95))
        text += f"   {p50 / i50:5.1f}x / {p95 / i95:5.1f}x idle"
    return text


async def measure(url: str, seconds: float, connections: int, addresses: int) -> None:
    limits = httpx.Limits(max_connections=connections + addresses + 4)
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=300, limits=limits) as client:
        (await client.post("/api/trace", json={"code": SMALL})).raise_for_status()  # warm
        idle = await probed(url, seconds / 2)

        flood: collections.Counter = collections.Counter()
        until = time.perf_counter() + seconds
        senders = [sender(client, "203.0.113.66", CRAFTED, until, flood) for _ in range(connections)]
        flooded, *_ = await asyncio.gather(probed(url, seconds), *senders)

        wave: collections.Counter = collections.Counter()
        until = time.perf_counter() + seconds
        senders = [sender(client, f"10.{i % 8}.0.{i // 8 + 1}", SMALL, until, wave) for i in range(addresses)]
        loaded, late, *_ = await asyncio.gather(
            probed(url, seconds), late_client(client, seconds / 2), *senders
        )

    print(
        f"\n/healthz every {PROBE_EVERY * 1e3:.0f} ms, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    print(row("idle", idle, None))
    print(row("crafted-code flood", flooded, idle) + "   (goal: p95 within a few x idle)")
    print(f"    one client, {connections} connections, 60,000-character f-strings: {dict(flood)}")
    print(row("many-address load", loaded, idle))
    print(f"    {addresses} addresses in 8 networks, small snippets: {dict(wave)}")
    print(f"    a late client's trivial run: {late if isinstance(late, str) else f'{late:.2f} s'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=15.0, help="per loaded phase")
    ap.add_argument("--connections", type=int, default=4, help="the flooding client's connections")
    ap.add_argument("--addresses", type=int, default=64, help="clients of the many-address load")
    ap.add_argument("--workers", type=int, help="default: CPU count")
    args = ap.parse_args()
    env = {"GRADSTEP_RATE": "2", "GRADSTEP_CLIENT_RUNS": "0", "GRADSTEP_TRUST_PROXY": "1"}
    server = Server(args.workers, env=env).start()
    try:
        asyncio.run(measure(server.url, args.seconds, args.connections, args.addresses))
    finally:
        left = server.stop()
    print_leftovers(left)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
