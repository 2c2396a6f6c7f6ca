"""Longest main-thread task per real model (benchmarks/models/catalog.py) while the page paints it and
while it is stepped, in real Chromium at 1400×900.

    PYTHONPATH=server .venv/bin/python benchmarks/long_tasks.py [--against REF] [--profile] [--models gpt6,resnet18]

For each model: the longest task (PerformanceObserver 'longtask') from Run to painted (the trace from
the server's cache after a first run, so the page's own work is what is measured), while End jumps to
the last step, and while → steps forward through up to 12 steps (each press after the previous paint):
its wall time, and its main-thread CPU time (a Chromium trace's thread time: what a loaded machine
adds by descheduling the page is left out).
With --against REF, the front end of git REF is measured too, in turns on the same machine: compare
the ratios, this machine may be shared. With --profile, a CDP CPU profile of those actions prints the
front end's functions with the most self time. With --switch LAYERS, a step switch (real_models.py's
figure) on a GPT of LAYERS layers, for each front end. Target: no task over 200 ms.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
from collections import Counter

from models.catalog import gpt, lstm, resnet18, training_loop
from playwright.sync_api import sync_playwright
from real_models import switch_times
from render import frontend_of, longest_watched_task, run, serve_static_from, watch_long_tasks
from testkit.browser_support import launch, running_server
from testkit.sandbox_guard import uid_base

MODELS = {
    "gpt6": lambda: gpt(6),
    "resnet18": resnet18,
    "gpt12": lambda: gpt(12),
    "gpt48": lambda: gpt(48),
    "lstm100": lambda: lstm(100),
    "loop20": lambda: training_loop(20),
}

PAINTED = "Number(document.body.dataset.painted || 0)"


def press(page, key: str) -> None:
    """A key on the graph's page, then the next painted frame and a pause for deferred work."""
    n = page.evaluate(PAINTED)
    page.evaluate("document.querySelector('svg.gs-graph-svg').focus()")
    page.keyboard.press(key)
    with contextlib.suppress(Exception):
        page.wait_for_function(f"{PAINTED} > {n}", timeout=5_000)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => setTimeout(r, 150)))")


def measure(page, code: str, cdp=None, profile: Counter | None = None) -> dict[str, tuple[float, float]]:
    """Per phase: (longest task's wall time, longest task's main-thread CPU time) in ms."""
    out = {}
    browser = page.context.browser
    run(page, "x = 1\n")  # leave the model, so the next run paints it afresh
    for name, action in (
        ("paint", lambda: run(page, code)),
        ("end", lambda: (page.evaluate("window.gradstep.viewer.setStep(0)"), press(page, "End"))),
        (
            "step",
            lambda: (
                page.evaluate("window.gradstep.viewer.setStep(0)"),
                [press(page, "ArrowRight") for _ in range(12)],
            ),
        ),
    ):
        if name == "end":
            page.evaluate("window.gradstep.viewer.setStep(0)")
        browser.start_tracing(
            page=page, categories=["devtools.timeline", "disabled-by-default-devtools.timeline"]
        )
        page.evaluate("() => new Promise(r => setTimeout(r, 200))")  # past the task that started tracing
        page.evaluate("console.timeStamp('gs-measure')")
        if cdp is not None:
            cdp.send("Profiler.start")
        watch_long_tasks(page)
        action()
        wall = longest_watched_task(page, 300)
        if cdp is not None and profile is not None:
            add_self_times(cdp.send("Profiler.stop")["profile"], profile, name)
        out[name] = (wall, longest_cpu(json.loads(browser.stop_tracing())))
    return out


