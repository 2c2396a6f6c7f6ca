// Unit tests for frontend/align.js: how the side-by-side view lines up an
// original run and a fixed run, and what it calls a difference.
// Run: node --test tests/frontend/
import { test } from "node:test";
import assert from "node:assert/strict";
import { fixLineMap, alignSteps, shownAt, matchNodes, compareTraces } from "../../frontend/align.js";

const grad = (v) => ({ shape: [], dtype: "float32", has_grad_fn: false, norm: Math.abs(v), values: v });
const fwd = (line, nodes, tensors = []) => ({ kind: "forward", line, nodes, tensors });
const call = (line, nodes, tensors = [], extra = {}) => ({ kind: "backward", line, api: "Tensor.backward", nodes, tensors, ...extra });
const x = (g = null) => ({ name: "x", shape: [], dtype: "float32", is_leaf: true, node: 1, ...(g === null ? {} : { grad: grad(g) }) });

// y = x ** 2, then backward twice: the original fails on the second call, the fix retains the graph.
const CODE_A = "import torch\nx = torch.tensor(3.0, requires_grad=True)\ny = x ** 2\ny.backward()\ny.backward()\n";
const CODE_B = "import torch\nx = torch.tensor(3.0, requires_grad=True)\ny = x ** 2\ny.backward(retain_graph=True)\ny.backward()\n";
const NODES = [
  { id: 0, op: "PowBackward0", line: 3, step: 0, next: [1], saved: [{ name: "self", kind: "tensor" }] },
  { id: 1, op: "AccumulateGrad", line: 3, step: 0, tensor: "x" },
];
const ORIGINAL = {
  status: "error",
  code: CODE_A,
  nodes: NODES,
  steps: [
    fwd(3, [{ id: 0 }, { id: 1 }], [x()]),
    call(4, [{ id: 0, executed: true, order: 0, freed: true }, { id: 1, executed: true, order: 1 }], [x(6)]),
    call(5, [{ id: 0, failed: true, order: 0, freed: true }, { id: 1 }], [x(6)],
      { error: { type: "RuntimeError", message: "Trying to backward through the graph a second time", line: 5 } }),
  ],
};
const FIXED = {
  status: "ok",
  code: CODE_B,
  nodes: NODES,
  steps: [
    fwd(3, [{ id: 0 }, { id: 1 }], [x()]),
    call(4, [{ id: 0, executed: true, order: 0 }, { id: 1, executed: true, order: 1 }], [x(6)], { retain_graph: true }),
    call(5, [{ id: 0, executed: true, order: 0, freed: true }, { id: 1, executed: true, order: 1 }], [x(12)]),
  ],
};

// The fix's line map as the server ships it (Fix.source_lines; its rule is tested on
// tests/frontend/line_map_cases.json): for each line of b, the line of a it comes from.
const mapOf = (a, b, sources) => fixLineMap(a.code, { code: b.code, source_lines: sources });
const MAP = mapOf(ORIGINAL, FIXED, [1, 2, 3, 4, 5]);

test("calls are aligned by their order, forward steps by line", () => {
  const rows = alignSteps(ORIGINAL, FIXED, MAP);
  assert.deepEqual(rows, [
    { a: 0, b: 0, kind: "forward" },
    { a: 1, b: 1, kind: "call" },
    { a: 2, b: 2, kind: "call" },
  ]);
});

test("calls on different lines are still aligned by order", () => {
  const b = {
    ...FIXED,
    code: "import torch\nx = torch.tensor(3.0, requires_grad=True)\n\n\ny = x ** 2\nprint(y)\ny.backward(retain_graph=True)\ny.backward()\n",
    steps: [fwd(5, [{ id: 0 }, { id: 1 }]), call(7, []), call(8, [])],
  };
  const rows = alignSteps(ORIGINAL, b, mapOf(ORIGINAL, b, [1, 2, null, null, 3, null, null, 5]));
  assert.deepEqual(rows.map((r) => [r.a, r.b]), [[0, 0], [1, 1], [2, 2]]);
});

test("a forward step only the fix has gets its own row and the original holds its previous step", () => {
  // the fix recomputes y before the second backward (one more forward step, on an inserted line)
  const b = {
    status: "ok",
    code: "import torch\nx = torch.tensor(3.0, requires_grad=True)\ny = x ** 2\ny.backward()\ny = x ** 2\ny.backward()\n",
    nodes: [...NODES, { id: 2, op: "PowBackward0", line: 5, step: 2, next: [1] }],
    steps: [fwd(3, []), call(4, []), fwd(5, []), call(6, [])],
  };
  const rows = alignSteps(ORIGINAL, b, mapOf(ORIGINAL, b, [1, 2, 3, 4, null, 5]));
  assert.deepEqual(rows, [
    { a: 0, b: 0, kind: "forward" },
    { a: 1, b: 1, kind: "call" },
    { a: null, b: 2, kind: "forward" },
    { a: 2, b: 3, kind: "call" },
  ]);
  assert.deepEqual(shownAt(rows, 2), { a: 1, b: 2, heldA: true, heldB: false });
});

test("forward steps with no common line are not paired", () => {
  const a = { code: "a\nb\n", steps: [fwd(1, []), fwd(2, [])] };
  const b = { code: "c\nd\ne\n", steps: [fwd(3, [])] };
  const rows = alignSteps(a, b, mapOf(a, b, [null, null, null]));
  assert.deepEqual(rows.map((r) => [r.a, r.b]), [[0, null], [1, null], [null, 0]]);
});

