// Unit tests of what a step shows on each graph item and edge (frontend/graph-signatures.js): the
// signatures that decide which elements a step repaints, and the status badge.
// Run: node --test tests/frontend/
import { test } from "node:test";
import assert from "node:assert/strict";
import { buildModel, visibleGraph, nodeStatus } from "../../frontend/model.js";
import { signatureCache, stepSignatures, statusBadge } from "../../frontend/graph-signatures.js";
import { X7 } from "./fixtures.mjs";

const model = buildModel(X7);
const vis = visibleGraph(model, new Set());
const POW = "n:0"; // PowBackward0, y.grad_fn
const LEAF = "n:1"; // x's AccumulateGrad
const [EDGE] = vis.edges.keys();

test("a node whose state changes between steps gets a new signature, and only then", () => {
  const [s0, s1, s2] = [0, 1, 2].map((i) => stepSignatures(model, vis, model.step(i)));
  assert.notEqual(s0.items.get(POW), s1.items.get(POW)); // ran, retained
  assert.notEqual(s1.items.get(POW), s2.items.get(POW)); // freed
  assert.notEqual(s1.items.get(LEAF), s2.items.get(LEAF)); // x.grad 448 → 896
  assert.equal(stepSignatures(model, vis, model.step(2)).items.get(POW), s2.items.get(POW));
});

test("gradient flows along the edge only in backward steps, and its signature says so", () => {
  const [s0, s1] = [0, 1].map((i) => stepSignatures(model, vis, model.step(i)));
  assert.equal(s0.flowKeys.size, 0);
  assert.deepEqual([...s1.flowKeys], [[EDGE, 0]]);
  assert.notEqual(s0.edges.get(EDGE), s1.edges.get(EDGE));
});

test("the badge says retained after retain_graph=True and freed after the last backward", () => {
  const n = model.nodes[0];
  const badge = (i) => statusBadge(model, model.step(i), n, nodeStatus(model, model.step(i), 0));
  assert.equal(badge(0), null);
  assert.equal(badge(1).text, "retained");
  assert.equal(badge(2).text, "freed");
});

test("signatures are computed once per step and visible graph", () => {
  const signatures = signatureCache();
  const step = model.step(1);
  assert.equal(signatures(model, vis, step), signatures(model, vis, step));
  const other = visibleGraph(model, new Set());
  assert.notEqual(signatures(model, other, step), signatures(model, vis, step));
});
