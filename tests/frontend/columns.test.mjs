// Unit tests for frontend/columns.js: a version-4 trace (tables as columns, no step.edges) reads
// as the version-3 trace it was written from, and every reader of a trace gets the same from both.
// Run: node --test tests/frontend/
import { readFileSync } from "node:fs";
import { test } from "node:test";
import assert from "node:assert/strict";
import { rowsOf } from "../../frontend/columns.js";
import { buildModel } from "../../frontend/model.js";
import { compareTraces, fixLineMap, matchNodes } from "../../frontend/align.js";
import { runSummary } from "../../frontend/run-status.js";
import * as fixtures from "./fixtures.mjs";

// ---------------------------------------------------------------- version 4, written here

// Each table's required fields and defaults, as gradstep/schema.py gives them (trace_tables.json is
// written from it by `make schema`, and checked by tests/trace/test_trace_copies.py).
const TABLES = JSON.parse(readFileSync(new URL("./trace_tables.json", import.meta.url), "utf8"));

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

/** Rows → columns, as a version-4 writer does: ids left out, a column no row needs left out
 * (`all`: written anyway; `nulls`: written as null). */
function table(rows, { required, defaults }, { all = false, nulls = false } = {}) {
  const out = {};
  for (const key of required) out[key] = rows.map((r) => r[key]);
  for (const [key, d] of Object.entries(defaults)) {
    const needed = rows.some((r) => r[key] !== undefined && !same(r[key], d));
    if (needed || all) out[key] = rows.map((r) => (r[key] === undefined ? d : r[key]));
    else if (nulls) out[key] = null;
  }
  return out;
}

function columnsOf(v3, options) {
  (v3.nodes ?? []).forEach((n, i) => assert.equal(n.id, i, "a v3 node's id is its position"));
  return {
    ...v3,
    version: 4,
    nodes: table(v3.nodes ?? [], TABLES.nodes, options),
    steps: (v3.steps ?? []).map(({ edges, ...s }) => ({
      ...s,
      nodes: table(s.nodes ?? [], TABLES.states, options),
      tensors: table(s.tensors ?? [], TABLES.tensors, options),
    })),
  };
}

/** Every field of every row, its default where absent; each step's edges ([] when absent). */
function withDefaults(trace) {
  const fill = (rows, { defaults }) => (rows ?? []).map((r) => ({ ...structuredClone(defaults), ...r }));
  return {
    ...trace,
    version: undefined,
    nodes: fill(trace.nodes, TABLES.nodes),
    steps: (trace.steps ?? []).map((s) => ({
      ...s,
      nodes: fill(s.nodes, TABLES.states),
      tensors: fill(s.tensors, TABLES.tensors),
      edges: s.edges ?? [],
    })),
  };
}

/** What the views read of a model: everything but its closures, every step read. */
function snapshot(model) {
  const { step, gradChanges, trace, ...rest } = model;
  return {
    ...rest,
    trace: { ...trace, version: undefined },
    read: model.steps.map((_, i) => model.step(i)),
    changes: model.steps.map((_, i) => model.gradChanges(i)),
  };
}

// ---------------------------------------------------------------- a version-3 trace

const grad = (values, extra = {}) => ({ shape: [2], dtype: "float32", has_grad_fn: false, norm: 1.5, values, ...extra });
const tensor = (name, node, extra = {}) => ({ name, shape: [2], dtype: "float32", requires_grad: true, is_leaf: true, node, ...extra });

