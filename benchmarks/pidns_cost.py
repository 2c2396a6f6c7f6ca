"""What the child's own PID namespace (the "pidns" layer) costs a run, against the same sandbox without it.

    .venv/bin/python benchmarks/pidns_cost.py [--runs 40]

Two sandboxes with the server's target and preloads, one slot each (one worker, no extra
slot), alike but for ``disable={"pidns"}``, run the same tiny snippet round-robin (so load
drift hits both alike), in three ways:

* spaced: 50 ms between runs, so a prewarmed spare is always ready (what a user sees; the
  namespace is made before the code exists);
* back to back: the next run waits for the last child's exit and its slot's next spare, so
  the whole cycle (fork into the namespace, layers, prewarm, exit and the namespace's end)
  is on the run's path;
* forked per run (``prefork=False``): the fork and every layer on the run's path.

Printed: p50 and p90 of run() in ms per configuration, and the ratio of the pidns sandbox to
the one without, measured in this same process run; then the child's own medians for the
fork, the pidns check and the mounts layer (which mounts the namespace's /proc); then the
kernel's part alone, in a small process (``--bare``: no torch): fork + exit + wait of a child
that does nothing, plain and into a new PID namespace (unshare before, setns after, as the
zygote), alternating.
Needs root (cgroups, namespaces); everything lives in a guard cgroup removed at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from gradstep.sandbox.libc import check, libc

CLONE_NEWPID = 0x20000000
SNIPPET = (
    "import torch\nx = torch.ones(3, requires_grad=True)\ny = (x * x).sum()\ny.backward()\nprint(x.grad)\n"
)
WAYS = ("spaced", "back to back", "forked per run")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bare_forks(runs: int) -> tuple[float, float]:
    """Median ms of fork + _exit + waitpid here: plain, and into a new PID namespace each time."""
    own = os.pidfd_open(os.getpid())
    times: dict[bool, list[float]] = {False: [], True: []}
    try:
        for i in range(2 * runs):
            new_pid_ns = bool(i % 2)
            t = time.perf_counter()
            if new_pid_ns:
                check(libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            if new_pid_ns:
                check(libc.setns(own, CLONE_NEWPID), "setns")
            os.waitpid(pid, 0)
            times[new_pid_ns].append((time.perf_counter() - t) * 1e3)
    finally:
        os.close(own)
    return statistics.median(times[False]), statistics.median(times[True])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--bare", action="store_true", help="only the kernel's part, in this small process")
    args = ap.parse_args()
    runs = max(200, args.runs * 5)
    if args.bare:
        print(*bare_forks(runs))
        return

    from gradstep.runs import payload_for, sandbox_config
    from gradstep.sandbox import Sandbox
    from gradstep.settings import Settings
    from testkit.sandbox_guard import Guard, settle, uid_base

    job = payload_for(SNIPPET)  # what the server hands its target

    guard = Guard(memory_mb=8192, pids=400)
    boxes: dict[tuple[str, bool], Sandbox] = {}
    try:
        for i, (label, off) in enumerate((("pidns", frozenset()), ("without pidns", frozenset({"pidns"})))):
            for j, prefork in enumerate((True, False)):
                boxes[label, prefork] = Sandbox(
                    sandbox_config(
                        Settings(),
                        workers=1,
                        extra_slots=0,
                        prefork=prefork,
                        disable=off,
                        cgroup_parent=guard.parent,
                        uid_base=uid_base(2450 + 10 * i + 5 * j),
                    )
                )
        for (label, _), sb in boxes.items():
            sb.start()
            state = sb.health()["layers"]["pidns"]
            assert state == ("active" if label == "pidns" else "disabled"), state
            for _ in range(3):  # warm the path (first forks, page cache)
                assert sb.run(job).status == "ok"
        samples = {(label, way): [] for label in ("pidns", "without pidns") for way in WAYS}
        layers: dict[str, dict[str, list[float]]] = {"pidns": {}, "without pidns": {}}
        for _ in range(args.runs):
            for label in ("pidns", "without pidns"):
                ready, per_run = boxes[label, True], boxes[label, False]
                settle(ready)
                time.sleep(0.05)
                r = ready.run(job)
                assert r.status == "ok", r.detail
                samples[label, "spaced"].append(r.seconds * 1e3)
                for name in ("fork", "pidns", "mounts"):
                    if name in r.timings:
                        layers[label].setdefault(name, []).append(r.timings[name])
                r = ready.run(job)  # right after the last one: its slot's spare is not there yet
                assert r.status == "ok", r.detail
                samples[label, "back to back"].append(r.seconds * 1e3)
                r = per_run.run(job)
                assert r.status == "ok", r.detail
                samples[label, "forked per run"].append(r.seconds * 1e3)
    finally:
        for sb in boxes.values():
            sb.close()
        left = guard.destroy()
        assert not left, left

    print(f"\n{args.runs} runs of a tiny snippet each, one slot, ms (ratio = pidns / without pidns, p50)")
    print(f"{'':16} {'pidns p50':>10} {'p90':>7} {'without p50':>12} {'p90':>7} {'ratio':>7}")
    for way in WAYS:
        on, off = samples["pidns", way], samples["without pidns", way]
        print(
            f"{way:16} {statistics.median(on):10.1f} {percentile(on, 0.9):7.1f}"
            f" {statistics.median(off):12.1f} {percentile(off, 0.9):7.1f}"
            f" {statistics.median(on) / statistics.median(off):7.2f}"
        )
    print("\nthe child's own medians (ms, from the spaced runs' spares)")
    for label, got in layers.items():
        print(f"  {label:14} " + "  ".join(f"{k} {statistics.median(v):.2f}" for k, v in got.items()))
    out = subprocess.run(
        [sys.executable, __file__, "--bare", "--runs", str(args.runs)], capture_output=True, check=True
    )
    plain, own_ns = (float(x) for x in out.stdout.split())
    print(f"\nfork + exit + wait of an empty child here, median of {runs} (ms)")
    print(
        f"  plain {plain:.3f}  into a new PID namespace {own_ns:.3f}  (+{own_ns - plain:.3f}, {own_ns / plain:.2f}x)"
    )


if __name__ == "__main__":
    main()
