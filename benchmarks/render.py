"""Front-end rendering in real Chromium: Run click → graph painted, module expansion,
full expansion (layout in the worker), and step transitions.

Starts the real server on a free loopback port and drives the page with
Playwright. Targets (issue 6): the 24-layer transformer (≈1800 nodes) painted
≤ 300 ms after its trace arrives, modules collapsed; expanding one module
≤ 100 ms; the fully expanded graph laid out off the main thread, progress
shown, ≤ 2 s; step transitions at 60 fps. Prints medians. Usage:
    python benchmarks/render.py [--repeat N]
    python benchmarks/render.py --steps-only --against HEAD~1 [--repeat N]
With --against REF, the front end of git REF (its frontend/ folder, served to a second page in its
own browser context) is measured too, interleaved with the working tree's, and each step figure is
printed with its ratio to the baseline's (this machine is shared: a ratio from the same run is what
to compare). --steps-only measures the step transitions alone: the seed snippet, then the 24-layer
transformer with modules collapsed and fully expanded.
Needs Chromium at /usr/bin/chromium (or $GRADSTEP_CHROMIUM).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

from playwright.sync_api import sync_playwright

# Chromium, its flags and the server start-up are shared with the browser tests
from testkit.browser_support import launch, running_server
from tracer_overhead import SNIPPET as TRANSFORMER  # noqa: E402  (benchmarks/ is on sys.path)


def run(page, code: str) -> dict:
    """Type-free run: set the editor's code, click Run, wait for the paint."""
    n = int(page.evaluate("document.body.dataset.runs || 0"))
    page.evaluate("c => window.gradstep.editor.setCode(c)", code)
    page.click("#gs-run")
    page.wait_for_function(f"Number(document.body.dataset.painted || 0) > {n}", timeout=120_000)
    return page.evaluate("window.gradstepTiming")


def frame_stats(page, action_js: str, ms: int) -> dict:
    """Run an action, count animation frames for `ms`, return fps and the longest frame.
    The action is pasted into the evaluated source: the page's CSP (no 'unsafe-eval') refuses new Function."""
    return page.evaluate(
        """async (ms) => {
          const times = [];
          let stop = false;
          const tick = (t) => { times.push(t); if (!stop) requestAnimationFrame(tick); };
          requestAnimationFrame(tick);
          await new Promise(r => setTimeout(r, 50));
          const t0 = performance.now();
          await (async () => { ACTION })();
          await new Promise(r => setTimeout(r, Math.max(0, ms - (performance.now() - t0))));
          stop = true;
          const span = times.filter(t => t >= t0);
          const gaps = span.slice(1).map((t, i) => t - span[i]);
          return { fps: gaps.length / ((span[span.length - 1] - span[0]) / 1000), worst: Math.max(...gaps, 0), frames: gaps.length };
        }""".replace("ACTION", action_js),
        ms,
    )


def step_times(page, count: int) -> dict[str, list[float]]:
    """Per forward step, with animations on:
    - `frame`: the step's own work — viewer.next() called at the start of a frame, until that frame's
      style, layout and paint are done (a task queued from requestAnimationFrame runs after them).
      ≤ 16.7 ms means the step is on screen in the very next frame.
    - `next`: viewer.next() called from a task, to the end of the next painted frame: as `frame`, plus
      the wait for the frame to start (0–16.7 ms).
    - `graph`: the graph view's script (graph.js showStep) within those steps.
    """
    return page.evaluate(
        """async (count) => {
          const v = window.gradstep.viewer;
          const settle = () => new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
          const out = { frame: [], next: [], graph: [] };
          // the graph view's own script per step (graph.js), apart from the rest of the page
          const g = v.graphView;
          const showStep = g.showStep;
          g.showStep = (...a) => { const t0 = performance.now(); showStep(...a); out.graph.push(performance.now() - t0); };
          for (let k = 0; k < count; k++) {
            const n = v.model.steps.length;
            v.setStep(0);
            await settle();
            for (let i = 1; i < n; i++) {
              await new Promise(r => requestAnimationFrame(() => {
                const t0 = performance.now();
                v.next();
                setTimeout(() => { out.frame.push(performance.now() - t0); r(); }, 0);
              }));
            }
            v.setStep(0);
            await settle();
            for (let i = 1; i < n; i++) {
              const t0 = performance.now();
              v.next();
              await settle();
              out.next.push(performance.now() - t0);
            }
          }
          g.showStep = showStep;
          return out;
        }""",
        count,
    )


