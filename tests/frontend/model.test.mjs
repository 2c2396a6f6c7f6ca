// Unit tests for the pure parts of the front end: the view model (frontend/model.js), the
// layout (frontend/layout.js).
// Run: node --test tests/frontend/
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  buildModel, diffSteps, fmtGrad, fmtNumber, fmtValues, initialExpanded, visibleGraph, nodeStatus, stepTitle,
  representative, groupStatus, subValues,
} from "../../frontend/model.js";
import { layoutGraph, nodeSize, serializeLayout, deserializeLayout } from "../../frontend/layout.js";
import { X7 } from "./fixtures.mjs";

// A second backward through a shared trunk that fails at the freed trunk, after
// its own head already ran (the partial-gradients snippet, cut down).
const PARTIAL = {
  version: 1,
  status: "error",
  error: { type: "RuntimeError", message: "Trying to backward through the graph a second time", line: 9 },
  nodes: [
    { id: 0, op: "TanhBackward0", step: 0, line: 5, saved: [{ name: "result", kind: "tensor", shape: [3], dtype: "float32", bytes: 12 }], next: [1] },
    { id: 1, op: "AccumulateGrad", step: 0, line: 5, tensor: "w" },
    { id: 2, op: "SumBackward0", step: 1, line: 6, saved: [{ name: "self_sym_sizes", kind: "value", value: [3] }], next: [0] },
    { id: 3, op: "MulBackward0", step: 2, line: 7, saved: [{ name: "other", kind: "tensor", shape: [3], dtype: "float32", bytes: 12, of: "w2" }], next: [0, 4] },
    { id: 4, op: "AccumulateGrad", step: 2, line: 7, tensor: "w2" },
  ],
  steps: [
    { kind: "forward", line: 5, index: 0, nodes: [{ id: 0, vars: ["trunk"] }, { id: 1 }], edges: [[0, 1]], saved_bytes: 12,
      tensors: [{ name: "w", shape: [3], dtype: "float32", requires_grad: true, is_leaf: true, node: 1 }] },
    { kind: "forward", line: 6, index: 1, nodes: [{ id: 0, vars: ["trunk"] }, { id: 1 }, { id: 2, vars: ["loss1"] }], edges: [[2, 0]], saved_bytes: 12,
      tensors: [{ name: "w", shape: [3], dtype: "float32", requires_grad: true, is_leaf: true, node: 1 }] },
    { kind: "forward", line: 7, index: 2, nodes: [{ id: 0, vars: ["trunk"] }, { id: 1 }, { id: 2, vars: ["loss1"] }, { id: 3, vars: ["loss2"] }, { id: 4 }],
      edges: [[3, 0], [3, 4]], saved_bytes: 24,
      tensors: [
        { name: "w", shape: [3], dtype: "float32", requires_grad: true, is_leaf: true, node: 1 },
        { name: "w2", shape: [3], dtype: "float32", requires_grad: true, is_leaf: true, node: 4 },
      ] },
    { kind: "backward", line: 8, index: 3, api: "Tensor.backward", retain_graph: false, create_graph: false,
      nodes: [
        { id: 0, freed: true, executed: true, order: 1, vars: ["trunk"] }, { id: 1, executed: true, order: 2 },
        { id: 2, executed: true, order: 0, vars: ["loss1"] }, { id: 3, vars: ["loss2"] }, { id: 4 },
      ], saved_bytes: 12,
      tensors: [
        { name: "w", shape: [3], dtype: "float32", requires_grad: true, is_leaf: true, node: 1,
          grad: { shape: [3], dtype: "float32", has_grad_fn: false, norm: 1.0, values: [0.5, 0.5, 0.5] } },
        { name: "w2", shape: [3], dtype: "float32", requires_grad: true, is_leaf: true, node: 4 },
      ] },
    { kind: "backward", line: 9, index: 4, api: "Tensor.backward", retain_graph: false,
      error: { type: "RuntimeError", message: "Trying to backward through the graph a second time", line: 9 },
      nodes: [
        { id: 0, freed: true, failed: true, order: 2, vars: ["trunk"] }, { id: 1 },
        { id: 2, vars: ["loss1"] }, { id: 3, freed: true, executed: true, order: 0, vars: ["loss2"] }, { id: 4, executed: true, order: 1 },
      ],
      tensors: [
        { name: "w", shape: [3], dtype: "float32", requires_grad: true, is_leaf: true, node: 1,
          grad: { shape: [3], dtype: "float32", has_grad_fn: false, norm: 1.0, values: [0.5, 0.5, 0.5] } },
        { name: "w2", shape: [3], dtype: "float32", requires_grad: true, is_leaf: true, node: 4,
          grad: { shape: [3], dtype: "float32", has_grad_fn: false, norm: 0.2, values: [0.1, -0.1, 0.2] } },
      ] },
  ],
};

