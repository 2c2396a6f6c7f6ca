"""Cost of lining up two runs for the side-by-side view (frontend/align.js), in node.

Traces the 24-layer TransformerEncoder snippet and its "fix" (the first backward
with retain_graph=True), then times in node, interleaved in one run: building
the view model of both traces and reading every step (the baseline: what the
page does anyway to show them), and `compareTraces` plus the differences at every
row (what the side-by-side view adds). Prints both medians and their ratio.
Usage:
    python benchmarks/compare_cost.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from gradstep.columns import pack
from gradstep.pipeline import explained
from tracer_overhead import SNIPPET

FRONTEND = Path(__file__).resolve().parents[1] / "frontend"

NODE_SCRIPT = """
import { readFileSync } from "node:fs";
const [dir, frontend, repeat] = process.argv.slice(2);
const { buildModel } = await import(`${frontend}/model.js`);
const { compareTraces, fixLineMap } = await import(`${frontend}/align.js`);
const a = JSON.parse(readFileSync(`${dir}/a.json`));
const b = JSON.parse(readFileSync(`${dir}/b.json`));
// the fix rewrites one line in place: each of its lines comes from the same line of the snippet
const lines = b.code.split("\\n").length;
const map = fixLineMap(a.code, { code: b.code, source_lines: Array.from({ length: lines }, (_, i) => i + 1) });
const median = (xs) => [...xs].sort((x, y) => x - y)[xs.length >> 1];
const base = [];
const cmp = [];
let rows = 0;
for (let r = 0; r < Number(repeat); r++) {
  let t0 = performance.now();
  for (const t of [a, b]) {
    const m = buildModel(t);
    for (let i = 0; i < m.steps.length; i++) m.step(i);
  }
  base.push(performance.now() - t0);
  t0 = performance.now();
  const c = compareTraces(a, b, map);
  for (let k = 0; k < c.rows.length; k++) c.diffAt(k);
  cmp.push(performance.now() - t0);
  rows = c.rows.length;
}
console.log(JSON.stringify({ base: median(base), compare: median(cmp), rows }));
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    node = shutil.which("node")
    if node is None:
        raise SystemExit("node is not installed")
    fixed = SNIPPET.replace(".backward()", ".backward(retain_graph=True)", 1)
    assert fixed != SNIPPET
    a, b = explained(SNIPPET), explained(fixed)
    if not (a["steps"] and b["steps"]):
        raise SystemExit(f"the tracer recorded no steps ({a['status']}, {b['status']}): nothing to compare")
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "a.json").write_text(json.dumps(pack(a)))  # as the page gets them: version 4's columns
        Path(tmp, "b.json").write_text(json.dumps(pack(b)))
        script = Path(tmp, "bench.mjs")
        script.write_text(NODE_SCRIPT)
        out = subprocess.run(
            [node, str(script), tmp, str(FRONTEND), str(args.repeat)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    r = json.loads(out)
    print(f"traces: {len(a['nodes'])} and {len(b['nodes'])} nodes, {r['rows']} aligned rows")
    print(f"view models of both, every step read: {r['base']:.1f} ms (median of {args.repeat})")
    print(f"compareTraces + differences at every row: {r['compare']:.1f} ms")
    print(f"ratio: {r['compare'] / r['base']:.2f}x")


if __name__ == "__main__":
    main()
