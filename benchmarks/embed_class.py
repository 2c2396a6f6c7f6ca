"""A class opens a course page: many readers load the same /embed at once.

    .venv/bin/python benchmarks/embed_class.py [--readers 400] [--concurrency 50] [--rounds 3]

Starts ``gradstep serve`` (rate limit off, so the baseline measures runs, not refusals), then in
each round:

* embed: ``--readers`` page loads of ``/embed?snippet=retain_graph_accumulates``, ``--concurrency``
  at a time; a load is what the frame asks the server for: the page, then ``POST /api/trace`` of
  the snippet's code (the page carries the code, so no snippet request);
* baseline: the same number of loads of the app's own page ``/``, then ``POST /api/trace`` of a
  code distinct per reader (as if every student had pasted their own snippet).

Rounds interleave the two so both see the same machine. Printed: medians over rounds of the
per-load p50/p95 and of loads per second, the ratio embed/baseline, how many sandbox runs the
embed loads caused (answers marked X-Gradstep-Cache: miss; one per round is the goal), and the status codes.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import statistics
import time

import httpx
from harness import Server, percentile, print_leftovers

SNIPPET = "retain_graph_accumulates"


async def load(client: httpx.AsyncClient, page: str, code: str, codes: collections.Counter) -> float | None:
    """One reader's page load; the answers (status codes, trace cache outcome) go into `codes`."""
    t = time.perf_counter()
    try:
        r = await client.get(page)
        codes[r.status_code] += 1
        if r.status_code != 200:
            return None
        r = await client.post("/api/trace", json={"code": code})
    except httpx.HTTPError as e:
        codes[type(e).__name__] += 1
        return None
    codes[r.status_code] += 1
    codes[f"cache {r.headers.get('x-gradstep-cache')}"] += 1  # "miss" = a sandbox run
    return time.perf_counter() - t if r.status_code == 200 else None


async def wave(
    url: str, readers: int, concurrency: int, page: str, code_for
) -> tuple[list[float], float, dict]:
    codes: collections.Counter = collections.Counter()
    sem = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, trust_env=False, limits=limits, timeout=120) as client:

        async def one(i: int) -> float | None:
            async with sem:
                return await load(client, page, code_for(i), codes)

        t0 = time.perf_counter()
        times = await asyncio.gather(*(one(i) for i in range(readers)))
        elapsed = time.perf_counter() - t0
    return [t for t in times if t is not None], elapsed, dict(codes)


def summary(name: str, rows: list[tuple[list[float], float, dict]], readers: int) -> dict:
    p50 = statistics.median(percentile(t, 50) * 1000 for t, _, _ in rows if t)
    p95 = statistics.median(percentile(t, 95) * 1000 for t, _, _ in rows if t)
    rate = statistics.median(len(t) / e for t, e, _ in rows)
    served = statistics.median(len(t) for t, _, _ in rows)
    answers: collections.Counter = collections.Counter()
    for _, _, c in rows:
        answers.update(c)
    print(
        f"{name:9s} p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  {rate:7.1f} loads/s  "
        f"served {served:.0f}/{readers}  answers {dict(answers)}"
    )
    return {"p50": p50, "p95": p95, "rate": rate}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--readers", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    server = Server().start()
    try:
        code = httpx.get(f"{server.url}/api/snippets/{SNIPPET}", trust_env=False).json()["code"]
        embed_rows, base_rows, embed_runs = [], [], []
        for rnd in range(args.rounds):
            tag = os.urandom(4).hex()
            # a fresh comment per round: the first reader of each round is a real run (a cold cache)
            snippet_code = f"{code}# round {rnd} {tag}\n"
            embed_rows.append(
                asyncio.run(
                    wave(
                        server.url,
                        args.readers,
                        args.concurrency,
                        f"/embed?snippet={SNIPPET}",
                        lambda i, c=snippet_code: c,
                    )
                )
            )
            embed_runs.append(embed_rows[-1][2].get("cache miss", 0))
            base_rows.append(
                asyncio.run(
                    wave(
                        server.url,
                        args.readers,
                        args.concurrency,
                        "/",
                        lambda i, t=tag: f"{code}# reader {i} {t}\n",
                    )
                )
            )
        print(f"{args.readers} readers, {args.concurrency} at a time, {args.rounds} rounds (medians)")
        e = summary("embed", embed_rows, args.readers)
        b = summary("baseline", base_rows, args.readers)
        print(f"sandbox runs per embed round: {embed_runs}")
        print(f"ratio embed/baseline: p50 {e['p50'] / b['p50']:.3f}  loads/s {e['rate'] / b['rate']:.1f}x")
    finally:
        print_leftovers(server.stop())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
