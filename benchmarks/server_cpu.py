"""Server CPU per request: what a run's bytes cost the server itself (not its sandboxed children).

Through the real app in this process (its sandbox as `gradstep serve` has it), each request's CPU
time of this process and its checker processes — routing, validating the child's trace, writing in
the code, compressing, caching — for:
a trivial snippet (the baseline), a snippet that forges a trace of 8,500 lines and 2,000 non-leaf
warnings (it cost the server 48 s when the server ran the diagnosis rules on a child's output),
a genuine 55 KB snippet of `y.grad` reads (≈4 s then), and the 24-layer transformer (a 1 MB trace).
Prints the median of --repeat requests of each (distinct code each time: no cache hit) and its
ratio to the baseline. Usage:
    python benchmarks/server_cpu.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import warnings

from fastapi.testclient import TestClient
from gradstep.app import create_app
from gradstep.diagnose import facts
from gradstep.settings import Settings
from harness import cpu_times, descendants, proc_table
from tracer_overhead import SNIPPET as TRANSFORMER

TRIVIAL = "import torch\nx = torch.ones(2, requires_grad=True)\n(x * 3).sum().backward()\n"
FORGED = (
    "import json, os, struct\n"
    "code = 'import torch\\nx = torch.ones(2, requires_grad=True)\\ny = x * 2\\n' + 'print(y.grad)\\n' * 8500\n"
    f"warning = {{'category': 'UserWarning', 'message': {json.dumps('The .grad attribute ' + facts.NON_LEAF_MARK)}}}\n"
    "fix = {'title': 't', 'explanation': 'e', 'code': 'x = 1\\n'}\n"
    "trace = {'version': 3, 'status': 'ok', 'code': code, 'warnings': [{**warning, 'line': 4 + i} for i in range(2000)],\n"
    "         'diagnoses': [{'kind': 'grad_of_non_leaf', 'severity': 'warning', 'message': 'm', 'fixes': [fix]}]}\n"
    "body = json.dumps(trace).encode()\n"
    "os.write(3, b'R' + struct.pack('<Q', len(body)) + body)\n"
    "os._exit(0)\n"
)
GENUINE = "import torch\nx = torch.ones(2, requires_grad=True)\ny = x * 2\ny.sum().backward()\n"
GENUINE += "y.grad\n" * ((55_000 - len(GENUINE)) // 7)
CASES = {
    "trivial snippet (baseline)": TRIVIAL,
    "forged: 8,500 lines, 2,000 warnings": FORGED,
    "genuine: 55 KB of y.grad reads": GENUINE,
    "24-layer transformer (1 MB trace)": TRANSFORMER,
}


def cpu() -> float:
    """This process's CPU seconds and its checker processes' (gradstep.checker: the server's work
    on a child's bytes, off its GIL), never the sandbox's."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    checkers = 0.0
    for pid in descendants(os.getpid(), proc_table()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"gradstep.checker" in f.read():
                    checkers += sum(cpu_times(pid))
        except OSError:
            continue
    return usage.ru_utime + usage.ru_stime + checkers


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    with TestClient(create_app(Settings.from_env(rate=0, wall_seconds=60, cpu_seconds=30))) as client:
        results: dict[str, list[float]] = {label: [] for label in CASES}
        for i in range(args.repeat + 1):
            for label, code in CASES.items():
                before = cpu()
                r = client.post("/api/trace", json={"code": f"{code}# {i} {os.urandom(4).hex()}\n"})
                r.raise_for_status()
                if i:  # the first round warms up
                    results[label].append((cpu() - before) * 1e3)
    base = statistics.median(results["trivial snippet (baseline)"])
    for label, times in results.items():
        ms = statistics.median(times)
        print(f"{label:38s} server CPU {ms:8.1f} ms   {ms / base:6.1f}x the baseline")


if __name__ == "__main__":
    main()
