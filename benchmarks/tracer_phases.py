"""Where the tracer's overhead goes, measured inside traced runs of the 24-layer model.

tracer_overhead.py says how much slower a traced run is; this says which of the tracer's
passes the difference is made of, timed where they run (cold caches and all, which is
what matters: the same pass timed alone on a warm graph is often half as slow). Prints,
per run, plain and traced wall time, then each pass's median milliseconds and its share
of the overhead, the garbage collector's time (gc.callbacks) and the time freeing the
snippet's objects at the end, both less what plain runs spend on them, and
what no timer covers (the wrappers around module calls and backward calls, the line
markers, memory effects on the snippet's own work).

--ablate also times traced runs with one part of the recording left out, as upper bounds
of what making that part cheaper could save (those traces are incomplete; never ship one):
    python benchmarks/tracer_phases.py [--repeat N] [--ablate]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import time
import types
from collections import defaultdict
from collections.abc import Callable
from unittest import mock

from gradstep.tracer import engine, grads, graph, passes, recorder
from tracer_overhead import SNIPPET, pin, recording, warm_up

# The C reader's entry points (tracer/_nodes.c); the Python parts are patched in Phases.__enter__.
NATIVE = passes.ALL


class Phases:
    """Timers around the tracer's passes, summed per run."""

    def __init__(self) -> None:
        self.run: dict[str, float] = defaultdict(float)
        self.gc_started = 0.0
        self.patches = contextlib.ExitStack()

    def timed(self, name: str, fn: Callable) -> Callable:
        run, clock = self.run, time.perf_counter

        def wrapper(*args, **kwargs):
            t = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                run[name] += clock() - t

        return wrapper

    def patch(self, owner: object, attr: str, name: str) -> None:
        self.patches.enter_context(mock.patch.object(owner, attr, self.timed(name, getattr(owner, attr))))

    def on_gc(self, phase: str, _info: dict) -> None:
        if phase == "start":
            self.gc_started = time.perf_counter()
        else:
            self.run["gc"] += time.perf_counter() - self.gc_started

    def __enter__(self) -> Phases:
        if graph._nodes is not None:  # passes.chosen reads graph._nodes: a timed stand-in
            public = [k for k in dir(graph._nodes) if not k.startswith("__")]
            native = types.SimpleNamespace(**{k: getattr(graph._nodes, k) for k in public})
            for name in NATIVE:
                setattr(native, name, self.timed(name, getattr(graph._nodes, name)))
            self.patches.enter_context(mock.patch.object(graph, "_nodes", native))
        self.patch(grads.GradRecords, "records", "grad records")
        self.patch(recorder, "scan", "name scan")
        self.patch(engine, "_exec_order", "engine order")
        self.patch(recorder.Recorder, "_let_go", "let go")
        gc.callbacks.append(self.on_gc)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self.on_gc)
        self.patches.close()

    def take(self) -> dict[str, float]:
        done, self.run = dict(self.run), defaultdict(float)
        return done


def plain_freeing(code: str, run: dict[str, float]) -> None:
    """tracer_overhead.plain, timing apart the end, where the snippet's objects are freed (the
    traced run's "let go" does the same work, so only the difference is overhead)."""
    namespace = {"__name__": "__main__"}
    exec(compile(code, "<snippet>", "exec"), namespace)
    t = time.perf_counter()
    namespace.clear()
    run["let go"] += time.perf_counter() - t


def _no_grad_records(self, tensors):
    return [None] * len(tensors)


def _no_stale_check(self, *args, **kwargs):
    return None


ABLATIONS: dict[str, list[tuple[object, str, object]]] = {
    "without gradient records": [(grads.GradRecords, "records", _no_grad_records)],
    "without the in-place (stale) check": [(graph.Graph, "check_stale", _no_stale_check)],
}


def ablated(patches: list[tuple[object, str, object]]) -> Callable[[str], None]:
    def run(code: str) -> None:
        with contextlib.ExitStack() as stack:
            for owner, attr, fn in patches:
                stack.enter_context(mock.patch.object(owner, attr, fn))
            recording(code)

    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=25)
    ap.add_argument("--ablate", action="store_true", help="also time runs without one part each")
    ap.add_argument(
        "--cpu", type=int, default=None, help="CPU to pin to (default: the last allowed; -1: no pin)"
    )
    args = ap.parse_args()
    pin(args.cpu)
    warm_up()
    phases = Phases()
    plain_gc = Phases()
    walls: dict[str, list[float]] = defaultdict(list)
    per_run: list[dict[str, float]] = []
    plain_runs: list[dict[str, float]] = []
    extra = {name: ablated(p) for name, p in ABLATIONS.items()} if args.ablate else {}
    for _ in range(args.repeat):  # interleaved, so machine noise hits all alike
        gc.callbacks.append(plain_gc.on_gc)
        t = time.perf_counter()
        plain_freeing(SNIPPET, plain_gc.run)
        walls["plain"].append(time.perf_counter() - t)
        gc.callbacks.remove(plain_gc.on_gc)
        plain_runs.append(plain_gc.take())
        with phases:
            t = time.perf_counter()
            recording(SNIPPET)
            walls["traced"].append(time.perf_counter() - t)
        per_run.append(phases.take())
        for name, fn in extra.items():
            t = time.perf_counter()
            fn(SNIPPET)
            walls[name].append(time.perf_counter() - t)

    med = {k: statistics.median(v) * 1e3 for k, v in walls.items()}
    overhead = med["traced"] - med["plain"]
    print(
        f"plain {med['plain']:.1f} ms  traced {med['traced']:.1f} ms ({med['traced'] / med['plain']:.2f}x)  "
        f"overhead {overhead:.1f} ms  (traced with timers: each adds well under a microsecond per call)"
    )
    keys = sorted(
        {k for r in per_run for k in r}, key=lambda k: -statistics.median(r.get(k, 0) for r in per_run)
    )
    covered = 0.0
    for k in keys:
        ms = statistics.median(r.get(k, 0.0) for r in per_run) * 1e3
        if k in ("gc", "let go"):  # plain runs do some of this too: only the difference is overhead
            base = statistics.median(r.get(k, 0.0) for r in plain_runs) * 1e3
            share = 100 * (ms - base) / overhead
            print(f"  {k:28s} {ms:6.2f} ms  less plain's {base:.2f} ms: {share:5.1f}% of the overhead")
            covered += ms - base
            continue
        covered += ms
        print(f"  {k:28s} {ms:6.2f} ms  {100 * ms / overhead:5.1f}% of the overhead")
    print(
        f"  {'no timer (wrappers, memory)':28s} {overhead - covered:6.2f} ms  {100 * (overhead - covered) / overhead:5.1f}%"
    )
    for name in extra:
        print(
            f"{name}: {med[name]:.1f} ms ({med[name] / med['plain']:.2f}x plain), "
            f"{med['traced'] - med[name]:.1f} ms less than the full recording"
        )


if __name__ == "__main__":
    main()
