"""Deep graphs in real Chromium: an LSTM unrolled over 100 time steps (benchmarks/models/catalog.py,
``lstm(100)``: a chain of about 1,500 autograd nodes in one module) painted and fully expanded, next
to the 24-layer transformer of render.py measured in the same run (this machine is shared: compare
ratios).

Prints, per front end: the longest main-thread task (PerformanceObserver 'longtask') while the LSTM's
run is painted, the time of Expand all on it with the longest task meanwhile, whether the layout worker
failed (the page's console says so), and Expand all on the transformer. Targets: Expand all on the
LSTM ≤ 2 s, no main-thread task over 200 ms while painting it. Usage:
    python benchmarks/deep_layout.py [--against REF]
The working tree is measured a second time with its layout worker made to fail (the page then lays
out in slices itself). With --against REF, the front end of git REF is measured too (its worker may
take minutes on the LSTM).
Needs Chromium at /usr/bin/chromium (or $GRADSTEP_CHROMIUM).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from models.catalog import lstm
from playwright.sync_api import sync_playwright
from render import (
    frontend_of,
    longest_task_during,
    longest_watched_task,
    run,
    serve_static_from,
    watch_long_tasks,
)
from testkit.browser_support import launch, running_server
from tracer_overhead import SNIPPET as TRANSFORMER

LSTM = lstm(100)


# a page whose layout worker cannot start: what the page does when its worker fails
NO_WORKER = "window.Worker = class { constructor() { throw new Error('no worker (benchmark)'); } };"


def measure(browser, base: str, frontend: Path | None, worker: bool = True) -> dict:
    page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
    if not worker:
        page.add_init_script(NO_WORKER)
    failures: list[str] = []
    page.on("console", lambda m: "layout worker failed" in m.text and failures.append(m.text))
    if frontend is not None:
        serve_static_from(page, base, frontend)
    page.goto(f"{base}/?snippet=shared_trunk_partial_grads")
    page.wait_for_function("Number(document.body.dataset.painted || 0) >= 1", timeout=60_000)
    watch_long_tasks(page)
    run(page, LSTM)
    paint_longest = longest_watched_task(page, 50)
    lstm = longest_task_during(page, "await window.gradstep.viewer.expandAll();")
    run(page, TRANSFORMER)
    gpt = longest_task_during(page, "await window.gradstep.viewer.expandAll();")
    page.context.close()
    return {"paint_longest": paint_longest, "lstm": lstm, "gpt": gpt, "failures": failures}


def report(name: str, r: dict) -> None:
    lstm, gpt = r["lstm"], r["gpt"]
    print(f"{name}:")
    print(
        f"  LSTM painted (modules collapsed): longest main-thread task {r['paint_longest']:.0f} ms (target ≤ 200 ms)"
    )
    print(
        f"  LSTM expand all ({lstm['nodes']} nodes drawn): {lstm['ms']:.0f} ms (target ≤ 2000 ms), "
        f"longest main-thread task {lstm['longest']:.0f} ms; worker failed: {'; '.join(r['failures']) or 'no'}"
    )
    print(
        f"  transformer expand all ({gpt['nodes']} nodes drawn): {gpt['ms']:.0f} ms, longest task {gpt['longest']:.0f} ms"
    )
    print(f"  LSTM / transformer expand-all time: {lstm['ms'] / gpt['ms']:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--against", metavar="REF", help="a git ref whose front end is measured too")
    args = ap.parse_args()
    with running_server() as base, sync_playwright() as p:
        browser = launch(p)
        report("working tree", measure(browser, base, None))
        report("working tree, its worker made to fail", measure(browser, base, None, worker=False))
        if args.against:
            with frontend_of(args.against) as folder:
                report(f"front end of {args.against}", measure(browser, base, folder))
        browser.close()


if __name__ == "__main__":
    main()