def step_cpu(browser, page, count: int) -> list[float]:
    """Main-thread CPU time of each forward step (thread time of the tasks from the frame that applies
    it until its marks end, from a Chromium trace): what a step costs, less disturbed than wall time
    by other processes on a busy machine."""
    browser.start_tracing(page=page, categories=["toplevel", "blink.user_timing"])
    page.evaluate(
        """async (count) => {
          const v = window.gradstep.viewer;
          const settle = () => new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
          let j = 0;
          for (let k = 0; k < count; k++) {
            v.setStep(0);
            await settle();
            for (let i = 1; i < v.model.steps.length; i++, j++) {
              await new Promise(r => requestAnimationFrame(() => {
                performance.mark(`gs-step-${j}-start`);
                v.next();
                setTimeout(() => { performance.mark(`gs-step-${j}-end`); r(); }, 0);
              }));
            }
          }
        }""",
        count,
    )
    events = json.loads(browser.stop_tracing())["traceEvents"]
    marks = {e["name"]: e for e in events if e.get("name", "").startswith("gs-step-")}
    out = []
    for j in range(len(marks) // 2):
        start, end = marks[f"gs-step-{j}-start"], marks[f"gs-step-{j}-end"]
        # the rAF callback runs inside a task that started before the mark: tasks overlapping the window
        cpu = sum(
            e.get("tdur", 0)
            for e in events
            if e.get("ph") == "X"
            and e.get("pid") == start["pid"]
            and e.get("tid") == start["tid"]
            and "toplevel" in e.get("cat", "")
            and e["ts"] <= end["ts"]
            and e["ts"] + e.get("dur", 0) >= start["ts"]
        )
        out.append(cpu / 1000)
    return out


def step_line(label: str, steps: dict[str, list[float]], cpu: list[float]) -> str:
    return (
        f"  {label}: main-thread CPU per step median {med(cpu):.1f} ms, max {max(cpu):.1f} ms; "
        f"step frame (script+style+layout+paint) median {med(steps['frame']):.1f} ms, "
        f"max {max(steps['frame']):.1f} ms (target ≤ 16.7 ms); "
        f"next → painted frame median {med(steps['next']):.1f} ms; graph view script median "
        f"{med(steps['graph']):.2f} ms"
    )


def watch_long_tasks(page) -> None:
    """Collect the page's long tasks (PerformanceObserver 'longtask') from now on, for
    ``longest_watched_task``; a watch already running is replaced."""
    page.evaluate(
        """() => {
          window.__longtasks = [];
          window.__taskObserver?.disconnect();
          window.__taskObserver = new PerformanceObserver((l) => window.__longtasks.push(...l.getEntries().map(e => e.duration)));
          window.__taskObserver.observe({ entryTypes: ['longtask'] });
        }"""
    )


def longest_watched_task(page, settle_ms: int) -> float:
    """The longest task since ``watch_long_tasks`` (ms, 0 when none), read after the next frame and
    ``settle_ms`` more (for the work a paint defers); the watch then stops."""
    return page.evaluate(
        """async (settle) => {
          await new Promise(r => requestAnimationFrame(() => setTimeout(r, settle)));
          window.__taskObserver.disconnect();
          return Math.max(0, ...window.__longtasks);
        }""",
        settle_ms,
    )


def longest_task_during(page, action_js: str) -> dict:
    """Longest main-thread task (PerformanceObserver longtask) while an async action runs (pasted into
    the evaluated source, as in frame_stats)."""
    return page.evaluate(
        """async () => {
          const tasks = [];
          const obs = new PerformanceObserver((l) => tasks.push(...l.getEntries().map(e => e.duration)));
          obs.observe({ entryTypes: ['longtask'] });
          let progressSeen = false;
          const el = document.querySelector('.gs-layout-progress');
          const mo = new MutationObserver(() => { if (!el.hidden && el.textContent) progressSeen = true; });
          mo.observe(el, { attributes: true, childList: true, characterData: true, subtree: true });
          const t0 = performance.now();
          await (async () => { ACTION })();
          await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
          const ms = performance.now() - t0;
          await new Promise(r => setTimeout(r, 50));
          obs.disconnect(); mo.disconnect();
          return { ms, longest: Math.max(0, ...tasks), progressSeen, nodes: document.querySelectorAll('[data-node-id]').length };
        }""".replace("ACTION", action_js),
    )


def med(xs):
    return statistics.median(xs) if xs else float("nan")


ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def frontend_of(ref: str) -> Iterator[Path]:
    """The frontend/ folder of git `ref`, extracted to a temporary folder."""
    tar = subprocess.run(
        ["git", "archive", ref, "frontend"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    with tempfile.TemporaryDirectory(prefix="gradstep-frontend-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(tar)) as t:
            t.extractall(tmp, filter="data")
        yield Path(tmp) / "frontend"


def serve_static_from(page, base: str, folder: Path) -> None:
    """The page gets /static/* from `folder` instead of the server (same server, other front end)."""

    def handle(route):
        f = folder / urlparse(route.request.url).path.removeprefix("/static/")
        if f.is_file():
            route.fulfill(path=str(f))
        else:
            route.continue_()

    page.route(f"{base}/static/**", handle)


def open_app(browser, base: str, frontend: Path | None = None):
    page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
    if frontend is not None:
        serve_static_from(page, base, frontend)
    page.goto(f"{base}/?snippet=shared_trunk_partial_grads")
    page.wait_for_function("Number(document.body.dataset.painted || 0) >= 1", timeout=60_000)
    return page


def expand_all(page) -> int:
    r = longest_task_during(page, "await window.gradstep.viewer.expandAll();")
    return r["nodes"]


def measure_steps(browser, page) -> dict[str, list[float]]:
    """One round of every step figure: frame / next / graph (step_times), cpu (step_cpu), fps (Play)."""
    out = step_times(page, 1)
    out["cpu"] = step_cpu(browser, page, 1)
    fr = frame_stats(page, "window.gradstep.viewer.setStep(0); window.gradstep.viewer.play();", 3000)
    page.evaluate("window.gradstep.viewer.stop()")
    out["fps"] = [fr["fps"]]
    out["worst"] = [fr["worst"]]
    return out


def ab_line(name: str, xs: list[float], base: list[float] | None, unit: str = "ms") -> str:
    line = f"    {name:<34} median {med(xs):6.1f} {unit}, max {max(xs):6.1f} {unit}"
    if base:
        line += f"  | baseline median {med(base):6.1f}, max {max(base):6.1f}; ratio of medians {med(xs) / med(base):.2f}"
    return line


def steps_ab(browser, base: str, repeat: int, against: str | None) -> None:
    """Step transitions on the seed snippet, then on the transformer with modules collapsed and fully
    expanded: the working tree's front end and (with `against`) a baseline's, measured in turns so
    machine noise hits both alike."""
    with contextlib.ExitStack() as stack:
        pages = {"now": open_app(browser, base)}
        if against:
            pages["base"] = open_app(browser, base, stack.enter_context(frontend_of(against)))
        for config in ("seed snippet", "24-layer transformer, modules collapsed", "24-layer transformer"):
            if config.endswith("collapsed"):
                for page in pages.values():
                    run(page, TRANSFORMER)
            elif config == "24-layer transformer":
                drawn = {k: expand_all(p) for k, p in pages.items()}
                config += f", fully expanded ({drawn['now']} nodes drawn)"
            got: dict[str, dict[str, list[float]]] = {k: {} for k in pages}
            for k in range(repeat):
                order = list(pages) if k % 2 == 0 else list(reversed(pages))
                for name in order:
                    for key, xs in measure_steps(browser, pages[name]).items():
                        got[name].setdefault(key, []).extend(xs)
            now, was = got["now"], got.get("base")
            nodes = pages["now"].evaluate("window.gradstep.viewer.model.nodes.length")
            print(
                f"\n{config}: {nodes} nodes, {len(now['cpu'])} steps measured per front end"
                + (f" (baseline: {against})" if against else "")
            )
            print(ab_line("main-thread CPU per step", now["cpu"], was and was["cpu"]))
            print(ab_line("step frame (target ≤ 16.7 ms)", now["frame"], was and was["frame"]))
            print(ab_line("next → painted frame", now["next"], was and was["next"]))
            print(ab_line("graph view script", now["graph"], was and was["graph"]))
            print(ab_line("playing", now["fps"], was and was["fps"], unit="fps"))
            print(ab_line("playing: longest frame", now["worst"], was and was["worst"]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--against", metavar="REF", help="a git ref whose front end is measured too, in turns")
    ap.add_argument("--steps-only", action="store_true", help="only the step transitions")
    args = ap.parse_args()
    with running_server() as base:
        with sync_playwright() as p:
            browser = launch(p)
            if args.steps_only or args.against:
                print(f"render benchmark, Chromium headless: step transitions, {args.repeat} rounds each")
                steps_ab(browser, base, args.repeat, args.against)
                if args.steps_only:
                    browser.close()
                    return
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(f"{base}/?snippet=shared_trunk_partial_grads")
            page.wait_for_function("Number(document.body.dataset.painted || 0) >= 1", timeout=60_000)
            seed = page.evaluate("window.gradstep.editor.getCode()")

            print(f"render benchmark, Chromium headless, {args.repeat} runs each (median)")
            for label, code in (
                ("seed snippet (shared_trunk_partial_grads)", seed),
                ("24-layer transformer", TRANSFORMER),
            ):
                cold, warm = [], []
                for k in range(args.repeat):
                    # a changed comment misses the server's cache: a real sandboxed run
                    cold.append(run(page, f"{code}\n# run {k} {time.time()}\n"))
                    warm.append(run(page, code))
                nodes = cold[0]["nodes"]
                print(f"\n{label}: {nodes} nodes")
                print(
                    f"  Run click → graph painted: {med([c['clickToPaint'] for c in cold]):7.1f} ms  "
                    f"(server run {med([c['request'] for c in cold]):.1f} ms)"
                )
                print(
                    f"  cached trace: click → painted {med([w['clickToPaint'] for w in warm]):7.1f} ms; "
                    f"trace arrived → painted {med([w['painted'] for w in warm + cold]):6.1f} ms"
                    + ("  (target ≤ 300 ms, modules collapsed)" if nodes > 1000 else "")
                )
                steps = step_times(page, max(2, args.repeat))
                print(step_line("step transition", steps, step_cpu(browser, page, max(2, args.repeat))))
                fr = frame_stats(
                    page, "window.gradstep.viewer.setStep(0); window.gradstep.viewer.play();", 3000
                )
                page.evaluate("window.gradstep.viewer.stop()")
                print(
                    f"  playing (animated): {fr['fps']:.0f} fps over {fr['frames']} frames, longest frame {fr['worst']:.1f} ms (target 60 fps)"
                )

            # module expansion on the transformer (still loaded)
            groups = page.eval_on_selector_all(
                "g.gs-group[data-group]", "els => els.map(e => e.dataset.group)"
            )
            one = []
            for g in groups[: args.repeat]:
                r = longest_task_during(page, f"await window.gradstep.viewer.expand({g!r});")
                one.append(r["ms"])
                page.evaluate("window.gradstep.viewer.collapseAll()")
                page.wait_for_timeout(100)
            print(
                f"\nexpand one module (of {len(groups)} collapsed): median {med(one):.1f} ms, max {max(one):.1f} ms  (target ≤ 100 ms)"
            )
            full = []
            for _ in range(max(1, args.repeat // 2)):
                r = longest_task_during(page, "await window.gradstep.viewer.expandAll();")
                full.append(r)
                page.evaluate("window.gradstep.viewer.collapseAll()")
                page.wait_for_timeout(300)
                # a fresh worker cache: the next expansion lays out again
                run(page, f"{TRANSFORMER}\n# again {time.time()}\n")
            print(
                f"expand all ({full[0]['nodes']} nodes drawn): median {med([f['ms'] for f in full]):.0f} ms "
                f"(target ≤ 2000 ms); longest main-thread task {med([f['longest'] for f in full]):.0f} ms; "
                f"progress shown: {all(f['progressSeen'] for f in full)}"
            )
            r = longest_task_during(page, "await window.gradstep.viewer.expandAll();")
            steps = step_times(page, max(2, args.repeat))
            cpu = step_cpu(browser, page, max(2, args.repeat))
            fr = frame_stats(page, "window.gradstep.viewer.setStep(0); window.gradstep.viewer.play();", 3000)
            page.evaluate("window.gradstep.viewer.stop()")
            print(f"fully expanded ({r['nodes']} nodes drawn):")
            print(step_line("step transition", steps, cpu))
            print(f"  playing {fr['fps']:.0f} fps, longest frame {fr['worst']:.1f} ms")
            browser.close()


if __name__ == "__main__":
    main()