test("fmtGrad shows values of small grads as torch prints them, norm and shape of large ones, None when absent", () => {
  assert.equal(fmtGrad(null), "None");
  const scalar = { shape: [], dtype: "float32", values: 448.0, norm: 448, format: ["int"] };
  assert.equal(fmtGrad(scalar), fmtValues(448.0, "float32", ["int"]));
  const small = { shape: [2, 2], dtype: "float32", values: [[1, 2], [3, 4.5]], norm: 6, format: ["fixed"] };
  assert.equal(fmtGrad(small), fmtValues(small.values, "float32", ["fixed"]));
  assert.equal(fmtGrad({ shape: [8, 8], dtype: "float32", norm: 3.14159 }), `‖${fmtNumber(3.14159)}‖ 8×8`);
  const wide = { shape: [2, 4], dtype: "float32", values: [[1, 2, 3, 4], [5, 6, 7, 8]], norm: 1, format: ["int"] };
  assert.equal(fmtGrad(wide), `‖${fmtNumber(1)}‖ 2×4`);
});

test("fmtGrad prints in the mode the trace recorded, not one guessed from rounded values", () => {
  // torch printed 0.99999994 as 1.0000 (fixed); the trace rounded it to 1.0, an integer
  const grad = { shape: [], dtype: "float32", values: 1.0, norm: 1.0, format: ["fixed"] };
  assert.equal(fmtGrad(grad), fmtValues(1.0, "float32", ["fixed"]));
  assert.notEqual(fmtGrad(grad), fmtValues(1.0, "float32"));
});

test("defaults are applied to absent fields", () => {
  const m = buildModel(X7);
  assert.equal(m.nodes[1].isLeaf, true);
  assert.deepEqual(m.nodes[1].next, []);
  assert.deepEqual(m.nodes[1].saved, []);
  assert.equal(m.nodes[0].gradGraph, false);
  assert.equal(m.steps[2].savedBytes, 0);
  assert.equal(m.steps[0].repeat, 1);
  const s = m.step(0);
  assert.equal(s.state.get(0).freed, false);
  assert.equal(s.state.get(0).order, null);
});

test("an AccumulateGrad without vars goes by its table name", () => {
  const m = buildModel(X7);
  assert.deepEqual(m.step(0).state.get(1).vars, ["x"]);
  assert.deepEqual(m.step(0).state.get(0).vars, ["y"]);
});

test("freed comes from the step; a node that saved only values has no tensors to free", () => {
  const m = buildModel(X7);
  assert.equal(nodeStatus(m, m.step(1), 0).freed, false);
  assert.equal(nodeStatus(m, m.step(2), 0).freed, true);
  assert.equal(m.nodes[0].savedTensors.length, 1);
  assert.equal(m.nodes[1].savedTensors.length, 0);
  const p = buildModel(PARTIAL);
  assert.equal(p.nodes[2].savedTensors.length, 0, "SumBackward0 saves only sizes");
});

test("retained: ran in a retain_graph=True call and kept its saved tensors", () => {
  const m = buildModel(X7);
  assert.equal(nodeStatus(m, m.step(1), 0).retained, true);
  assert.equal(nodeStatus(m, m.step(2), 0).retained, false);
  assert.equal(nodeStatus(m, m.step(1), 1).retained, false, "AccumulateGrad saves nothing");
});