def longest_cpu(trace: dict | list) -> float:
    """The most thread time (ms) a task of the page's main thread took after the 'gs-measure' mark:
    what the page's own work costs, less what a loaded machine adds by descheduling it."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    mark = next(
        e for e in events if e.get("name") == "TimeStamp" and "gs-measure" in json.dumps(e.get("args"))
    )
    main = {
        (e["pid"], e["tid"])
        for e in events
        if e.get("name") == "thread_name"
        and e["args"].get("name") == "CrRendererMain"
        and e["pid"] == mark["pid"]
    }
    return max(
        (
            e.get("tdur", 0) / 1000
            for e in events
            if e.get("name") == "RunTask" and (e.get("pid"), e.get("tid")) in main and e["ts"] > mark["ts"]
        ),
        default=0.0,
    )


def add_self_times(prof: dict, into: Counter, phase: str) -> None:
    """Self time (ms) per function of the front end (and the browser's own parts, by name)."""
    nodes = {n["id"]: n for n in prof["nodes"]}
    dt = prof["timeDeltas"]
    for sid, d in zip(prof["samples"], dt, strict=False):
        f = nodes[sid]["callFrame"]
        url = f["url"].rsplit("/", 1)[-1]
        name = f["functionName"] or "(anonymous)"
        if name in ("(idle)", "(program)"):
            continue
        into[
            (
                phase,
                f"{name} {url}:{f['lineNumber'] + 1}:{f['columnNumber'] + 1}"
                if url
                else f"{name} #{f['scriptId']}",
            )
        ] += d / 1000


def open_page(browser, base: str, frontend=None):
    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    if frontend is not None:
        serve_static_from(page, base, frontend)
    page.goto(f"{base}/?snippet=shared_trunk_partial_grads")
    page.wait_for_function(f"{PAINTED} >= 1", timeout=60_000)
    return page


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", metavar="REF", help="a git ref whose front end is measured too, in turns")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument(
        "--switch",
        type=int,
        default=0,
        metavar="LAYERS",
        help="also a step switch's median on a GPT of LAYERS layers",
    )
    ap.add_argument("--profile", action="store_true", help="print the functions with the most self time")
    args = ap.parse_args()
    with (
        running_server(
            GRADSTEP_UID_BASE=str(uid_base(2490)),
            GRADSTEP_WORKERS="1",
            GRADSTEP_CPU_SECONDS="120",
            GRADSTEP_WALL_SECONDS="180",
            GRADSTEP_MEMORY_MB="2048",
        ) as base,
        sync_playwright() as p,
        contextlib.ExitStack() as stack,
    ):
        browser = launch(p)
        pages = {"now": open_page(browser, base)}
        if args.against:
            pages["base"] = open_page(browser, base, stack.enter_context(frontend_of(args.against)))
        cdp = pages["now"].context.new_cdp_session(pages["now"]) if args.profile else None
        if cdp is not None:
            cdp.send("Profiler.enable")
            cdp.send("Profiler.setSamplingInterval", {"interval": 500})
        profile: Counter = Counter()
        for key in args.models.split(","):
            code = MODELS[key]()
            run(pages["now"], code)  # the server's run, cached for what follows
            nodes = pages["now"].evaluate("window.gradstep.viewer.model.nodes.length")
            got: dict[str, dict[str, list[float]]] = {k: {} for k in pages}
            for r in range(args.repeat):
                for name in list(pages) if r % 2 == 0 else list(reversed(pages)):
                    prof = profile if name == "now" else None
                    for phase, ms in measure(
                        pages[name], code, cdp if prof is not None else None, prof
                    ).items():
                        got[name].setdefault(phase, []).append(ms)
            line = f"{key} ({nodes} nodes), longest task, wall / main-thread CPU, median of {args.repeat}:"
            for phase in ("paint", "end", "step"):
                wall = statistics.median(w for w, _ in got["now"][phase])
                cpu = statistics.median(c for _, c in got["now"][phase])
                line += f"\n    {phase:<5} {wall:5.0f} / {cpu:4.0f} ms"
                if "base" in got:
                    bwall = statistics.median(w for w, _ in got["base"][phase])
                    bcpu = statistics.median(c for _, c in got["base"][phase])
                    line += f"   baseline {bwall:5.0f} / {bcpu:4.0f} ms; CPU ratio {cpu / bcpu if bcpu else float('nan'):.2f}"
            print(line, flush=True)
            if args.profile:
                for phase in ("paint", "end", "step"):
                    top = sorted(((ms, f) for (ph, f), ms in profile.items() if ph == phase), reverse=True)[
                        :14
                    ]
                    print(f"  {phase}: " + "; ".join(f"{f} {ms:.0f}" for ms, f in top))
                profile.clear()
        if args.switch:
            code = gpt(args.switch)
            run(pages["now"], code)
            nodes = pages["now"].evaluate("window.gradstep.viewer.model.nodes.length")
            times: dict[str, list[float]] = {k: [] for k in pages}
            for r in range(args.repeat):
                for name in list(pages) if r % 2 == 0 else list(reversed(pages)):
                    run(pages[name], code)
                    times[name] += switch_times(pages[name])
            line = f"{args.switch}-layer GPT ({nodes} nodes): step switch median {statistics.median(times['now']):.1f} ms"
            if "base" in times:
                was = statistics.median(times["base"])
                line += f", baseline {was:.1f} ms; ratio {statistics.median(times['now']) / was:.2f}"
            print(line + " (target ≤ 50 ms)", flush=True)
        browser.close()


if __name__ == "__main__":
    main()
