"""`gradstep export` of a course's worth of snippets in one command vs one snippet, measured in the
same run, on the same machine: the sandbox's start-up (torch) is paid once for all of them.

    .venv/bin/python benchmarks/export_batch.py [--snippets 20] [--repeat 2]

Runs the command as a user does (a new process each time), alternating the two, and prints each
one's median wall time, the ratio 20 snippets / 1 (goal <= 3x) and the bytes written, with and
without --shared-library. Targets are printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gradstep import snippets

GRADSTEP = [sys.executable, "-m", "gradstep", "export"]


def timed(args: list[str]) -> float:
    t0 = time.monotonic()
    r = subprocess.run(GRADSTEP + args, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"gradstep export {' '.join(args)} failed:\n{r.stderr}")
    return time.monotonic() - t0


def size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snippets", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        course = root / "course"
        course.mkdir()
        curated = sorted(snippets.load_all().values(), key=lambda s: s.name)
        for i in range(args.snippets):  # the curated snippets, small and of every kind, as a course's
            s = curated[i % len(curated)]
            (course / f"{i:02d}_{s.name}.py").write_text(s.code, encoding="utf-8")
        one = sorted(course.iterdir())[0]
        times: dict[str, list[float]] = {"1 snippet": [], f"{args.snippets} snippets": [], "shared": []}
        for k in range(args.repeat):
            times["1 snippet"].append(timed([str(one), "-o", str(root / "one.html")]))
            times[f"{args.snippets} snippets"].append(timed([str(course), "-o", str(root / f"out{k}")]))
            times["shared"].append(timed([str(course), "-o", str(root / f"shared{k}"), "--shared-library"]))
        med = {name: statistics.median(ts) for name, ts in times.items()}
        for name, m in med.items():
            print(f"{name:>14}: median {m:6.1f} s  ({', '.join(f'{t:.1f}' for t in times[name])})")
        ratio = med[f"{args.snippets} snippets"] / med["1 snippet"]
        print(f"ratio {args.snippets} snippets / 1: {ratio:.2f}x (goal <= 3x)")
        single = (root / "one.html").stat().st_size
        print(
            f"bytes: one page {single / 1024:.0f} KB; {args.snippets} pages {size(root / 'out0') / 1024:.0f} KB;"
            f" {args.snippets} pages sharing the library {size(root / 'shared0') / 1024:.0f} KB"
        )


if __name__ == "__main__":
    main()
