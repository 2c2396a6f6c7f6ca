// Unit tests for the gradient-flow chart's data (frontend/grad-flow.js): which modules are rows,
// how a row is flagged, and what earlier calls it is drawn beside. The norms themselves are
// module-stats.js's, held to plain torch by tests/trace/test_module_stats.py.
// Run: node --test tests/frontend/
import { test } from "node:test";
import assert from "node:assert/strict";
import { buildModel } from "../../frontend/model.js";
import { moduleStats } from "../../frontend/module-stats.js";
import {
  EXPLODING, VANISHING, callAt, callSteps, defaultLevel, flowLevels, gradFlowView, logDomain, logPosition, sharedPrefix, sparkline,
} from "../../frontend/grad-flow.js";

// net.a.0 → net.a.1 → net.b, one weight each (and `own`: a parameter of net.a itself)
function trace(calls, { own = false } = {}) {
  const params = ["net.a.0.weight", "net.a.1.weight", "net.b.weight", ...(own ? ["net.a.scale"] : [])];
  const nodes = [
    { id: 0, op: "MmBackward0", step: 0, line: 3, module: "net.a.0", next: [1] },
    { id: 1, op: "AccumulateGrad", step: 0, line: 3, tensor: "net.a.0.weight" },
    { id: 2, op: "MmBackward0", step: 0, line: 3, module: "net.a.1", next: [3, 0] },
    { id: 3, op: "AccumulateGrad", step: 0, line: 3, tensor: "net.a.1.weight" },
    { id: 4, op: "MmBackward0", step: 0, line: 3, module: "net.b", next: [5, 2] },
    { id: 5, op: "AccumulateGrad", step: 0, line: 3, tensor: "net.b.weight" },
  ];
  if (own) nodes.push({ id: 6, op: "AccumulateGrad", step: 0, line: 3, tensor: "net.a.scale" });
  const tensor = (name, i, norm) => ({
    name, shape: [2], dtype: "float32", requires_grad: true, is_leaf: true, node: nodes.find((n) => n.tensor === name).id,
    ...(norm === undefined ? {} : { grad: { shape: [2], dtype: "float32", has_grad_fn: false, norm, values: null } }),
  });
  const steps = [];
  let grads = {};
  for (const norms of calls) {
    steps.push({ kind: "forward", line: 3, nodes: nodes.map((n) => ({ id: n.id })), tensors: params.map((p, i) => tensor(p, i, grads[p])), edges: [] });
    grads = Object.fromEntries(params.map((p, i) => [p, norms[i]]));
    steps.push({
      kind: "backward", line: 4, api: "Tensor.backward", retain_graph: false, create_graph: false, gradient: false,
      nodes: nodes.map((n) => ({ id: n.id, executed: true })), tensors: params.map((p, i) => tensor(p, i, grads[p])), edges: [],
    });
  }
  return { status: "ok", error: null, stdout: "", code: "", nodes, steps };
}

test("levels: the top module, then each split into its submodules holding parameters, in forward order", () => {
  const m = buildModel(trace([[3, 4, 1]]));
  assert.deepEqual(flowLevels(m), [["net"], ["net.a", "net.b"], ["net.a.0", "net.a.1", "net.b"]]);
});

test("levels: a module with a parameter of its own besides its submodules' is not split", () => {
  const m = buildModel(trace([[3, 4, 1, 2]], { own: true }));
  assert.deepEqual(flowLevels(m).at(-1), ["net.a", "net.b"]);
});

test("default level: the finest whose rows stay under the limit", () => {
  const levels = flowLevels(buildModel(trace([[3, 4, 1]])));
  assert.equal(defaultLevel(levels), 2);
  assert.equal(defaultLevel(levels, 2), 1);
});

test("rows: each module's norm is module-stats' norm of its parameters' .grad", () => {
  const m = buildModel(trace([[3, 4, 1]]));
  const v = gradFlowView(m, 1, ["net.a", "net.b"]);
  assert.deepEqual(v.rows.map((r) => [r.key, r.norm]), [["net.a", 5], ["net.b", 1]]);
  assert.equal(v.rows[0].norm, moduleStats(m, 1).get("net.a").gradNorm);
});

test("rows: a norm below VANISHING × the largest is vanishing", () => {
  const m = buildModel(trace([[1, VANISHING / 10, 1]]));
  const v = gradFlowView(m, 1, ["net.a.0", "net.a.1", "net.b"]);
  assert.deepEqual(v.rows.map((r) => r.status), ["ok", "vanishing", "ok"]);
});

test("rows: a zero norm is vanishing", () => {
  const m = buildModel(trace([[1, 0, 1]]));
  assert.equal(gradFlowView(m, 1, ["net.a.0", "net.a.1", "net.b"]).rows[1].status, "vanishing");
});

