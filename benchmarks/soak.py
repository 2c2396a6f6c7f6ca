"""Soak: many runs of good snippets and attacks; the server must not grow, leak or change its answers.

    .venv/bin/python benchmarks/soak.py [--runs 10000] [--concurrency 8] [--wall 1.5] [--cpu 1]

Starts ``gradstep serve`` on a free loopback port (rate limit off, the trace
cache off so that memory growth means a leak, short limits per run: wall
``--wall`` s, CPU ``--cpu`` s via GRADSTEP_WALL_SECONDS / GRADSTEP_CPU_SECONDS),
then makes ``--runs`` requests, at most ``--concurrency`` at a time, in a fixed
shuffled cycle of 40: 33 good runs (the curated snippets, fetched from
/api/snippets, each with a unique comment) and 7 attacks: an endless loop
(CPU limit), a sleep (wall limit), two memory bombs, two fork attempts and a
big print.

Printed: how long it took, each kind's outcomes, responses by status code,
the server's RSS (and the zygote's, open fds and threads) in the last 10% of
runs against runs 40-50% (the baseline, same run, after the warm-up the RSS curve
by decile shows), and, after the server
is stopped, any process, cgroup, temp entry or mount left behind. A good
snippet whose outcome is not what it always is (``ok``, or ``error`` for the
ones that fail on purpose), a ``crashed`` run, a 5xx other than 503, growth
or a leftover is reported as a problem (exit status 1).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field

import httpx
import orjson
from harness import Server, percentile, print_leftovers, rss_kb

ATTACKS = {
    "loop": "while True:\n    pass\n",
    "sleep": "import time\ntime.sleep(600)\n",
    "memory": 'b = b"x" * 10**10\n',
    "fork": "import os\nos.fork()\n",
    "print": 'print("x" * 50_000_000)\n',
}
CYCLE = ["good"] * 33 + ["loop", "sleep", "memory", "memory", "fork", "fork", "print"]
GROWTH_MB = 2.0  # RSS growth through the second half of the runs (see growth) reported as a problem


@dataclass
class Sample:
    done: int  # runs completed when taken
    server_kb: int
    zygote_kb: int
    fds: int
    threads: int


@dataclass
class Soak:
    outcomes: dict[str, collections.Counter] = field(
        default_factory=lambda: collections.defaultdict(collections.Counter)
    )
    codes: collections.Counter = field(default_factory=collections.Counter)
    errors: collections.Counter = field(default_factory=collections.Counter)
    problems: list[str] = field(default_factory=list)
    latencies: dict[str, list[float]] = field(default_factory=lambda: collections.defaultdict(list))
    samples: list[Sample] = field(default_factory=list)
    done: int = 0

    def problem(self, text: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(text)


def outcome(trace: dict) -> str:
    status = trace.get("status")
    if status == "ok":
        return "ok"
    if trace.get("limit"):
        return f"{status} ({trace['limit']})"
    error = trace.get("error") or {}
    return f"{status} ({error.get('type')})" if status == "error" else str(status)


def load_snippets(client: httpx.Client) -> list[tuple[str, str, bool]]:
    """(name, code, fails on purpose) for every curated snippet, through the API."""
    found = []
    for info in client.get("/api/snippets").raise_for_status().json():
        snippet = client.get(f"/api/snippets/{info['name']}").raise_for_status().json()
        found.append((snippet["name"], snippet["code"], snippet["fails"]))
    return found


def plan(runs: int, snippets: list[tuple[str, str, bool]], seed: int) -> list[tuple[str, str, str | None]]:
    """(kind, code, expected outcome or None) per run: the shuffled cycle, repeated."""
    rng = random.Random(seed)
    cycle = CYCLE[:]
    rng.shuffle(cycle)
    token = os.urandom(4).hex()
    good = 0
    out = []
    for i in range(runs):
        kind = cycle[i % len(cycle)]
        if kind == "good":
            name, code, fails = snippets[good % len(snippets)]
            good += 1
            expected = "error" if fails else "ok"
            kind = f"good:{name}"
        else:
            code, expected = ATTACKS[kind], None
        out.append((kind, f"{code.rstrip()}\n# soak {i} {token}\n", expected))
    return out


async def worker(
    client: httpx.AsyncClient,
    todo: collections.deque,
    soak: Soak,
    server: Server,
    zygote: int,
    every: int,
    deadline: float,
) -> None:
    while todo and time.monotonic() < deadline:
        kind, code, expected = todo.popleft()
        t = time.perf_counter()
        try:
            r = await client.post("/api/trace", json={"code": code})
        except httpx.HTTPError as e:
            soak.errors[type(e).__name__] += 1
            soak.problem(f"{kind}: {type(e).__name__}: {e}")
            continue
        dt = time.perf_counter() - t
        soak.codes[r.status_code] += 1
        group = kind.split(":")[0]
        if r.status_code == 200:
            result = outcome(orjson.loads(r.content))
            soak.outcomes[group][result] += 1
            soak.latencies[group].append(dt)
            if expected is not None and result.split(" ")[0] != expected:
                soak.problem(f"{kind}: expected {expected}, got {result}")
            if result.startswith("crashed"):
                soak.problem(f"{kind}: crashed: {r.text[:300]}")
        elif r.status_code in (429, 503):
            todo.append((kind, code, expected))  # back-pressure: retry it later
            await asyncio.sleep(float(r.headers.get("retry-after", "1")))
        else:
            soak.problem(f"{kind}: HTTP {r.status_code}: {r.text[:200]}")
        soak.done += 1
        if soak.done % every == 0:
            soak.samples.append(
                Sample(soak.done, rss_kb(server.pid), rss_kb(zygote), server.fds(), server.threads())
            )


async def run_soak(server: Server, runs: list, concurrency: int, wall: float, max_seconds: float) -> Soak:
    soak = Soak()
    every = max(1, len(runs) // 200)
    zygote = server.zygote_pid()
    todo = collections.deque(runs)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    timeout = httpx.Timeout(wall + 60.0)
    deadline = time.monotonic() + max_seconds
    async with httpx.AsyncClient(
        base_url=server.url, trust_env=False, limits=limits, timeout=timeout
    ) as client:
        await asyncio.gather(
            *(worker(client, todo, soak, server, zygote, every, deadline) for _ in range(concurrency))
        )
    if todo:
        soak.problem(f"stopped at --max-seconds with {len(todo)} runs not made")
    return soak


def growth(samples: list[Sample], attr: str) -> tuple[float, float]:
    """Median of the samples from 40% to 50% of the runs and of the last 10%: a leak keeps growing
    through the second half, while the first runs only fill caches and the allocator's arenas to
    their working size (the decile curve printed shows that warm-up)."""
    k = max(1, len(samples) // 10)
    middle = samples[4 * k : 5 * k] or samples[:k]
    first = statistics.median(getattr(s, attr) for s in middle)
    last = statistics.median(getattr(s, attr) for s in samples[-k:])
    return first, last


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--workers", type=int, help="default: CPU count")
    ap.add_argument("--wall", type=float, default=1.5, help="GRADSTEP_WALL_SECONDS (default 1.5)")
    ap.add_argument("--cpu", type=int, default=1, help="GRADSTEP_CPU_SECONDS (default 1)")
    ap.add_argument(
        "--cache", action="store_true", help="keep the trace cache on (its growth is then not a leak)"
    )
    ap.add_argument("--seed", type=int, default=0, help="shuffle of the cycle")
    ap.add_argument("--max-seconds", type=float, default=4 * 3600, help="stop making requests after this")
    args = ap.parse_args()

    env = {"GRADSTEP_WALL_SECONDS": str(args.wall), "GRADSTEP_CPU_SECONDS": str(args.cpu)}
    if not args.cache:
        env["GRADSTEP_CACHE_BYTES"] = "0"
    server = Server(args.workers, env).start()
    try:
        print(
            f"server pid {server.pid} on {server.url}, {server.workers} workers, {os.cpu_count()} CPUs;"
            f" wall {args.wall:g} s, cpu {args.cpu} s per run; cache {'on' if args.cache else 'off'}"
        )
        with httpx.Client(base_url=server.url, trust_env=False, timeout=30) as client:
            snippets = load_snippets(client)
        runs = plan(args.runs, snippets, args.seed)
        t0 = time.perf_counter()
        soak = asyncio.run(run_soak(server, runs, args.concurrency, args.wall, args.max_seconds))
        elapsed = time.perf_counter() - t0
        health = server.get_health()
        fds_end, threads_end = server.fds(), server.threads()
    finally:
        left = server.stop()

    print(
        f"\n{soak.done} runs in {elapsed:.1f} s ({soak.done / elapsed:.1f} runs/s, concurrency {args.concurrency})"
    )
    if soak.done:
        print(f"10000 runs would take about {elapsed / soak.done * 10_000 / 60:.1f} min at this rate")
    print(f"\n{'kind':8} {'runs':>6} {'p50 ms':>8} {'p95 ms':>8}  outcomes")
    for group in ["good", *ATTACKS]:
        counts = soak.outcomes.get(group, collections.Counter())
        lat = soak.latencies.get(group, [])
        text = ", ".join(f"{o}: {n}" for o, n in counts.most_common())
        print(
            f"{group:8} {sum(counts.values()):6} {percentile(lat, 50) * 1e3:8.0f} {percentile(lat, 95) * 1e3:8.0f}  {text}"
        )
    print("\nresponses by code      " + ", ".join(f"{c}: {n}" for c, n in sorted(soak.codes.items())))
    if soak.errors:
        print("transport errors       " + ", ".join(f"{e}: {n}" for e, n in soak.errors.most_common()))
    bad_5xx = sum(n for c, n in soak.codes.items() if c >= 500 and c != 503)
    print(f"5xx other than 503     {bad_5xx}")
    print(f"zygote starts          {health['sandbox']['starts']} (1 = it never died)")
    grew = []
    if len(soak.samples) >= 2:
        print(f"\n{len(soak.samples)} samples; runs 40-50% -> last 10% (median of the samples in each)")
        for attr, label, unit in (
            ("server_kb", "server RSS", "MB"),
            ("zygote_kb", "zygote RSS", "MB"),
            ("fds", "server open fds", ""),
            ("threads", "server threads", ""),
        ):
            first, last = growth(soak.samples, attr)
            if unit:
                first, last = first / 1024, last / 1024
            ratio = last / first if first else float("nan")
            print(f"  {label:16} {first:9.1f} -> {last:9.1f} {unit:2} ({last - first:+.1f}, {ratio:.3f}x)")
            if (attr.endswith("_kb") and last - first > GROWTH_MB) or (attr == "fds" and last > first):
                grew.append(label)
        print(f"  at the end: {fds_end} fds, {threads_end} threads")
        marks = [soak.samples[min(len(soak.samples) - 1, len(soak.samples) * k // 10)] for k in range(11)]
        print("  server RSS by decile of runs (MB): " + " ".join(f"{m.server_kb / 1024:.1f}" for m in marks))
    print()
    print_leftovers(left)
    for p in soak.problems:
        print(f"PROBLEM: {p}")
    if grew:
        print(f"GROWTH: {', '.join(grew)}")
    failed = (
        soak.problems or grew or bad_5xx or soak.errors or not left.clean or health["sandbox"]["starts"] != 1
    )
    print("soak: " + ("PROBLEMS (see above)" if failed else "clean"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
