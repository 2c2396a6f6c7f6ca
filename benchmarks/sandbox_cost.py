"""What a confined run costs: all layers, each layer left out, no layers, and a fresh interpreter.

    .venv/bin/python benchmarks/sandbox_cost.py [--runs 40] [--naive-runs 5]

Every configuration runs the same tiny snippet through the real target (the
tracer) in a sandbox with one worker, twice: with a pre-forked spare (the
default: fork and layers happen before the run) and forking per run
(``prefork=False``: fork and layers on the run's path). run() answers once the
result is read; the child's exit is not part of it. Printed: median
milliseconds per run, the part until the result arrived, the same forked per
run, and ratios against "all layers" (pre-forked) measured in this same
process run. The per-layer column is the child's own measurement of that
layer (median). "without root" is the layout before the minimal root: children
on the host's tree, read-only, with the project covered.
Needs root (cgroups, namespaces); the sandbox's cgroups go under the root of
each hierarchy (``--cgroup-parent``) and are removed at the end.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from gradstep.runs import payload_for, sandbox_config
from gradstep.sandbox import LAYERS, Sandbox
from gradstep.settings import Settings
from testkit.sandbox_guard import uid_base

SNIPPET = (
    "import torch\nx = torch.ones(3, requires_grad=True)\ny = (x * x).sum()\ny.backward()\nprint(x.grad)\n"
)
JOB = payload_for(SNIPPET)  # what the server hands its target


def measure(
    configs: dict[tuple[str, bool], frozenset[str]], runs: int, cgroup_parent: str
) -> dict[tuple[str, bool], dict]:
    """Run every configuration round-robin (so load drift hits all alike); medians per configuration.

    A configuration is (label, pre-forked) -> the layers it disables.
    """
    boxes = {
        (label, prefork): Sandbox(
            sandbox_config(  # the server's target and preloads
                Settings(),
                workers=1,
                cgroup_parent=cgroup_parent,
                disable=off,
                uid_base=uid_base(2000 + 10 * i),
                prefork=prefork,
            )
        )
        for i, ((label, prefork), off) in enumerate(configs.items())
    }
    samples: dict[str, dict[str, list[float]]] = {
        label: {"total": [], "to_result": [], **{n: [] for n in ("fork", *LAYERS)}} for label in configs
    }
    try:
        for sb in boxes.values():
            sb.start()
            for _ in range(3):  # warm the path (first forks, page cache)
                assert sb.run(JOB).status == "ok"
        for _ in range(runs):
            for label, sb in boxes.items():
                r = sb.run(JOB)
                assert r.status == "ok", r.detail
                got = samples[label]
                got["total"].append(r.seconds * 1e3)
                got["to_result"].append(r.seconds * 1e3 - r.timings.get("exit", 0.0))
                for name in ("fork", *LAYERS):
                    if name in r.timings:
                        got[name].append(r.timings[name])
        states = {label: sb.health()["layers"] for label, sb in boxes.items()}
    finally:
        for sb in boxes.values():
            sb.close()
    return {
        label: {
            "total": statistics.median(got["total"]),
            "to_result": statistics.median(got["to_result"]),
            "layers": {
                k: statistics.median(v) for k, v in got.items() if v and k not in ("total", "to_result")
            },
            "states": states[label],
        }
        for label, got in samples.items()
    }


def naive(runs: int) -> float:
    """A fresh ``python -c`` per run: import torch and the tracer, trace, print JSON."""
    code = (
        "import sys, orjson\nfrom gradstep.pipeline import explained\n"
        "sys.stdout.buffer.write(orjson.dumps(explained(sys.stdin.read())))\n"
    )
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", code], input=SNIPPET.encode(), capture_output=True, check=True
        )
        times.append((time.perf_counter() - t) * 1e3)
        assert out.stdout.startswith(b"{")
    return statistics.median(times)


def in_process(runs: int) -> float:
    import orjson
    from gradstep.pipeline import explained

    explained(SNIPPET)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        orjson.dumps(explained(SNIPPET))
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--naive-runs", type=int, default=5)
    ap.add_argument("--cgroup-parent", default="/")
    args = ap.parse_args()

    configs = {"all layers": frozenset()}
    for name in LAYERS:
        off = {name, "mounts"} if name == "namespaces" else {name}  # mounts need the namespace
        configs[f"without {'+'.join(sorted(off))}"] = frozenset(off)
    configs["no layers (bare fork)"] = frozenset(LAYERS)
    both = measure(
        {(label, prefork): off for label, off in configs.items() for prefork in (True, False)},
        args.runs,
        args.cgroup_parent,
    )
    results = {label: both[label, True] for label in configs}
    per_run = {label: both[label, False] for label in configs}
    all_layers = results["all layers"]
    inactive = [n for n, s in all_layers["states"].items() if s != "active"]
    if inactive:
        states = all_layers["states"]
        print("note: not active here: " + ", ".join(f"{n} ({states[n]})" for n in inactive))
    base = all_layers["total"]
    print(f"\nmedian of {args.runs} runs of a tiny snippet, one worker (ms; ratio = run / all layers)")
    print(
        f"{'configuration':34} {'run':>8} {'to result':>10} {'forked per run':>15} {'ratio':>7} {'layer (child)':>14}"
    )
    for (label, m), off in zip(results.items(), configs.values(), strict=True):
        layer = min(off, key=LAYERS.index) if len(off) < len(LAYERS) and off else ""
        own = f"{all_layers['layers'][layer]:.2f}" if layer in all_layers["layers"] else ""
        print(
            f"{label:34} {m['total']:8.1f} {m['to_result']:10.1f} {per_run[label]['total']:15.1f}"
            f" {m['total'] / base:7.2f} {own:>14}"
        )
    print(f"{'  of which fork (zygote -> child)':34} {all_layers['layers']['fork']:8.1f}")
    inproc = in_process(args.runs)
    print(f"{'in-process record() (no sandbox)':34} {inproc:8.1f} {'':>10} {inproc / base:7.2f}")
    slow = naive(args.naive_runs)
    print(f"{'python -c per run (imports torch)':34} {slow:8.1f} {'':>10} {slow / base:7.2f}")
    print(f"\na confined run is {slow / base:.0f}x cheaper than a fresh interpreter per run")


if __name__ == "__main__":
    main()