test("a run that stopped early leaves rows with only the other run", () => {
  const a = { ...ORIGINAL, steps: ORIGINAL.steps.slice(0, 2) };
  const rows = alignSteps(a, FIXED, MAP);
  assert.deepEqual(rows.at(-1), { a: null, b: 2, kind: "call" });
  assert.deepEqual(shownAt(rows, rows.length - 1), { a: 1, b: 2, heldA: true, heldB: false });
});

test("every step of each run appears exactly once and in order", () => {
  const a = { code: "l1\nl2\nl3\nl4\nl5\n", steps: [fwd(1, []), fwd(2, []), call(3, []), fwd(4, []), call(5, []), fwd(4, [])] };
  const b = { code: "l1\nnew\nl2\nl3\nl4\nl5\n", steps: [fwd(2, []), fwd(3, []), call(4, []), call(6, []), call(6, []), fwd(1, [])] };
  const rows = alignSteps(a, b, mapOf(a, b, [1, null, 2, 3, 4, 5]));
  for (const side of ["a", "b"]) {
    const seen = rows.map((r) => r[side]).filter((i) => i !== null);
    assert.deepEqual(seen, [...Array(6).keys()]);
  }
});

test("a run with no steps holds nothing", () => {
  const rows = alignSteps({ code: "", steps: [] }, FIXED, mapOf({ code: "" }, FIXED, [null, null, null, null, null]));
  assert.equal(rows.length, 3);
  assert.deepEqual(shownAt(rows, 0), { a: null, b: 0, heldA: true, heldB: false });
});

test("nodes match by op and mapped line, the k-th with the k-th, leaves by tensor name", () => {
  const a = {
    code: "w = p\ny = w * 2\ny = w * 2\n",
    nodes: [
      { id: 0, op: "AccumulateGrad", line: 2, tensor: "w" },
      { id: 1, op: "MulBackward0", line: 2 },
      { id: 2, op: "MulBackward0", line: 3 },
    ],
  };
  const b = {
    code: "w = p\nw.grad = None\ny = w * 2\ny = w * 2\n",
    nodes: [
      { id: 0, op: "MulBackward0", line: 3 },
      { id: 1, op: "AccumulateGrad", line: 3, tensor: "w" },
      { id: 2, op: "MulBackward0", line: 4 },
    ],
  };
  const m = matchNodes(a, b, mapOf(a, b, [1, null, 2, 3]));
  assert.deepEqual([...m.aToB], [[0, 1], [1, 0], [2, 2]]);
});

test("a node on a line the fix removed matches nothing", () => {
  const a = { code: "keep\ngone\n", nodes: [{ id: 0, op: "MulBackward0", line: 2 }] };
  const b = { code: "keep\n", nodes: [{ id: 0, op: "MulBackward0", line: 1 }] };
  assert.equal(matchNodes(a, b, mapOf(a, b, [1])).aToB.size, 0);
});

test("the diff marks a node freed in one run and not the other, in both runs", () => {
  const c = compareTraces(ORIGINAL, FIXED, MAP);
  const d = c.diffAt(1);
  assert.deepEqual(d.a.get(0), new Set(["freed"]));
  assert.deepEqual(d.b.get(0), new Set(["freed"]));
  assert.deepEqual(d.freed, [{ a: 0, b: 0, freedIn: "a" }]);
  assert.equal(d.grads.length, 0);
});

test("the diff lists a .grad that differs and marks the leaf showing it", () => {
  const d = compareTraces(ORIGINAL, FIXED, MAP).diffAt(2);
  assert.deepEqual(d.grads, [{ name: "x", a: grad(6), b: grad(12) }]);
  assert.ok(d.a.get(1).has("grad"));
  assert.ok(d.b.get(1).has("grad"));
});

test("the diff reports an error raised in one run only", () => {
  const d = compareTraces(ORIGINAL, FIXED, MAP).diffAt(2);
  assert.equal(d.errors.a.type, "RuntimeError");
  assert.equal(d.errors.b, null);
  assert.ok(d.a.get(0).has("failed"));
});

test("identical steps have no differences", () => {
  const d = compareTraces(ORIGINAL, FIXED, MAP).diffAt(0);
  assert.equal(d.a.size + d.b.size + d.grads.length, 0);
  assert.deepEqual(d.errors, { a: null, b: null });
});

test("a node alive in one run whose match is not alive in the other is marked only", () => {
  const b = { ...FIXED, steps: [fwd(3, [{ id: 1 }], [x()]), ...FIXED.steps.slice(1)] };
  const d = compareTraces(ORIGINAL, b, MAP).diffAt(0);
  assert.deepEqual([...d.a], [[0, new Set(["only"])]]);
  assert.equal(d.b.size, 0);
});

test("an error of a held step is not reported again on later rows", () => {
  const a = ORIGINAL;
  const b = { ...FIXED, steps: [...FIXED.steps, fwd(3, [{ id: 0 }, { id: 1 }], [x(12)])] };
  const c = compareTraces(a, b, MAP);
  const last = c.rows.length - 1;
  assert.deepEqual(c.rows[last], { a: null, b: 3, kind: "forward" });
  assert.deepEqual(c.diffAt(last).errors, { a: null, b: null });
});
