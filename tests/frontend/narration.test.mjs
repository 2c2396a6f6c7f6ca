// Unit tests for the pure parts of the narration (frontend/narration.js) and of the
// fix preview (frontend/diagnoses.js).
// Run: node --test tests/frontend/
import { test } from "node:test";
import assert from "node:assert/strict";
import { narrationSegments, linkTarget, codeSpans, gradChangeRows } from "../../frontend/narration.js";
import { buildModel } from "../../frontend/model.js";

const join = (segs) => segs.map((s) => s.text).join("");

test("segments keep the whole text and cut it at each link", () => {
  const text = "PowBackward0 freed its saved x; x.grad is 448.";
  const links = [{ start: 0, end: 12, node: 0 }, { start: 32, end: 38, tensor: "x" }];
  const segs = narrationSegments(text, links);
  assert.equal(join(segs), text);
  assert.deepEqual(segs.filter((s) => s.link).map((s) => [s.text, s.link]), [
    ["PowBackward0", { node: 0, tensor: null }],
    ["x.grad", { node: null, tensor: "x" }],
  ]);
});

test("links out of order are applied in text order", () => {
  const segs = narrationSegments("a b c", [{ start: 4, end: 5, node: 2 }, { start: 0, end: 1, node: 1 }]);
  assert.deepEqual(segs.map((s) => s.text), ["a", " b ", "c"]);
  assert.deepEqual(segs.filter((s) => s.link).map((s) => s.link.node), [1, 2]);
});

test("bad spans are ignored and their text stays", () => {
  const text = "abcdef";
  const links = [
    { start: -1, end: 2, node: 0 },
    { start: 2, end: 99, node: 0 },
    { start: 3, end: 3, node: 0 },
    { start: 1, end: 2 }, // names nothing
    { start: 1.5, end: 2, node: 0 },
    { start: 0, end: 4, node: 1 },
    { start: 2, end: 5, node: 2 }, // overlaps the previous
  ];
  const segs = narrationSegments(text, links);
  assert.equal(join(segs), text);
  assert.deepEqual(segs.filter((s) => s.link).map((s) => s.link.node), [1]);
});

test("no explanation gives one empty plain segment", () => {
  assert.deepEqual(narrationSegments("", []), [{ text: "", link: null }]);
});

test("a tensor link points at the node that holds its .grad at that step", () => {
  const model = buildModel({
    status: "ok",
    nodes: [{ id: 0, op: "MulBackward0", step: 0, next: [1] }, { id: 1, op: "AccumulateGrad", step: 0, tensor: "w" }],
    steps: [{ index: 0, kind: "forward", line: 2, nodes: [{ id: 0 }, { id: 1 }], tensors: [{ name: "w", node: 1 }] }],
  });
  const step = model.step(0);
  assert.equal(linkTarget(model, step, { node: null, tensor: "w" }), 1);
  assert.equal(linkTarget(model, step, { node: 0, tensor: null }), 0);
  assert.equal(linkTarget(model, step, { node: 7, tensor: null }), null);
  assert.equal(linkTarget(model, step, { node: null, tensor: "nope" }), null);
});

test("link offsets count code points, as the server's Python strings do", () => {
  const text = "𝑥 → PowBackward0 ran";
  // in Python, "PowBackward0" starts at 4 ("𝑥", " ", "→", " ")
  const segs = narrationSegments(text, [{ start: 4, end: 16, node: 0 }]);
  assert.equal(join(segs), text);
  assert.deepEqual(segs.filter((s) => s.link).map((s) => s.text), ["PowBackward0"]);
});

test("backticked text becomes code spans and an unpaired backtick stays text", () => {
  assert.deepEqual(codeSpans("`y.backward()` (line 17) ran"), [
    { text: "y.backward()", code: true },
    { text: " (line 17) ran", code: false },
  ]);
  assert.deepEqual(codeSpans("a ` b"), [{ text: "a ` b", code: false }]);
});

test("the full list of .grad changes: each tensor whose .grad the step changed, from → to", async () => {
  const { X7 } = await import("./fixtures.mjs");
  const { fmtNumber } = await import("../../frontend/printing.js");
  const m = buildModel(X7);
  assert.deepEqual(gradChangeRows(m, 0), []);
  assert.deepEqual(gradChangeRows(m, 1), [{ name: "x", node: 1, from: "None", to: fmtNumber(448) }]);
  assert.deepEqual(gradChangeRows(m, 2), [{ name: "x", node: 1, from: fmtNumber(448), to: fmtNumber(896) }]);
});
