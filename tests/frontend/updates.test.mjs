// Unit tests for update steps (an optimizer call) as the page says them (frontend/updates.js,
// and the tensors panel and step titles that read them).
// Run: node --test tests/frontend/
import { test } from "node:test";
import assert from "node:assert/strict";
import { buildModel, stepTitle } from "../../frontend/model.js";
import { fmtNumber } from "../../frontend/printing.js";
import { tensorsView } from "../../frontend/panel-views.js";
import { paramChange, startsIteration, updateTitle, updateWord } from "../../frontend/updates.js";
import { X7 } from "./fixtures.mjs";

const x = { name: "x", shape: [], dtype: "float32", requires_grad: true, is_leaf: true, node: 1 };

// x**7 with two backward calls (fixtures), then a zero_grad that set x.grad to None and an SGD step
function withUpdates() {
  const t = structuredClone(X7);
  t.steps.push(
    { kind: "update", line: 6, index: 3, iteration: 2, nodes: [{ id: 0, freed: true }, { id: 1 }], tensors: [x],
      update: { op: "zero_grad", of_class: "SGD", set_to_none: true, params: [{ name: "x", grad: "set_to_none" }] } },
    { kind: "update", line: 7, index: 4, iteration: 2, nodes: [{ id: 0, freed: true }, { id: 1 }], tensors: [x],
      update: { op: "step", of_class: "SGD", lr_before: [0.1], lr_after: [0.1], params: [{ name: "x", updated: true, delta_norm: 89.6 }] } },
  );
  return t;
}

test("an update step reads back with its update and iteration; absent, they are null", () => {
  const m = buildModel(withUpdates());
  assert.equal(m.steps[3].update.op, "zero_grad");
  assert.equal(m.steps[3].iteration, 2);
  assert.equal(m.steps[0].iteration, null);
  assert.equal(m.steps[0].update, null);
});

test("an update step is no engine call: nothing flows, nothing is retained", () => {
  const m = buildModel(withUpdates());
  assert.equal(m.step(3).isCall, false);
  assert.equal(m.step(1).isCall, true);
});

test("an update step's chip word and title name the call", () => {
  const m = buildModel(withUpdates());
  assert.deepEqual(m.steps.slice(3).map(updateWord), ["zero_grad", "step"]);
  assert.equal(stepTitle(m.steps[3]), "line 6 · SGD.zero_grad()");
  assert.equal(stepTitle(m.steps[4]), "line 7 · SGD.step()");
  assert.equal(updateTitle({ update: { op: "clip_grad_norm", max_norm: 1 } }), `clip_grad_norm_(max_norm=${fmtNumber(1)})`);
});

test("what an update did to a parameter, in the tensors panel", () => {
  const m = buildModel(withUpdates());
  const row = (i) => tensorsView(m, i).rows.map((r) => [r.name, r.grad, r.what]);
  assert.deepEqual(row(3), [["x", "None", ".grad → None"]]);
  assert.deepEqual(row(4), [["x", "None", `updated by ‖${fmtNumber(89.6)}‖`]]);
});

test("each kind of change to a parameter is said", () => {
  assert.equal(paramChange({ grad: "zeroed" }), ".grad zeroed");
  assert.equal(paramChange({ grad: "clipped", grad_norm_before: 2, grad_norm_after: 1 }), `.grad clipped ‖${fmtNumber(2)}‖ → ‖${fmtNumber(1)}‖`);
  assert.equal(paramChange({ updated: false, delta_norm: 0 }), "not updated");
  assert.equal(paramChange({}), "");
});

test("an iteration's label goes on its first step only", () => {
  const steps = [{ iteration: null }, { iteration: 1 }, { iteration: 1 }, { iteration: 2 }, { iteration: null }];
  assert.deepEqual(steps.map((_, i) => startsIteration(steps, i)), [false, true, false, true, false]);
});
