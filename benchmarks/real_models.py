"""Real models on the page (benchmarks/models/catalog.py), as ratios and sizes from one run.

    PYTHONPATH=server .venv/bin/python benchmarks/real_models.py [--repeat 5] [--big 48]

Starts ``gradstep serve`` (rate limit off, its own uids: GRADSTEP_UID_BASE + 2480) and measures, in
Chromium at 1400×900:

* Run → painted of the 12-layer GPT and of the 24-layer MLP, each a cache miss (a changed comment),
  in turns on one page: the medians and their ratio (target ≤ 4×);
* at ~6,000 nodes (a GPT of ``--big`` layers): a step switch (``setStep`` from a task to the next
  painted frame, over every step) and a scrub (the timeline's slider moved one step per frame, an
  ``input`` event each, to the painted frame): medians (target ≤ 50 ms);
* the trace's bytes per node on the wire, raw JSON and gzip (what a browser over HTTP gets), of
  each model;
* the page's JS heap per node: the heap after a garbage collection (CDP ``HeapProfiler`` and
  ``Runtime.getHeapUsage``) with each model shown, less the heap with a one-node snippet shown,
  over its node count.

Targets are printed, never asserted: the machine may be shared.
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import time

import httpx
from models.catalog import gpt, mlp
from playwright.sync_api import sync_playwright
from render import run
from testkit.browser_support import launch, running_server
from testkit.sandbox_guard import uid_base

TINY = "import torch\nx = torch.ones(2, requires_grad=True)\nx.sum().backward()\n"


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def painted(page, code: str, k: int) -> dict:
    """Run → painted of ``code``, a cache miss: the page's timings (ms): ``clickToPaint`` in all,
    ``request`` (the server's answer, as the page waited for it) and ``painted`` (trace → painted)."""
    return run(page, f"{code}\n# run {k} {time.time()}\n")


def switch_times(page) -> list[float]:
    """setStep(i) for every step, each from a task to the end of the next painted frame (ms)."""
    return page.evaluate(
        """async () => {
          const v = window.gradstep.viewer;
          const settle = () => new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
          const out = [];
          const n = v.model.steps.length;
          for (const i of [...Array(n).keys()].reverse().concat([...Array(n).keys()])) {
            const t0 = performance.now();
            v.setStep(i);
            await settle();
            out.push(performance.now() - t0);
          }
          return out;
        }"""
    )


def scrub_times(page) -> list[float]:
    """The timeline's slider moved by one step per event (an ``input`` event, as a drag gives), each
    to the end of the next painted frame (ms)."""
    return page.evaluate(
        """async () => {
          const s = document.querySelector('input.gs-slider');
          const settle = () => new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
          const out = [];
          const max = Number(s.max);
          for (const i of [...Array(max + 1).keys()].concat([...Array(max + 1).keys()].reverse())) {
            const t0 = performance.now();
            s.value = String(i);
            s.dispatchEvent(new Event('input', { bubbles: true }));
            await settle();
            out.push(performance.now() - t0);
          }
          return out;
        }"""
    )


def heap_used(cdp) -> int:
    cdp.send("HeapProfiler.collectGarbage")
    return int(cdp.send("Runtime.getHeapUsage")["usedSize"])


def wire(base: str, code: str) -> tuple[int, int, int]:
    """(nodes, raw JSON bytes, gzip bytes) of ``code``'s trace."""
    r = httpx.post(
        f"{base}/api/trace", json={"code": code}, headers={"accept-encoding": "identity"}, timeout=300
    )
    r.raise_for_status()
    nodes = len(r.json()["nodes"]["op"])
    return nodes, len(r.content), len(gzip.compress(r.content, 6))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--big", type=int, default=48, help="layers of the GPT for the ~6,000-node figures")
    args = ap.parse_args()
    models = {"12-layer GPT": gpt(12), "24-layer MLP": mlp(24), f"{args.big}-layer GPT": gpt(args.big)}
    with running_server(
        GRADSTEP_UID_BASE=str(uid_base(2480)),
        GRADSTEP_WORKERS="1",
        GRADSTEP_CPU_SECONDS="120",
        GRADSTEP_WALL_SECONDS="180",
        GRADSTEP_MEMORY_MB=os.environ.get("GRADSTEP_MEMORY_MB", "2048"),
    ) as base:
        print("trace on the wire (raw JSON / gzip):")
        sizes = {}
        for label, code in models.items():
            nodes, raw, gz = wire(base, code)
            sizes[label] = nodes
            print(
                f"  {label}: {nodes} nodes, {raw / nodes:.0f} B/node raw, {gz / nodes:.0f} B/node gzip ({raw / 1024:.0f} KB / {gz / 1024:.0f} KB)"
            )
        with sync_playwright() as p:
            browser = launch(p)
            page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
            cdp = page.context.new_cdp_session(page)
            page.goto(f"{base}/?snippet=shared_trunk_partial_grads")
            page.wait_for_function("Number(document.body.dataset.painted || 0) >= 1", timeout=60_000)

            gpt_ms, mlp_ms = [], []
            for k in range(args.repeat):
                order = [("gpt", gpt_ms, models["12-layer GPT"]), ("mlp", mlp_ms, models["24-layer MLP"])]
                for _, xs, code in order if k % 2 == 0 else reversed(order):
                    xs.append(painted(page, code, k))

            def part(xs: list[dict], key: str) -> float:
                return med([x[key] for x in xs])

            print(
                f"\nRun → painted, {args.repeat} cache misses each: 12-layer GPT median "
                f"{part(gpt_ms, 'clickToPaint'):.0f} ms, 24-layer MLP {part(mlp_ms, 'clickToPaint'):.0f} ms; "
                f"ratio {part(gpt_ms, 'clickToPaint') / part(mlp_ms, 'clickToPaint'):.2f}× (target ≤ 4×)"
            )
            for label, xs in (("12-layer GPT", gpt_ms), ("24-layer MLP", mlp_ms)):
                print(
                    f"  {label}: server's answer {part(xs, 'request'):.0f} ms, "
                    f"trace arrived → painted {part(xs, 'painted'):.0f} ms"
                )

            print(
                "\nJS heap after GC, per node (the page with the model shown, less with a one-node snippet):"
            )
            run(page, TINY)
            floor = heap_used(cdp)
            for label, code in models.items():
                run(page, code)
                used = heap_used(cdp)
                print(
                    f"  {label}: {(used - floor) / sizes[label] / 1024:.2f} KB/node ({used / 2**20:.1f} MB in all, {floor / 2**20:.1f} MB with the tiny one)"
                )
                run(page, TINY)
                floor = heap_used(cdp)

            big = f"{args.big}-layer GPT"
            run(page, models[big])
            nodes = page.evaluate("window.gradstep.viewer.model.nodes.length")
            switch, scrub = [], []
            for _ in range(max(1, args.repeat // 2)):
                switch += switch_times(page)
                scrub += scrub_times(page)
            print(
                f"\n{big}, {nodes} nodes, {page.evaluate('window.gradstep.viewer.model.steps.length')} steps: "
                f"step switch median {med(switch):.1f} ms (p90 {statistics.quantiles(switch, n=10)[-1]:.1f}); "
                f"scrub median {med(scrub):.1f} ms (p90 {statistics.quantiles(scrub, n=10)[-1]:.1f}) (target ≤ 50 ms)"
            )
            browser.close()


if __name__ == "__main__":
    main()