test("gradient flow is the edges between executed/failed nodes, in execution order", () => {
  const m = buildModel(PARTIAL);
  const s3 = m.step(3);
  assert.deepEqual(s3.flow.map((f) => [f.from, f.to]), [[2, 0], [0, 1]]);
  const s4 = m.step(4);
  assert.deepEqual(s4.order, [3, 4, 0]);
  assert.equal(s4.failed, 0);
  // gradient reaches the failed node, but none leaves it
  assert.deepEqual(s4.flow.map((f) => [f.from, f.to]), [[3, 0], [3, 4]]);
});

test("the whole graph of a step comes from the node table, not from step.edges", () => {
  const m = buildModel(PARTIAL);
  assert.equal(m.steps[3].added.length, 0);
  const vis = visibleGraph(m, new Set());
  const alive = [...vis.edges.values()].filter((e) => e.pairs.some(([a, b]) => m.step(3).state.has(a) && m.step(3).state.has(b)));
  assert.equal(alive.length, 4);
});

test("diff: freed nodes, written and accumulated grads with their delta", () => {
  const m = buildModel(X7);
  const d1 = diffSteps(m, 0, 1);
  assert.deepEqual(d1.freed, []);
  assert.equal(d1.grads.length, 1);
  assert.equal(d1.grads[0].accumulated, false);
  const d2 = diffSteps(m, 1, 2);
  assert.deepEqual(d2.freed, [0]);
  assert.equal(d2.grads[0].accumulated, true);
  assert.equal(d2.grads[0].delta, 448);
  assert.equal(d2.flow.length, 1);
  assert.equal(diffSteps(m, 2, 0).flow.length, 0, "jumping back animates no flow");
});

test("a failed call keeps the partial grads it wrote", () => {
  const m = buildModel(PARTIAL);
  const d = diffSteps(m, 3, 4);
  assert.deepEqual(d.grads.map((g) => g.name), ["w2"]);
  assert.equal(m.step(4).tensors.find((t) => t.name === "w").grad.values[0], 0.5);
});

test("subValues subtracts nested lists and refuses mismatched shapes", () => {
  assert.deepEqual(subValues([[3, 4]], [[1, 1]]), [[2, 3]]);
  assert.equal(subValues([1, 2], [1]), null);
  assert.equal(subValues(null, 1), null);
});

test("stale: first step that shows it gives the line that modified the tensor", () => {
  const t = structuredClone(X7);
  t.steps[1].nodes[0].stale = true;
  t.steps[1].nodes[0].stale_saved = ["self"];
  t.steps[2].nodes[0].stale = true;
  const m = buildModel(t);
  assert.equal(m.staleSince.get(0), 1);
  assert.deepEqual(m.step(1).state.get(0).staleSaved, ["self"]);
});

test("step titles name the call and its flags", () => {
  const m = buildModel(X7);
  assert.equal(stepTitle(m.steps[0]), "line 4 · forward");
  assert.equal(stepTitle(m.steps[1]), "line 5 · Tensor.backward(retain_graph=True)");
  const p = buildModel(PARTIAL);
  assert.match(stepTitle(p.steps[4]), /failed/);
});

// A model with modules: 3 blocks of 2 ops each under model.blocks.i, parameters
// found by name (AccumulateGrad has no module).
function modular(blocks = 3) {
  const nodes = [];
  let prev = null;
  for (let b = 0; b < blocks; b++) {
    const leaf = nodes.length;
    nodes.push({ id: leaf, op: "AccumulateGrad", step: 0, tensor: `model.blocks.${b}.weight` });
    const mul = nodes.length;
    nodes.push({ id: mul, op: "MulBackward0", step: 0, line: 5, module: `model.blocks.${b}`, next: prev === null ? [leaf] : [prev, leaf] });
    const relu = nodes.length;
    nodes.push({ id: relu, op: "ReluBackward0", step: 0, line: 5, module: `model.blocks.${b}.act`, next: [mul],
      saved: [{ name: "result", kind: "tensor", shape: [2], dtype: "float32", bytes: 8 }] });
    prev = relu;
  }
  const loss = nodes.length;
  nodes.push({ id: loss, op: "SumBackward0", step: 0, line: 6, next: [prev] });
  return {
    version: 1, status: "ok", nodes,
    steps: [{ kind: "forward", line: 5, index: 0, nodes: nodes.map((n) => ({ id: n.id })) },
      { kind: "backward", line: 7, index: 1, nodes: nodes.map((n, i) => ({ id: n.id, executed: true, order: nodes.length - 1 - i, freed: n.op === "ReluBackward0" })) }],
  };
}

