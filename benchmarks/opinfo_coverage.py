"""The tracer against plain torch on PyTorch's own OpInfo database (torch.testing op_db).

Every OpInfo that supports autograd, each CPU sample input in float64 and complex128 (where its
backward dtypes allow): a snippet draws the sample, calls the op, backward, backward again and,
where the op supports gradgrad, a create_graph=True double backward (server/testkit/opinfo_sweep.py).
Each snippet runs traced and plain; a case agrees when tracing never stopped, the status, every
call's error, every input's .grad after each call, autograd.grad's returns, the freed flags,
the node a failing call stopped in, the nodes each call ran (in the engine's order) and the stale
flags all match plain torch (server/testkit/truth.py).

Prints agreeing/total, then the disagreeing cases grouped by cause (their first disagreement,
particulars blanked out) with an example and the ops; every exception the tracer raised or
stopped on; every kind of disagreement (also those behind a first one); and what plain torch
itself raised (the op cannot do something; the tracer is checked to say the same). Usage:
    python benchmarks/opinfo_coverage.py                      # first 10 samples per op and dtype
    python benchmarks/opinfo_coverage.py --samples 0 --jobs 2 # every sample (~4 CPU hours)
    python benchmarks/opinfo_coverage.py --ops add linalg.svd --samples 0 -v
    python benchmarks/opinfo_coverage.py --limit 20 --json out.jsonl
    python benchmarks/opinfo_coverage.py --report out.jsonl   # that run's report again, with this code

Cost: about 0.17 s per case (a traced and a plain run of one snippet), plus drawing the
samples before sample k again in each run (the snippet must stand alone), which grows with k
squared: 5871 cases with --samples 10 (~20 CPU minutes), 19442 with --samples 0 (~3.7 CPU
hours, two thirds of it redrawing samples of the few ops that have hundreds).
Each (op, dtype) runs in a forked worker: an op that crashes or hangs the tracer is a finding,
not the end of the sweep.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path

import torch  # noqa: E402
from testkit import opinfo_sweep as sweep

EXAMPLE_OPS = 12  # ops named per cause


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--ops", nargs="+", metavar="NAME", help="OpInfo names (name or name.variant)")
    ap.add_argument("--limit", type=int, help="only the first N ops (in op_db order)")
    ap.add_argument(
        "--samples", type=int, default=sweep.DEFAULT_SAMPLES, help="samples per op and dtype (0: all)"
    )
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds one case may take")
    ap.add_argument("--json", type=Path, help="write every case's outcome here, one JSON line each")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every disagreeing case")
    ap.add_argument(
        "--report", type=Path, metavar="JSON", help="print the report of a saved --json run, run nothing"
    )
    return ap.parse_args()


def ops_named(args: argparse.Namespace) -> list:
    ops = sweep.autograd_ops(args.ops)
    return ops[: args.limit] if args.limit else ops


def run(jobs: list, args: argparse.Namespace) -> list[sweep.Outcome]:
    total = sum(len(j.cases) for j in jobs)
    outcomes: list[sweep.Outcome] = []
    start = time.perf_counter()
    # one JSON line per case as it finishes: a long sweep that is stopped keeps what it did
    out = args.json.open("w") if args.json else None
    for o in sweep.sweep(jobs, args.jobs, args.timeout):
        outcomes.append(o)
        if out:
            out.write(json.dumps(asdict(o) | {"label": o.case.label, "agrees": o.agrees}) + "\n")
            out.flush()
        if args.verbose and not o.agrees:
            print(f"  {o.case.label}: {o.problems[0]}", flush=True)
        if len(outcomes) % 200 == 0:
            done, elapsed = len(outcomes), time.perf_counter() - start
            eta = elapsed / done * (total - done)
            print(f"[{done}/{total} cases, {elapsed:.0f} s, ~{eta:.0f} s left]", file=sys.stderr, flush=True)
    if out:
        out.close()
    return outcomes


def op_of(case: sweep.Case) -> str:
    return f"{case.op}.{case.variant}" if case.variant else case.op


def listed(names: list[str]) -> str:
    shown = ", ".join(names[:EXAMPLE_OPS])
    return shown + (f", … ({len(names)} ops)" if len(names) > EXAMPLE_OPS else "")


def print_causes(failing: list[sweep.Outcome]) -> None:
    by_cause: dict[str, list[sweep.Outcome]] = defaultdict(list)
    for o in failing:
        by_cause[o.cause or "?"].append(o)
    print(f"\nDisagreeing cases by cause (their first disagreement): {len(by_cause)} causes")
    for cause, group in sorted(by_cause.items(), key=lambda kv: -len(kv[1])):
        ops = sorted({op_of(o.case) for o in group})
        example = group[0]
        dtypes = Counter(o.case.dtype for o in group)
        per_dtype = ", ".join(f"{n} {d}" for d, n in sorted(dtypes.items()))
        print(f"\n[{len(group)} cases ({per_dtype}), {len(ops)} ops] {cause}")
        print(f"    e.g. {example.case.label}: {example.problems[0][:300]}")
        if len(dtypes) == 1:
            print(f"    ops: {listed(ops)}")
        for dtype in sorted(dtypes) if len(dtypes) > 1 else ():
            print(
                f"    {dtype} ops: {listed(sorted({op_of(o.case) for o in group if o.case.dtype == dtype}))}"
            )
        reasons = Counter(e for o in group for e in o.torch_errors)
        for reason, n in reasons.most_common(3):
            print(f"    plain torch raised ({n}): {reason[:200]}")


def print_exceptions(failing: list[sweep.Outcome]) -> None:
    """Every distinct exception the tracer raised or stopped on, in full."""
    seen: dict[str, list[str]] = defaultdict(list)
    for o in failing:
        for p in o.problems:
            if p.startswith(("stopped:", "record() raised", "worker crashed", "timed out")):
                seen[p].append(o.case.label)
    if not seen:
        return
    print(f"\nTracer exceptions, crashes and timeouts ({len(seen)} distinct):")
    for problem, labels in sorted(seen.items(), key=lambda kv: -len(kv[1])):
        print(f"  [{len(labels)}] {problem[:400]}")
        print(f"      in {listed(labels)}")


def print_kinds(failing: list[sweep.Outcome]) -> None:
    """Every kind of disagreement, a case counted once per kind: also those a first cause hides."""
    kinds: dict[str, set[str]] = defaultdict(set)
    for o in failing:
        for p in o.problems:
            check, _, mismatch = p.partition(": ")
            kinds[sweep.cause_of(check, mismatch) if mismatch else p].add(o.case.label)
    print(f"\nEvery kind of disagreement ({len(kinds)}), cases showing it:")
    for kind, labels in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(labels):6d}  {kind}")


def print_torch_reasons(outcomes: list[sweep.Outcome]) -> None:
    """What the op itself cannot do: plain torch raised (other than the freed-graph second backward)."""
    reasons: dict[str, list[str]] = defaultdict(list)
    for o in outcomes:
        for e in o.torch_errors:
            reasons[sweep.stem(e, 160)].append(op_of(o.case))
    if not reasons:
        return
    print("\nPlain torch itself raised (the op cannot do this; the trace must say the same):")
    for reason, ops in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        print(f"  [{len(ops)} cases] {reason}")
        print(f"      ops: {listed(sorted(set(ops)))}")


def print_summary(ops: list, outcomes: list[sweep.Outcome], seconds: float | None) -> None:
    untestable = [sweep.op_name(op) for op in ops if not sweep.op_dtypes(op)]
    agreeing = sum(o.agrees for o in outcomes)
    by_op: dict[str, bool] = defaultdict(lambda: True)
    for o in outcomes:
        by_op[op_of(o.case)] &= o.agrees
    cpu = sum(o.seconds for o in outcomes)
    most = 1 + max((o.case.index for o in outcomes), default=-1)
    print(
        f"\nOpInfo sweep: {len(ops)} ops with autograd, up to {most} samples per op and dtype (float64, complex128)"
    )
    if untestable:
        print(f"  not run (no float64 or complex128 backward on the CPU): {', '.join(untestable)}")
    for dtype in sweep.DTYPES:
        of = [o for o in outcomes if o.case.dtype == dtype]
        print(f"  {dtype:10s} {sum(o.agrees for o in of)}/{len(of)} cases agree")
    pct = 100 * agreeing / max(1, len(outcomes))
    print(f"agreeing: {agreeing}/{len(outcomes)} cases ({pct:.1f}%)")
    print(f"ops with every case agreeing: {sum(by_op.values())}/{len(by_op)}")
    wall = f"wall {seconds:.0f} s, " if seconds is not None else ""
    print(f"{wall}{cpu:.0f} s in the cases ({cpu / max(1, len(outcomes)):.2f} s each)")


def saved_outcomes(path: Path) -> list[sweep.Outcome]:
    """The outcomes a --json run wrote (all it finished, if it was stopped)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    return [
        sweep.Outcome(sweep.Case(**r["case"]), r["problems"], r["cause"], r["torch_errors"], r["seconds"])
        for r in rows
    ]


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)  # before any op runs: workers are forked from this process
    warnings.simplefilter("ignore")  # sample inputs warn a lot; warnings are not compared
    start = time.perf_counter()
    ops = ops_named(args)
    if args.report:
        outcomes, seconds = saved_outcomes(args.report), None
    else:
        outcomes = run(sweep.jobs_of(ops, args.samples or None), args)
        seconds = time.perf_counter() - start
    outcomes.sort(key=lambda o: (o.case.op, o.case.variant, o.case.dtype, o.case.index))
    failing = [o for o in outcomes if not o.agrees]
    if failing:
        print_causes(failing)
        print_exceptions(failing)
        print_kinds(failing)
    print_torch_reasons(outcomes)
    print_summary(ops, outcomes, seconds)


if __name__ == "__main__":
    main()