test("rows: a norm above EXPLODING × the median is exploding", () => {
  const m = buildModel(trace([[1, 1, EXPLODING * 10]]));
  assert.deepEqual(gradFlowView(m, 1, ["net.a.0", "net.a.1", "net.b"]).rows.map((r) => r.status), ["ok", "ok", "exploding"]);
});

test("rows: an ordinary norm far above a vanishing chain's median is not exploding", () => {
  const m = buildModel(trace([[1e-12, 1e-6, 1]])); // median 1e-6: 1 is 1e6 × it
  assert.deepEqual(gradFlowView(m, 1, ["net.a.0", "net.a.1", "net.b"]).rows.map((r) => r.status), ["vanishing", "ok", "ok"]);
});

test("rows: a .grad holding nan or inf (norm null) makes its module non-finite, its parents too", () => {
  const m = buildModel(trace([[null, 1, 1]]));
  assert.deepEqual(gradFlowView(m, 1, ["net.a.0", "net.a.1", "net.b"]).rows.map((r) => r.status), ["nonfinite", "ok", "ok"]);
  assert.equal(gradFlowView(m, 1, ["net.a", "net.b"]).rows[0].status, "nonfinite");
});

test("rows: a module without a .grad says so", () => {
  const m = buildModel(trace([[1, undefined, 1]]));
  assert.equal(gradFlowView(m, 1, ["net.a.0", "net.a.1", "net.b"]).rows[1].status, "none");
});

test("calls: a step shows the latest call at or before it; none before the first", () => {
  const m = buildModel(trace([[1, 1, 1], [2, 2, 2]]));
  assert.deepEqual(callSteps(m), [1, 3]);
  assert.equal(callAt([1, 3], 0), null);
  assert.equal(callAt([1, 3], 2), 1);
  assert.equal(gradFlowView(m, 0, ["net.b"]), null);
  assert.equal(gradFlowView(m, 2, ["net.b"]).call, 1);
});

test("history: each row carries the same module at the earlier calls, the previous one last", () => {
  const m = buildModel(trace([[1, 1, 4], [1, 1, 2], [1, 1, 1]]));
  const v = gradFlowView(m, 5, ["net.a.0", "net.a.1", "net.b"]);
  assert.deepEqual(v.earlier, [1, 3]);
  const b = v.rows[2];
  assert.deepEqual(b.history.map((h) => [h.call, h.norm]), [[1, 4], [3, 2]]);
  assert.equal(b.prev, 2);
  assert.equal(gradFlowView(m, 5, ["net.b"], { history: 1 }).earlier.length, 1);
});

test("log axis: whole decades around the norms now and before; positions on it", () => {
  const m = buildModel(trace([[0.05, 1, 1], [1, 1, 30]]));
  const v = gradFlowView(m, 3, ["net.a.0", "net.a.1", "net.b"]);
  const d = logDomain(v);
  assert.deepEqual([d.lo, d.hi], [0.01, 100]);
  assert.equal(logPosition(1, d.lo, d.hi), 0.5);
  assert.equal(logPosition(0, d.lo, d.hi), 0);
  assert.equal(logPosition(1e6, d.lo, d.hi), 1);
});

test("names: the module path every row shares is said once", () => {
  assert.deepEqual([...sharedPrefix(["model.h.0", "model.h.1", "model.wte"]).names.values()], ["h.0", "h.1", "wte"]);
  assert.equal(sharedPrefix(["model.h.0", "model.h.1"]).prefix, "model.h");
  assert.deepEqual([...sharedPrefix(["model"]).names.values()], ["model"]);
});

test("sparkline: the earlier calls then this one on the bars' log axis; a missing norm breaks the line", () => {
  const row = { status: "ok", norm: 1, history: [{ norm: 100 }, { norm: null }, { norm: 10 }] };
  const s = sparkline(row, 1, 100, 30, 10);
  assert.deepEqual(s.runs, ["0.0,0.0", "20.0,5.0 30.0,10.0"]);
  assert.deepEqual(s.now, [30, 10]);
  assert.equal(sparkline({ ...row, status: "nonfinite" }, 1, 100, 30, 10).now, null);
});

test("history: an earlier call not ready yet is left out", () => {
  const m = buildModel(trace([[1, 1, 4], [1, 1, 2], [1, 1, 1]]));
  const v = gradFlowView(m, 5, ["net.b"], { ready: (c) => c !== 1 });
  assert.deepEqual(v.earlier, [3]);
  assert.deepEqual(v.rows[0].history.map((h) => h.norm), [2]);
});
