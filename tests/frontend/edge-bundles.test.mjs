// Edges from one item into many items of an expanded group drawn as one edge to the group's
// frame (model.js bundleEdges): shared weights feeding each iteration of an unrolled loop.
// Run: node --test tests/frontend/
import { test } from "node:test";
import assert from "node:assert/strict";
import { BUNDLE_OVER, buildModel, initialExpanded, openedAtStart, visibleGraph } from "../../frontend/model.js";
import { layoutGraph } from "../../frontend/layout.js";
import { stepSignatures } from "../../frontend/graph-signatures.js";

/** An RNN cell unrolled `steps` times: a weight leaf (cell.weight) feeds each step's first op; steps chain; a loss. */
function unrolled(steps, perStep = 6) {
  const nodes = [{ id: 0, op: "AccumulateGrad", step: 0, line: 2, tensor: "cell.weight", next: [] }];
  let prev = null;
  let seq = 1;
  for (let t = 1; t <= steps; t++) {
    for (let k = 0; k < perStep; k++) {
      const id = nodes.length;
      const next = k === 0 ? [0, ...(prev === null ? [] : [prev])] : [prev];
      nodes.push({ id, op: "MmBackward0", step: 0, line: 4, module: "cell", iteration: t, seq: seq++, next });
      prev = id;
    }
  }
  const loss = nodes.length;
  nodes.push({ id: loss, op: "MeanBackward0", step: 0, line: 5, seq: seq++, next: [prev] });
  const all = nodes.map((n) => ({ id: n.id }));
  // backward: every node runs, the loss first
  const ran = all.map((n) => ({ ...n, executed: true, order: loss - n.id }));
  return {
    version: 1, status: "ok", nodes,
    steps: [
      { kind: "forward", line: 4, index: 0, nodes: all },
      { kind: "backward", line: 6, index: 1, nodes: ran },
    ],
  };
}

function opened(m) {
  return openedAtStart(m, initialExpanded(m));
}

test("a weight feeding every iteration of an opened loop is one edge to the loop's frame", () => {
  const m = buildModel(unrolled(30));
  const exp = opened(m);
  assert.ok(exp.has("@1"), "the loop opens at its iteration boxes");
  const vis = visibleGraph(m, exp);
  const fromWeight = [...vis.edges.values()].filter((e) => e.from === "g:cell");
  assert.equal(fromWeight.length, 1);
  assert.equal(fromWeight[0].to, "f:@1");
  assert.equal(fromWeight[0].count, 30);
  // it stands for the node pairs of all 30
  assert.deepEqual(new Set(fromWeight[0].pairs.map(([a]) => a)), new Set([0]));
  assert.equal(fromWeight[0].pairs.length, 30);
  // 29 links between iterations, in, out: far fewer than one per iteration from the weight
  assert.ok(vis.edges.size < 35, `${vis.edges.size} edges`);
});

test("a few edges into a group stay one per item", () => {
  const m = buildModel(unrolled(BUNDLE_OVER, 12));
  const exp = opened(m);
  exp.add("@1");
  const vis = visibleGraph(m, exp);
  assert.equal([...vis.edges.values()].filter((e) => e.pairs.some(([a]) => a === 0)).length, BUNDLE_OVER);
  assert.ok(![...vis.edges.values()].some((e) => e.bundle));
});

test("an iteration opened inside the loop keeps its own edge from the weight", () => {
  const m = buildModel(unrolled(30));
  const exp = opened(m);
  exp.add("@1.7");
  const vis = visibleGraph(m, exp);
  const fromWeight = [...vis.edges.values()].filter((e) => e.from === "g:cell");
  assert.deepEqual(fromWeight.map((e) => e.to).sort(), ["f:@1", `n:${1 + 6 * 6}`].sort());
  assert.equal(fromWeight.find((e) => e.bundle).count, 29);
});

test("the bundled edge is laid out to the loop's frame", () => {
  const m = buildModel(unrolled(30));
  const exp = opened(m);
  const vis = visibleGraph(m, exp);
  const l = layoutGraph(m, exp, vis);
  const pts = l.edges.get("g:cell>f:@1");
  const frame = l.frames.get("@1");
  assert.ok(pts && pts.length >= 2, "routed between the weight's box and the frame");
  const [x, y] = pts[pts.length - 1];
  assert.ok(Math.abs(y - frame.y) < 2 && x >= frame.x && x <= frame.x + frame.w, "it ends on the frame's top");
});

test("a backward step's gradient flow reaches the weight along the bundled edge", () => {
  const m = buildModel(unrolled(30));
  const vis = visibleGraph(m, opened(m));
  const sigs = stepSignatures(m, vis, m.step(1));
  assert.ok(sigs.flowKeys.has("g:cell>f:@1"));
});
