"""Extra sandbox slots: small-snippet latency with slots == workers vs more slots.

    .venv/bin/python benchmarks/spares.py [--workers 2] [--extra 0,1,2,4] [--rounds 6] [--block 25] [--no-http]

Each configuration is a sandbox with the server's target (the tracer), preloads and prewarm,
``--workers`` runs at once and ``workers + extra`` slots; ``extra 0`` is the old layout (one slot,
one spare per concurrent run). They run the same tiny snippet, interleaved: round after round,
each configuration in turn gets a block of runs in each mode, so load drift hits all alike:

* back to back: one caller, the next run as soon as the last answered (a steady stream: each run
  may find its slot's next spare still being forked, confined and prewarmed);
* spaced: one caller, ``--gap`` ms between runs (the spares have time to get ready);
* stream: ``workers`` callers back to back (every run at once the sandbox allows).

Then the same end to end: a ``gradstep serve`` per configuration (``GRADSTEP_EXTRA_SLOTS``), all
up at once, and POST /api/trace of the small snippet made distinct (a cache miss), back to back
and spaced, again interleaved block by block (``--no-http`` skips it).

The first ``--skip`` runs of each block are dropped (they find every spare ready, as after any
pause). Printed: p50/p95 ms per configuration and mode, the ratio of each p50 to extra 0's, the
mean queue wait and the mean time a run waited for its child to be ready ("spare": ~0 when a
spare was ready), the load average before and after, and what a waiting spare costs in memory
(RSS, PSS, private, and its slot's memory cgroup charge). Ratios are printed, never asserted.
Needs root (cgroups, namespaces); everything runs in a guard cgroup, removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import threading
import time
from pathlib import Path

import httpx
import orjson
from gradstep.runs import payload_for, sandbox_config
from gradstep.sandbox import Sandbox
from gradstep.settings import Settings
from harness import SEED, Server, percentile, print_leftovers
from testkit.sandbox_guard import Guard, guard_unavailable, settle, uid_base

SNIPPET = (
    "import torch\nx = torch.ones(3, requires_grad=True)\ny = (x * x).sum()\ny.backward()\nprint(x.grad)\n"
)
JOB = payload_for(SNIPPET)  # what the server hands its target
MODES = ("back to back", "spaced", "stream")


def run_block(sb: Sandbox, mode: str, n: int, gap: float, callers: int) -> list[tuple[float, float, float]]:
    """``n`` runs per caller; (ms of run(), ms queued, ms until the child had the code) each."""
    out: list[tuple[float, float, float]] = []
    lock = threading.Lock()

    def caller() -> None:
        for _ in range(n):
            r = sb.run(JOB)
            if r.status != "ok":
                raise RuntimeError(f"{r.status}: {r.detail}")
            with lock:
                out.append((r.seconds * 1e3, r.timings.get("queue", 0.0), r.timings.get("spare", 0.0)))
            if mode == "spaced":
                time.sleep(gap)

    if mode == "stream":
        threads = [threading.Thread(target=caller) for _ in range(callers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        caller()
    return out


def post_block(client: httpx.Client, mode: str, n: int, gap: float, tag: str) -> list[float]:
    """``n`` POST /api/trace of a distinct small snippet, one after another; ms each."""
    out = []
    for i in range(n):
        code = f"{SEED}# {tag} {i} {os.urandom(6).hex()}\n"
        t = time.perf_counter()
        r = client.post("/api/trace", json={"code": code})
        out.append((time.perf_counter() - t) * 1e3)
        if r.status_code != 200 or r.headers.get("x-gradstep-cache") != "miss":
            raise RuntimeError(f"{r.status_code} cache={r.headers.get('x-gradstep-cache')}: {r.text[:300]}")
        if orjson.loads(r.content)["status"] != "ok":
            raise RuntimeError(f"the trace's status is not ok: {r.text[:300]}")
        if mode == "spaced":
            time.sleep(gap)
    return out


def end_to_end(args, extras: list[int]) -> dict[tuple[int, str], list[float]]:
    """The small snippet over HTTP, back to back and spaced, per configuration, interleaved."""
    samples: dict[tuple[int, str], list[float]] = {(e, m): [] for e in extras for m in MODES[:2]}
    with contextlib.ExitStack() as stack:
        servers = {}
        for i, extra in enumerate(extras):
            env = {"GRADSTEP_EXTRA_SLOTS": str(extra)}
            server = servers[extra] = Server(args.workers, env, uid_base=uid_base(2200 + 20 * i))
            stack.callback(
                lambda s=server: print_leftovers(s.stop()) if s.proc and s.proc.poll() is None else None
            )
            server.launch()
        clients = {}
        for extra, server in servers.items():
            server.wait_ready()
            assert server.health["sandbox"]["slots"] == args.workers + extra, server.health
            clients[extra] = stack.enter_context(
                httpx.Client(base_url=server.url, trust_env=False, timeout=60)
            )
            post_block(clients[extra], "back to back", 5, 0, "warm-up")
        for r in range(args.rounds):
            for mode in MODES[:2]:
                for extra, client in clients.items():
                    time.sleep(0.2)  # every spare ready, as after any pause
                    block = post_block(client, mode, args.block, args.gap / 1e3, f"{r} {mode}")
                    samples[extra, mode] += block[args.skip :]
    return samples


def print_table(samples, extras: list[int], modes, workers: int, with_timings: bool) -> None:
    head = f"{'mode':14} {'slots':>11} {'p50 ms':>8} {'p95 ms':>8} {'p50 ratio':>10}"
    print(head + (f" {'queue ms':>9} {'spare ms':>9}" if with_timings else "") + f" {'runs':>6}")
    for mode in modes:
        base = percentile([s[0] for s in samples[0, mode]], 50)
        for extra in extras:
            got = samples[extra, mode]
            total = [s[0] for s in got]
            p50 = percentile(total, 50)
            line = f"{mode:14} {f'{workers}+{extra}':>11} {p50:8.1f} {percentile(total, 95):8.1f} {p50 / base:10.2f}"
            if with_timings:
                line += (
                    f" {statistics.mean(s[1] for s in got):9.2f} {statistics.mean(s[2] for s in got):9.2f}"
                )
            print(f"{line} {len(got):6}")


def smaps(pid: int) -> dict[str, int]:
    """kB: Rss, Pss, private (clean + dirty) and page tables (VmPTE) of a process."""
    found = {"Rss": 0, "Pss": 0, "Private": 0, "VmPTE": 0}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Rss", "Pss"):
            found[key] = int(value.split()[0])
        elif key in ("Private_Clean", "Private_Dirty"):
            found["Private"] += int(value.split()[0])
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmPTE:"):
            found["VmPTE"] = int(line.split()[1])
    return found


def spare_memory(sb: Sandbox) -> dict[str, float]:
    """Medians over the waiting spares, MB: RSS, PSS, private, the slot cgroup's charge; and the zygote's."""
    h = settle(sb, timeout=60)
    time.sleep(1.0)  # every spare has finished its prewarm and waits for code
    h = settle(sb, timeout=60)
    rows = [smaps(pid) for pid in h["spare_pids"]]
    charge = []
    cg = sb._cgroups  # noqa: SLF001 - a measurement, not an API
    if cg is not None:
        for slot in range(sb.slots):
            usage = cg.tops["memory"] / f"slot-{slot}" / "memory.usage_in_bytes"
            charge.append(int(usage.read_text()) / 2**20)
    zygote = smaps(h["zygote_pid"])
    return {
        "rss": statistics.median(r["Rss"] for r in rows) / 1024,
        "pss": statistics.median(r["Pss"] for r in rows) / 1024,
        "private": statistics.median(r["Private"] for r in rows) / 1024,
        "pte": statistics.median(r["VmPTE"] for r in rows) / 1024,
        "cgroup": statistics.median(charge) if charge else float("nan"),
        "zygote_rss": zygote["Rss"] / 1024,
        "zygote_pss": zygote["Pss"] / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2, help="runs at once (default 2)")
    ap.add_argument("--extra", default="0,1,2,4", help="extra slots per configuration; 0 first: the baseline")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--block", type=int, default=25, help="runs per caller per block")
    ap.add_argument("--skip", type=int, default=6, help="runs dropped at the start of each block")
    ap.add_argument("--gap", type=float, default=50.0, help="ms between spaced runs (default 50)")
    ap.add_argument("--no-http", action="store_true", help="sandbox.run only, no end-to-end part")
    args = ap.parse_args()
    extras = [int(x) for x in args.extra.split(",")]
    if extras[0] != 0:
        extras.insert(0, 0)
    why = guard_unavailable()
    if why:
        raise SystemExit(why)

    load_before = os.getloadavg()
    guard = Guard(memory_mb=12288, pids=2000)
    boxes: dict[int, Sandbox] = {}
    samples = {(e, m): [] for e in extras for m in MODES}
    try:
        for i, extra in enumerate(extras):
            config = sandbox_config(
                Settings(),
                workers=args.workers,
                extra_slots=extra,
                cgroup_parent=guard.parent,
                uid_base=uid_base(2000 + 20 * i),
            )
            sb = boxes[extra] = Sandbox(config)
            sb.start()
            guard.hold(sb.health()["zygote_pid"])
            for _ in range(5):  # warm the path (first forks, page cache)
                assert sb.run(JOB).status == "ok"
        for _ in range(args.rounds):
            for mode in MODES:
                for extra, sb in boxes.items():
                    settle(sb, timeout=60)
                    time.sleep(0.1)
                    block = run_block(sb, mode, args.block, args.gap / 1e3, args.workers)
                    samples[extra, mode] += block[args.skip * (args.workers if mode == "stream" else 1) :]
        load_after = os.getloadavg()
        memory = {extra: spare_memory(sb) for extra, sb in boxes.items()}
        states = next(iter(boxes.values())).health()["layers"]
    finally:
        for sb in boxes.values():
            sb.close()
        left = guard.destroy()
        if left:
            print("note: left in the guard:", left)

    inactive = [f"{n} ({s})" for n, s in states.items() if s != "active"]
    if inactive:
        print("note: not active here: " + ", ".join(inactive))
    print(
        f"\nsandbox.run of a tiny snippet (the tracer), {args.workers} runs at once, {os.cpu_count()} CPUs;"
        f" {args.rounds} rounds x {args.block} runs per block, first {args.skip} of each dropped"
    )
    print(
        f"load average before {' '.join(f'{x:.2f}' for x in load_before)},"
        f" after {' '.join(f'{x:.2f}' for x in load_after)}"
    )
    print()
    print_table(samples, extras, MODES, args.workers, with_timings=True)
    print("\n(p50 ratio: this configuration's p50 / the same mode's with no extra slot; < 1 is faster)")
    if not args.no_http:
        load_http = os.getloadavg()
        http = end_to_end(args, extras)
        print(
            f"\nPOST /api/trace of a small snippet (cache miss), one client, {args.workers} workers;"
            f" load average before {' '.join(f'{x:.2f}' for x in load_http)},"
            f" after {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
        )
        print_table({k: [(v,) for v in vs] for k, vs in http.items()}, extras, MODES[:2], args.workers, False)
    m = memory[extras[-1]]
    print(
        f"\na waiting spare (prewarmed, torch imported), median of {args.workers + extras[-1]}: "
        f"RSS {m['rss']:.0f} MB, PSS {m['pss']:.0f} MB, private {m['private']:.1f} MB,"
        f" page tables {m['pte']:.2f} MB;"
        f" its slot's memory cgroup is charged {m['cgroup']:.1f} MB"
    )
    print(f"the zygote: RSS {m['zygote_rss']:.0f} MB, PSS {m['zygote_pss']:.0f} MB (shared with every child)")
    print(
        "so N extra slots cost about N x (private + page tables) of memory, idle or not, and no CPU"
        " in a steady stream (one spare is made per run whatever the slot count; each slot's first"
        " at start)"
    )


if __name__ == "__main__":
    main()
