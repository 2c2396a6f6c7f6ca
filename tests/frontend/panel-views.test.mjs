// Unit tests for what the side panels show at a step (frontend/panel-views.js).
// Run: node --test tests/frontend/
import { test } from "node:test";
import assert from "node:assert/strict";
import { buildModel } from "../../frontend/model.js";
import { fmtNumber } from "../../frontend/printing.js";
import { chartLabel, inspectorView, outputView, tensorsView } from "../../frontend/panel-views.js";
import { X7 as BASE } from "./fixtures.mjs";

// y = x**7 at x = 2, backward with retain_graph=True, then again without: dy/dx = 7·2⁶ = 448, and
// the second call accumulates 448 more (as plain PyTorch does); here the snippet also prints and
// warns, so the first backward step carries output.
const X7 = structuredClone(BASE);
X7.stdout = "y is 128.0\nafter\n";
X7.steps[1].stdout = "y is 128.0\n";
X7.steps[1].warnings = [{ category: "UserWarning", message: "careful", line: 4 }];
const grad = (v) => ({ shape: [], dtype: "float32", has_grad_fn: false, norm: v, values: v });
const x = (g) => ({ name: "x", shape: [], dtype: "float32", requires_grad: true, is_leaf: true, node: 1, ...(g ? { grad: grad(g) } : {}) });

test("tensors view: a grad is written by the first backward and accumulated by the second", () => {
  const m = buildModel(X7);
  const at = (i) => tensorsView(m, i).rows.map((r) => [r.key, r.grad, r.what]);
  assert.deepEqual(at(0), [["x", "None", ""]]);
  assert.deepEqual(at(1), [["x", fmtNumber(448), "written"]]);
  assert.deepEqual(at(2), [["x", fmtNumber(896), "accumulated"]]);
});

test("tensors view: rows past the limit are left out, the total is kept", () => {
  const many = structuredClone(X7);
  many.steps[0].tensors = ["a", "b", "c"].map((name) => ({ ...x(null), name, node: null }));
  const v = tensorsView(buildModel(many), 0, 2);
  assert.deepEqual(v.rows.map((r) => r.name), ["a", "b"]);
  assert.equal(v.total, 3);
});

test("tensors view: two tensors of one name get distinct keys", () => {
  const twice = structuredClone(X7);
  twice.steps[0].tensors = [x(null), { ...x(null), node: null }];
  assert.deepEqual(tensorsView(buildModel(twice), 0).rows.map((r) => r.key), ["x", "x#2"]);
});

test("tensors view: no step, no view", () => {
  assert.equal(tensorsView(buildModel({ ...X7, steps: [] }), 0), null);
});

test("inspector: a saved tensor is held, then retained by retain_graph=True, then freed", () => {
  const m = buildModel(X7);
  const state = (i) => Object.fromEntries(inspectorView(m, i, 0).saved.map((s) => [s.key, s.state]));
  assert.deepEqual(state(0), { exponent: "value", self: "held" });
  assert.deepEqual(state(1), { exponent: "value", self: "retained" });
  assert.deepEqual(state(2), { exponent: "value", self: "freed" });
  const v = inspectorView(m, 2, 0);
  assert.equal(v.title, "PowBackward0");
  assert.equal(v.facts.find((f) => f.key === "state now").value, "ran (#0), freed");
  assert.equal(v.grads, null); // an op node holding no tensor has no Gradient section
});

test("inspector: a leaf's Gradient section follows its .grad", () => {
  const m = buildModel(X7);
  assert.deepEqual(inspectorView(m, 0, 1).grads.map((g) => [g.key, g.none]), [["x", true]]);
  const g = inspectorView(m, 2, 1).grads[0];
  assert.equal(g.values, fmtNumber(896));
  assert.equal(g.norm, `norm ${fmtNumber(896)}`);
  assert.equal(inspectorView(m, 2, 1).savedNone, "AccumulateGrad saves nothing: nothing to free.");
});

test("inspector: nothing selected, or a node the trace does not have, shows no node", () => {
  const m = buildModel(X7);
  assert.equal(inspectorView(m, 0, null), null);
  assert.equal(inspectorView(m, 0, 7), null);
});

test("output: a step shows what was printed since the previous one, the last what came after", () => {
  const m = buildModel(X7);
  assert.deepEqual(outputView(m, 0), { note: "printed before this step", stdout: "(nothing)", empty: true, warnings: [], rest: "" });
  const one = outputView(m, 1);
  assert.equal(one.stdout, "y is 128.0\n");
  assert.deepEqual(one.warnings.map((w) => [w.head, w.message]), [["UserWarning (line 4): ", "careful"]]);
  assert.equal(one.rest, "");
  assert.equal(outputView(m, 2).rest, "after\n");
});

test("output: a run without steps shows all its output", () => {
  const v = outputView(buildModel({ ...X7, steps: [] }), 0);
  assert.equal(v.note, null);
  assert.equal(v.stdout, "y is 128.0\nafter\n");
});

test("chart label: bytes held now and the peak", () => {
  const m = buildModel(X7);
  assert.equal(chartLabel(m, 1, 4), "now 4 B · peak 4 B");
  assert.equal(chartLabel(m, 2, 4), "now 0 B · peak 4 B");
});

test("tensors view: a leaf relabelled when its name was rebound keeps its grad: neither written nor accumulated", () => {
  // x was rebound after the first backward: the next step lists the same leaf (its AccumulateGrad
  // node 1) unnamed, as "x (line 2)"; the second backward then accumulates into it
  const renamed = structuredClone(X7);
  renamed.steps[2].tensors = [{ ...x(896), name: "x (line 2)", unnamed: true, was: "x" }];
  const inserted = { ...structuredClone(renamed.steps[1]), index: 2, kind: "forward", tensors: [{ ...x(448), name: "x (line 2)", unnamed: true, was: "x" }] };
  renamed.steps.splice(2, 0, inserted);
  renamed.steps[3].index = 3;
  const m = buildModel(renamed);
  const at = (i) => tensorsView(m, i).rows.map((r) => [r.key, r.kind, r.what]);
  assert.deepEqual(at(2), [["x (line 2)", "old leaf", ""]]);
  assert.deepEqual(at(3), [["x (line 2)", "old leaf", "accumulated"]]);
});

test("inspector: a node's saved bytes count each storage once", () => {
  const both = structuredClone(X7);
  const saver = both.nodes.find((n) => (n.saved ?? []).some((s) => s.kind === "tensor"));
  saver.saved = [
    { name: "self", kind: "tensor", shape: [1000], dtype: "float32", bytes: 4000 },
    { name: "other", kind: "tensor", shape: [1000], dtype: "float32", bytes: 4000 },
  ];
  saver.saved_bytes = 4000;
  const v = inspectorView(buildModel(both), 0, saver.id);
  assert.equal(v.facts.find((f) => f.key === "saved bytes").value, "3.9 KB (each storage counted once)");
});
