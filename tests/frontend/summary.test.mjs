// The summary a big model opens at: which modules start expanded (model.js initialExpanded), a
// chain of repeated module boxes in rows (layout.js chainRows), and the facts a box shows
// (graph-nodes.js groupLines).
// Run: node --test tests/frontend/
import { test } from "node:test";
import assert from "node:assert/strict";
import { buildModel, initialExpanded, visibleGraph } from "../../frontend/model.js";
import { CHAIN, G, chainRows, layoutGraph } from "../../frontend/layout.js";
import { groupLines } from "../../frontend/graph-nodes.js";
import { moduleStats } from "../../frontend/module-stats.js";

/** A transformer-like trace: `layers` blocks of `perBlock` ops in four submodules and the block's own (the residual adds), then a loss. */
function transformer(layers, perBlock = 12) {
  const nodes = [];
  let prev = null;
  const subs = [".ln_1", ".attn", "", ".ln_2", ".mlp", ""];
  for (let b = 0; b < layers; b++) {
    for (let k = 0; k < perBlock; k++) {
      const id = nodes.length;
      nodes.push({ id, op: "AddBackward0", step: 0, line: 3, module: `model.h.${b}${subs[k % 6]}`, next: prev === null ? [] : [prev] });
      prev = id;
    }
  }
  nodes.push({ id: nodes.length, op: "MeanBackward0", step: 0, line: 4, next: [prev] });
  return { version: 1, status: "ok", nodes, steps: [{ kind: "forward", line: 3, index: 0, nodes: nodes.map((n) => ({ id: n.id })) }] };
}

test("a big model opens at its repeated blocks, each a box", () => {
  const m = buildModel(transformer(12));
  const exp = initialExpanded(m);
  assert.deepEqual([...exp].sort(), ["model", "model.h"]);
  const boxes = [...visibleGraph(m, exp).items.values()].filter((d) => d.kind === "group").map((d) => d.group);
  assert.deepEqual(boxes, Array.from({ length: 12 }, (_, b) => `model.h.${b}`));
});

test("a model within the budget opens whole, as before", () => {
  const m = buildModel(transformer(2, 4));
  assert.equal(initialExpanded(m).size, m.groups.size);
});

test("a chain of module boxes is laid out in rows that turn back, without overlaps", () => {
  const m = buildModel(transformer(12));
  const exp = initialExpanded(m);
  const l = layoutGraph(m, exp, visibleGraph(m, exp));
  const box = (b) => l.items.get(`g:model.h.${b}`);
  const rows = [...new Set(Array.from({ length: 12 }, (_, b) => box(b).y))];
  assert.equal(rows.length, Math.ceil(12 / CHAIN.cols));
  assert.ok(box(1).x > box(0).x && box(2).x > box(1).x, "row 1 runs left to right");
  assert.equal(box(3).x, box(2).x, "the next row starts under the end of the last");
  assert.ok(box(4).x < box(3).x, "and runs back");
  assert.ok(l.width < 4 * (G.groupW + CHAIN.gapX) + 2 * G.framePad * 2, "as wide as a few boxes, not a strip");
  const all = [...l.items.values()];
  const overlap = (a, b) => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
  for (let i = 0; i < all.length; i++) for (let j = i + 1; j < all.length; j++) assert.ok(!overlap(all[i], all[j]));
});

test("chainRows leaves anything but one simple chain to dagre", () => {
  const s = [G.groupW, G.groupH];
  const five = Array(5).fill(s);
  assert.ok(chainRows(five, [[0, 1], [1, 2], [2, 3], [3, 4]]));
  assert.equal(chainRows(five.slice(0, 4), [[0, 1], [1, 2], [2, 3]]), null, "short chains stay a column");
  assert.equal(chainRows(five, [[0, 1], [0, 2], [2, 3], [3, 4]]), null, "a branch");
  assert.equal(chainRows(five, [[0, 1], [1, 2], [3, 4]]), null, "two chains");
  assert.equal(chainRows([...five.slice(0, 4), [100, 50]], [[0, 1], [1, 2], [2, 3], [3, 4]]), null, "sizes differ");
});

test("a module box says what ran, its saved bytes and its .grad norm", () => {
  const s = { alive: 61, executed: 61, isNew: 0, failed: 0, stale: 0 };
  const m = { nodes: 61, savedHeld: 0, savedFreed: 1536, leaves: 2, params: 2, gradNorm: 0.5, nonfinite: 0 };
  assert.deepEqual(groupLines(m, s), { count: "61 nodes · ran 61/61", saved: "saved 1.5 KB freed", grad: "‖grad‖ 0.5000" });
  const fwd = groupLines({ ...m, savedHeld: 2048, savedFreed: 0, params: 0, gradNorm: null }, { ...s, executed: 0, isNew: 61 });
  assert.deepEqual(fwd, { count: "61 nodes · 61 new", saved: "saved 2.0 KB held", grad: "‖grad‖ None" });
  assert.equal(groupLines({ ...m, gradNorm: null, nonfinite: 2 }, s).grad, "‖grad‖ ✕ nan/inf");
});

test("a module box with no leaf drawn in it says nothing about gradients", () => {
  const s = { alive: 15, executed: 15, isNew: 0, failed: 0, stale: 0 };
  const m = { nodes: 15, savedHeld: 0, savedFreed: 1536, leaves: 0, params: 0, gradNorm: null, nonfinite: 0 };
  assert.equal(groupLines(m, s).grad, "");
});

test("an unrolled cell's step boxes hold no leaves; the cell's own box holds its weights", () => {
  // a cell weight feeding 8 steps of 6 ops each (more than a loop needs to be grouped)
  const nodes = [{ id: 0, op: "AccumulateGrad", step: 0, line: 2, tensor: "cell.weight", next: [] }];
  let prev = null;
  for (let t = 1; t <= 8; t++) {
    for (let k = 0; k < 6; k++) {
      const id = nodes.length;
      nodes.push({ id, op: "MmBackward0", step: 0, line: 4, module: "cell", iteration: t, seq: id, next: k === 0 ? [0, ...(prev === null ? [] : [prev])] : [prev] });
      prev = id;
    }
  }
  const trace = { version: 1, status: "ok", nodes, steps: [{ kind: "forward", line: 4, index: 0, nodes: nodes.map((n) => ({ id: n.id })) }] };
  const m = buildModel(trace);
  const stats = moduleStats(m, 0);
  assert.equal(stats.get("@1.3").leaves, 0);
  assert.equal(stats.get("cell").leaves, 1);
  assert.equal(groupLines(stats.get("@1.3"), { alive: 6, executed: 0, isNew: 6, failed: 0, stale: 0 }).grad, "");
  assert.equal(groupLines(stats.get("cell"), { alive: 1, executed: 0, isNew: 1, failed: 0, stale: 0 }).grad, "‖grad‖ None");
});