// y = x * x (one tensor used twice: `next` repeats), s = y.sum() in a module, a node the tracer
// could not read, a backward with create_graph (a grad_graph node), then one that fails.
const V3 = {
  version: 3,
  status: "error",
  error: { type: "RuntimeError", message: "Trying to backward through the graph a second time", line: 6 },
  code: "import torch\nx = torch.ones(2, requires_grad=True)\ny = x * x\ns = m(y).sum()\ns.backward(create_graph=True)\ns.backward()\n",
  nodes: [
    { id: 0, op: "MulBackward0", step: 0, seq: 0, line: 3, next: [1, 1], saved: [
      { name: "other", kind: "tensor", shape: [2], dtype: "float32", bytes: 8, of: "x" },
      { name: "self", kind: "tensor", shape: [2], dtype: "float32", bytes: 8, of: "x" },
    ] },
    { id: 1, op: "AccumulateGrad", step: 0, line: 3, tensor: "x" },
    { id: 2, op: "SumBackward0", step: 1, seq: 2, line: 4, module: "m", next: [3], saved: [{ name: "self_sym_sizes", kind: "value", value: [2] }] },
    { id: 3, op: "OddBackward", step: 1, seq: 1, line: 4, module: "m.inner", next: [0], unreadable: "torch cannot describe this op" },
    { id: 4, op: "AccumulateGrad", step: 1 },
    { id: 5, op: "MulBackward0", step: 2, seq: 3, line: 5, next: [1, 1], grad_graph: true, saved: [{ name: "self", kind: "tensor", shape: [2], dtype: "float32", bytes: 8 }] },
  ],
  steps: [
    { index: 0, kind: "forward", line: 3, saved_bytes: 8,
      nodes: [{ id: 0, vars: ["y"] }, { id: 1 }], edges: [[0, 1], [0, 1]],
      tensors: [tensor("x", 1)] },
    { index: 1, kind: "forward", line: 4, saved_bytes: 8,
      nodes: [{ id: 0, vars: ["y"] }, { id: 1 }, { id: 2, vars: ["s"] }, { id: 3 }, { id: 4, vars: ["w", "w2"] }],
      edges: [[2, 3], [3, 0]],
      tensors: [tensor("x", 1), tensor("w", 4, { requires_grad: false }), tensor("y", 0, { is_leaf: false, retains_grad: true })] },
    { index: 2, kind: "backward", line: 5, api: "Tensor.backward", retain_graph: true, create_graph: true, saved_bytes: 16,
      nodes: [
        { id: 0, executed: true, order: 2, vars: ["y"] }, { id: 1, executed: true, order: 3 },
        { id: 2, executed: true, order: 0, vars: ["s"] }, { id: 3, executed: true, order: 1, stale: true, stale_saved: ["self"] },
        { id: 4, vars: ["w", "w2"] }, { id: 5 },
      ],
      edges: [[5, 1], [5, 1]],
      tensors: [tensor("x", 1, { grad: grad([2, 2], { has_grad_fn: true }) }), tensor("w", 4),
        tensor("y", 0, { is_leaf: false, retains_grad: true, grad: grad([1, 1]) })] },
    { index: 3, kind: "backward", line: 6, api: "Tensor.backward", retain_graph: false, create_graph: false,
      error: { type: "RuntimeError", message: "Trying to backward through the graph a second time", line: 6 },
      nodes: [
        { id: 0, freed: true, failed: true, order: 2, vars: ["y"] }, { id: 1 },
        { id: 2, freed: true, executed: true, order: 0, vars: ["s"] }, { id: 3, freed: true, executed: true, order: 1, stale: true, stale_saved: ["self"] },
        { id: 4, vars: ["w", "w2"] }, { id: 5, dropped: true },
      ],
      tensors: [tensor("x", 1, { grad: grad([2, 2], { has_grad_fn: true }) }), tensor("w", 4),
        tensor("y", 0, { is_leaf: false, retains_grad: true, grad: grad([2, 2]) })] },
  ],
  diagnoses: [{ kind: "backward_through_freed_graph", severity: "error", line: 6, message: "…", fixes: [] }],
};

// ---------------------------------------------------------------- rows

test("every field of the hand-written trace is a field of the schema", () => {
  const known = (t, extra = []) => new Set([...extra, ...t.required, ...Object.keys(t.defaults)]);
  const nodes = known(TABLES.nodes, ["id"]), states = known(TABLES.states), tensors = known(TABLES.tensors);
  const unknown = (rows, fields) => rows.flatMap((r) => Object.keys(r).filter((k) => !fields.has(k)));
  assert.deepEqual(unknown(V3.nodes, nodes), []);
  for (const s of V3.steps) {
    assert.deepEqual(unknown(s.nodes, states), []);
    assert.deepEqual(unknown(s.tensors, tensors), []);
  }
});

test("a version-4 trace reads back as the version-3 trace it was written from", () => {
  const v4 = columnsOf(V3);
  assert.ok(!Array.isArray(v4.nodes) && !("id" in v4.nodes) && !("file" in v4.nodes), "the helper wrote columns");
  assert.ok(v4.steps.every((s) => !("edges" in s)));
  const before = structuredClone(v4);
  const rows = rowsOf(v4);
  assert.deepEqual(v4, before, "the input is not changed");
  assert.equal(rows.version, 4);
  assert.deepEqual(withDefaults(rows), withDefaults(V3));
  // the derived edges are the recorded ones, repeats and order kept
  assert.deepEqual(rows.steps.map((s) => s.edges), V3.steps.map((s) => s.edges ?? []));
  assert.deepEqual(rows.steps[0].edges, [[0, 1], [0, 1]]);
  // every column written, or an unneeded one written as null: the same rows
  assert.deepEqual(rowsOf(columnsOf(V3, { all: true })), rows);
  assert.deepEqual(rowsOf(columnsOf(V3, { nulls: true })), rows);
});

