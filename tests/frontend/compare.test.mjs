// Unit tests for the sentences the side-by-side view lists (frontend/compare.js describeDiff).
// Run: node --test tests/frontend/
import { test } from "node:test";
import assert from "node:assert/strict";
import { compareTraces, fixLineMap } from "../../frontend/align.js";
import { describeDiff } from "../../frontend/compare.js";
import { fmtNumber } from "../../frontend/printing.js";

const grad = (v) => ({ shape: [], dtype: "float32", has_grad_fn: false, norm: Math.abs(v), values: v });
const x = (g) => ({ name: "x", shape: [], is_leaf: true, node: 1, ...(g === undefined ? {} : { grad: grad(g) }) });
const NODES = [
  { id: 0, op: "PowBackward0", line: 3, step: 0, next: [1] },
  { id: 1, op: "AccumulateGrad", line: 3, step: 0, tensor: "x" },
];
const ERROR = { type: "RuntimeError", message: "Trying to backward through the graph a second time", line: 5 };
const ORIGINAL = {
  code: "import torch\nx = t\ny = x ** 2\ny.backward()\ny.backward()\n",
  nodes: NODES,
  steps: [
    { kind: "forward", line: 3, nodes: [{ id: 0 }, { id: 1 }], tensors: [x()] },
    { kind: "backward", line: 4, nodes: [{ id: 0, freed: true, executed: true }, { id: 1, executed: true }], tensors: [x(6)] },
    { kind: "backward", line: 5, error: ERROR, nodes: [{ id: 0, freed: true, failed: true }, { id: 1 }], tensors: [x(6)] },
  ],
};
const FIXED = {
  code: "import torch\nx = t\ny = x ** 2\ny.backward(retain_graph=True)\ny.backward()\n",
  nodes: NODES,
  steps: [
    { kind: "forward", line: 3, nodes: [{ id: 0 }, { id: 1 }], tensors: [x()] },
    { kind: "backward", line: 4, nodes: [{ id: 0, executed: true }, { id: 1, executed: true }], tensors: [x(6)] },
    { kind: "backward", line: 5, nodes: [{ id: 0, freed: true, executed: true }, { id: 1, executed: true }], tensors: [x(12)] },
  ],
};
const MAP = fixLineMap(ORIGINAL.code, { code: FIXED.code, source_lines: [1, 2, 3, 4, 5] }); // as the server ships it
const sentences = (r) => {
  const c = compareTraces(ORIGINAL, FIXED, MAP);
  return describeDiff(c.diffAt(r), ORIGINAL, FIXED);
};

test("steps that agree have nothing to list", () => {
  assert.deepEqual(sentences(0), []);
});

test("a node freed in one run is named with its line and the run that freed it", () => {
  assert.deepEqual(sentences(1), [{ kind: "freed", text: "PowBackward0 (line 3): freed in the original, held in the fix." }]);
});

test("an error in one run and a differing grad are both listed, the error first", () => {
  const s = sentences(2);
  assert.deepEqual(s.map((x) => x.kind), ["error", "grad", "failed"]);
  assert.equal(s[0].text, `Only the original fails here: RuntimeError: ${ERROR.message}`);
  assert.equal(s[1].text, `x.grad: ${fmtNumber(6)} in the original, ${fmtNumber(12)} in the fix.`);
});

test("a long torch message is cut in the list", () => {
  const long = { ...ERROR, message: "m".repeat(300) };
  const a = { ...ORIGINAL, steps: [...ORIGINAL.steps.slice(0, 2), { ...ORIGINAL.steps[2], error: long }] };
  const c = compareTraces(a, FIXED, MAP);
  const text = describeDiff(c.diffAt(2), a, FIXED)[0].text;
  assert.ok(text.endsWith("…") && text.length < 160);
});

test("many nodes freed at once are named up to a few, the rest counted", () => {
  const n = 10;
  const nodes = [...Array(n).keys()].map((id) => ({ id, op: `Op${id}Backward0`, line: 3, step: 0 }));
  const at = (freed) => ({ kind: "backward", line: 4, nodes: nodes.map((x) => ({ id: x.id, freed })), tensors: [] });
  const a = { code: "a\nb\nc\nd\n", nodes, steps: [at(true)] };
  const b = { code: "a\nb\nc\nd\n", nodes, steps: [at(false)] };
  const s = describeDiff(compareTraces(a, b, fixLineMap(a.code, { code: b.code, source_lines: [1, 2, 3, 4] })).diffAt(0), a, b).map((x) => x.text);
  assert.equal(s.length, 6);
  assert.equal(s[0], "Op0Backward0 (line 3): freed in the original, held in the fix.");
  assert.equal(s.at(-1), "and 5 more nodes freed in the original, held in the fix.");
});