test("module tree: every prefix is a group; parameters' leaves join their module by name", () => {
  const m = buildModel(modular());
  assert.deepEqual([...m.groups.keys()].sort(), ["model", "model.blocks", "model.blocks.0", "model.blocks.0.act", "model.blocks.1", "model.blocks.1.act", "model.blocks.2", "model.blocks.2.act"]);
  assert.equal(m.nodes[0].group, "model.blocks.0");
  assert.equal(m.nodes[0].module, null, "the trace's own module stays as it is");
  assert.equal(m.groups.get("model").size, 9);
});

test("initial expansion opens whole levels within the budget, chains open together", () => {
  const m = buildModel(modular(3));
  const all = initialExpanded(m, 1000);
  assert.equal(all.size, m.groups.size);
  const few = initialExpanded(m, 5);
  assert.deepEqual([...few].sort(), ["model", "model.blocks"], "model → model.blocks is a chain");
  assert.equal(representative(m, few, 2), "g:model.blocks.0");
  assert.equal(representative(m, all, 2), "n:2");
});

test("collapsed modules fold nodes and edges; group state aggregates members", () => {
  const m = buildModel(modular(3));
  const vis = visibleGraph(m, new Set(["model", "model.blocks"]));
  const keys = [...vis.items.keys()].sort();
  assert.deepEqual(keys, ["g:model.blocks.0", "g:model.blocks.1", "g:model.blocks.2", "n:9"]);
  assert.ok(vis.edges.has("g:model.blocks.0>g:model.blocks.1"));
  assert.ok(vis.edges.has("g:model.blocks.2>n:9"));
  const g = vis.items.get("g:model.blocks.1");
  const s = groupStatus(m, m.step(1), g.members);
  assert.equal(s.executed, 3);
  assert.equal(s.withTensors, 1);
  assert.equal(s.freed, 1);
});

test("a module whose parent is collapsed does not show, even if marked expanded", () => {
  const m = buildModel(modular(2));
  const vis = visibleGraph(m, new Set(["model.blocks.0"]));
  assert.deepEqual([...vis.items.keys()].sort(), ["g:model", "n:6"]);
  assert.equal(vis.frames.length, 0);
});

// ------------------------------------------------------------ layout and explanations

function layers(n, perLayer = 6) {
  // n identical blocks chained: the shape cache must lay out one and reuse it
  const nodes = [];
  let prev = null;
  for (let b = 0; b < n; b++) {
    const w = nodes.length;
    nodes.push({ id: w, op: "AccumulateGrad", step: 0, tensor: `net.layers.${b}.w` });
    let last = prev;
    for (let k = 0; k < perLayer; k++) {
      const id = nodes.length;
      const next = [];
      if (last !== null) next.push(last);
      if (k === 0) next.push(w);
      nodes.push({ id, op: k % 2 ? "MulBackward0" : "AddBackward0", step: 0, line: 3, module: `net.layers.${b}`, next,
        saved: k % 2 ? [{ name: "other", kind: "tensor", shape: [4], dtype: "float32", bytes: 16 }] : [] });
      last = id;
    }
    prev = last;
  }
  nodes.push({ id: nodes.length, op: "MeanBackward0", step: 0, line: 4, next: [prev] });
  return { version: 1, status: "ok", nodes, steps: [{ kind: "forward", line: 3, index: 0, nodes: nodes.map((x) => ({ id: x.id })) }] };
}

function overlaps(a, b) {
  return a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
}

test("every visible item gets a box, and boxes in one container do not overlap", () => {
  const m = buildModel(PARTIAL);
  const exp = initialExpanded(m);
  const vis = visibleGraph(m, exp);
  const l = layoutGraph(m, exp, vis);
  assert.equal(l.items.size, vis.items.size);
  const boxes = [...l.items.values()];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) assert.ok(!overlaps(boxes[i], boxes[j]));
});

test("inputs sit above the ops that use them (forward direction, top to bottom)", () => {
  const m = buildModel(X7);
  const exp = new Set();
  const l = layoutGraph(m, exp, visibleGraph(m, exp));
  assert.ok(l.items.get("n:1").y < l.items.get("n:0").y, "leaf x above PowBackward0");
});

