// The page reads the fix's line map (Fix.source_lines) the server computes; the case table is
// shared with tests/diagnose/test_line_map.py, which checks the server's rule gives these maps.
// Run: node --test tests/frontend/
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fixLineMap } from "../../frontend/align.js";
import { changedLines } from "../../frontend/diagnoses.js";

const table = JSON.parse(readFileSync(new URL("./line_map_cases.json", import.meta.url), "utf8"));

for (const c of table.cases) {
  const fix = { code: c.new, source_lines: c.sources };
  test(`line map: ${c.name}`, () => {
    const m = fixLineMap(c.old, fix);
    assert.deepEqual([...m.changed].sort((x, y) => x - y), c.changed);
    c.sources.forEach((from, i) => {
      assert.equal(m.bToA.get(i + 1), from ?? undefined);
      if (from !== null) assert.equal(m.aToB.get(from), i + 1);
    });
  });
  test(`fix preview: ${c.name}`, () => {
    assert.deepEqual(changedLines(c.old, fix).map((x) => [x.sign, x.line, x.text]), c.preview);
  });
}

test("a map from a sandboxed run cannot point outside the code or twice at one line", () => {
  const m = fixLineMap("a\nb\n", { code: "a\nb\nc\n", source_lines: [1, 1, 7, "x"] });
  assert.deepEqual([...m.bToA], [[1, 1]]);
  assert.deepEqual([...m.aToB], [[1, 1]]);
});

test("a fix from a trace without source_lines maps no line", () => {
  const m = fixLineMap("a\nb\n", { code: "a\nb\n" });
  assert.equal(m.aToB.size, 0);
  assert.equal(m.bToA.size, 0);
});