test("rows carry the fields not at their default, as the tracer writes them", () => {
  const rows = rowsOf(columnsOf(V3, { all: true }));
  assert.deepEqual(rows.nodes, V3.nodes);
  rows.steps.forEach((s, i) => {
    assert.deepEqual(s.nodes, V3.steps[i].nodes);
    assert.deepEqual(s.tensors, V3.steps[i].tensors);
  });
  // a leaf's absent vars reads as its tensor's name; an explicit [] would not
  const m = buildModel(columnsOf(V3, { all: true }));
  assert.deepEqual(m.step(0).state.get(1).vars, ["x"]);
});

test("a version-3 trace (or one already read) is returned as it is", () => {
  assert.equal(rowsOf(V3), V3);
  assert.equal(rowsOf(fixtures.X7), fixtures.X7);
  const rows = rowsOf(columnsOf(V3));
  assert.equal(rowsOf(rows), rows);
  // a v3 step without edges has none: nothing is derived for it
  const noEdges = { ...V3, steps: V3.steps.map(({ edges, ...s }) => s) };
  assert.equal(rowsOf(noEdges), noEdges);
});

test("an absent table has no rows", () => {
  const empty = rowsOf({ version: 4, status: "ok", nodes: {}, steps: [] });
  assert.deepEqual(empty.nodes, []);
  assert.deepEqual(buildModel({ version: 4, status: "ok", nodes: {}, steps: [] }).nodes, []);
  assert.deepEqual(rowsOf({ version: 4, status: "ok" }).nodes, []);
  assert.match(runSummary(rowsOf({ version: 4, status: "ok", nodes: {}, steps: [] }), 5)[1], / · 0 steps · 0 nodes$/);
  const bare = rowsOf({ version: 4, status: "ok", nodes: { op: ["AccumulateGrad"], step: [0] }, steps: [{ index: 0, kind: "forward" }] });
  assert.deepEqual(bare.nodes, [{ id: 0, op: "AccumulateGrad", step: 0 }]);
  assert.deepEqual(bare.steps[0], { index: 0, kind: "forward", nodes: [], tensors: [], edges: [] });
});

// ---------------------------------------------------------------- readers

test("the model of a version-4 trace is the model of its version-3 rows", () => {
  assert.deepEqual(snapshot(buildModel(columnsOf(V3))), snapshot(buildModel(V3)));
  assert.deepEqual(snapshot(buildModel(columnsOf(V3, { all: true }))), snapshot(buildModel(V3)));
  const m = buildModel(columnsOf(V3));
  assert.deepEqual(m.steps.map((s) => s.added), V3.steps.map((s) => s.edges ?? []));
  assert.equal(m.nodes[5].gradGraph, true);
  assert.equal(m.nodes[3].unreadable, "torch cannot describe this op");
  assert.deepEqual(m.step(3).dropped, [5]);
});

test("every fixture trace draws the same from its version-4 columns", () => {
  for (const [name, trace] of Object.entries(fixtures)) {
    assert.deepEqual(snapshot(buildModel(columnsOf(trace))), snapshot(buildModel(trace)), name);
  }
});

test("the side-by-side view lines up version-4 traces as their rows", () => {
  const fixed = structuredClone(V3);
  fixed.steps[3].nodes[0] = { id: 0, executed: true, order: 2, vars: ["y"] };
  delete fixed.steps[3].error;
  const map = fixLineMap(V3.code, { code: V3.code, source_lines: [1, 2, 3, 4, 5, 6] });
  const a = compareTraces(V3, fixed, map);
  const b = compareTraces(columnsOf(V3), columnsOf(fixed), map);
  assert.deepEqual(b.rows, a.rows);
  assert.deepEqual(b.nodes, a.nodes);
  assert.equal(a.nodes.aToB.size, 6);
  for (let r = 0; r < a.rows.length; r++) assert.deepEqual(b.diffAt(r), a.diffAt(r));
  assert.deepEqual(matchNodes(columnsOf(V3), fixed, map), a.nodes);
});