test("sizes are stable over steps: leaf wide enough for its longest grad", () => {
  const m = buildModel(PARTIAL);
  const [w] = nodeSize(m, 4);
  assert.ok(w >= ("grad [0.1, -0.1, 0.2]".length * 7), `leaf width ${w}`);
});

test("expanded modules are frames that contain their children", () => {
  const m = buildModel(layers(3));
  const exp = new Set(["net", "net.layers", "net.layers.1"]);
  const vis = visibleGraph(m, exp);
  const l = layoutGraph(m, exp, vis);
  const frame = l.frames.get("net.layers.1");
  for (const item of vis.items.values()) {
    if (item.kind !== "node" || m.nodes[item.id].group !== "net.layers.1") continue;
    const b = l.items.get(item.key);
    assert.ok(b.x >= frame.x && b.y >= frame.y && b.x + b.w <= frame.x + frame.w && b.y + b.h <= frame.y + frame.h);
  }
});

test("identical blocks are laid out once; expanding one re-lays out only it and its ancestors", () => {
  const m = buildModel(layers(12));
  const cache = new Map();
  const all = new Set(m.groups.keys());
  const l = layoutGraph(m, all, visibleGraph(m, all), { cache });
  assert.equal(l.items.size, m.nodes.length);
  assert.ok(cache.shapes.size < 6, `distinct shapes laid out: ${cache.shapes.size}`);
  const collapsed = new Set(["net", "net.layers"]);
  const cache2 = new Map();
  layoutGraph(m, collapsed, visibleGraph(m, collapsed), { cache: cache2 });
  const one = new Set([...collapsed, "net.layers.4"]);
  const l2 = layoutGraph(m, one, visibleGraph(m, one), { cache: cache2 });
  assert.equal(l2.laidOut, 4, "net.layers.4, net.layers, net, root");
});

test("a layout survives the trip through the worker's message format", () => {
  const m = buildModel(X7);
  const l = layoutGraph(m, new Set(), visibleGraph(m, new Set()));
  const back = deserializeLayout(JSON.parse(JSON.stringify(serializeLayout(l))));
  assert.deepEqual([...back.items.keys()], [...l.items.keys()]);
  assert.equal(back.width, l.width);
});

// A recording of the user's own code (gradstep.record()): lines across files, `file` indexing `files`.
test("a recording's lines in other files are not lines of its code, and say their file", () => {
  const m = buildModel({
    version: 3,
    status: "ok",
    code: "with gradstep.record():\n    train()\n",
    files: [{ path: "main.py", code: "with gradstep.record():\n    train()\n" }, { path: "lib/train.py", code: null }],
    nodes: [
      { id: 0, op: "SumBackward0", step: 0, line: 2, file: 0, next: [] },
      { id: 1, op: "MulBackward0", step: 1, line: 25, file: 1, next: [0] },
    ],
    steps: [
      { kind: "forward", index: 0, line: 2, file: 0, nodes: [{ id: 0 }] },
      { kind: "backward", index: 1, line: 25, file: 1, api: "Tensor.backward", ran_lines: [3], ran_files: [1], nodes: [{ id: 0 }, { id: 1 }] },
    ],
  });
  assert.deepEqual(m.trace.files.map((f) => f.path), ["main.py", "lib/train.py"]);
  assert.equal(m.steps[0].line, 2);
  assert.equal(m.steps[1].line, null, "line 25 is not a line of `code`");
  assert.equal(m.steps[1].fileLine, 25);
  assert.equal(m.nodes[1].where, "lib/train.py:25");
  assert.deepEqual(m.steps[1].ranFiles, [1]);
  assert.match(stepTitle(m.steps[1]), /^lib\/train\.py:25 · Tensor\.backward/);
  assert.match(stepTitle(m.steps[0]), /^main\.py:2 · forward/);
});

test("a snippet's trace has no files, and its lines are lines of its code", () => {
  const m = buildModel(PARTIAL);
  assert.deepEqual(m.trace.files, []);
  assert.equal(m.steps[0].where, null);
  assert.equal(m.steps[0].line, m.steps[0].fileLine);
});
