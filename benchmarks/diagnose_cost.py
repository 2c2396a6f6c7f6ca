"""What verified diagnoses cost a request: sandboxed trace alone vs trace + diagnoses, in one run.

For a snippet with a diagnosis the child that ran it proposes fixes, the server
runs each in the sandbox (one at a time with 2 workers: a request never takes
every worker) and a sandboxed check job decides which to show; for a fine snippet
the child only scans the trace's bytes. Prints median milliseconds of both paths, interleaved, and their
ratio. Usage:
    python benchmarks/diagnose_cost.py [--repeat N] [--workers N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from gradstep.runs import TraceRunner, observed, payload_for, served_fields
from gradstep.settings import Settings

SNIPPETS = Path(__file__).resolve().parent.parent / "snippets"
CASES = {
    "fine (retain_graph_accumulates)": SNIPPETS / "retain_graph_accumulates.py",
    "freed graph, 2 fixes (shared_trunk_partial_grads)": SNIPPETS / "shared_trunk_partial_grads.py",
    "non-scalar, 3 fixes (non_scalar_backward_fails)": SNIPPETS / "non_scalar_backward_fails.py",
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    runner = TraceRunner(Settings.from_env(workers=args.workers))
    runner.start()
    try:
        for label, path in CASES.items():
            code = path.read_text()
            payload = payload_for(code)
            runner.trace(code)  # warm
            plain, diagnosed = [], []
            for i in range(args.repeat):
                # interleaved, alternating which goes first: a run right after another waits for
                # the sandbox's next spare child, and that must not count against one path only
                for bare in (True, False) if i % 2 else (False, True):
                    t0 = time.perf_counter()
                    if bare:
                        result = runner.sandbox.run(payload)
                        runner.checker.check(
                            result.output, served_fields(code), observed(runner.spec, result)
                        )
                    else:
                        runner.trace(code)
                    (plain if bare else diagnosed).append((time.perf_counter() - t0) * 1e3)
                    time.sleep(0.05)  # let the slot's child be reaped and a spare prepared
            p, d = statistics.median(plain), statistics.median(diagnosed)
            print(f"{label:52s} trace {p:7.1f} ms   trace+diagnoses {d:7.1f} ms   {d / p:.2f}x")
    finally:
        runner.close()


if __name__ == "__main__":
    main()
