// Deep graphs: an unrolled loop is a chain thousands of nodes deep inside one
// module. Laying it out must neither overflow the stack nor lose a node.
import { test } from "node:test";
import assert from "node:assert/strict";
import { buildModel, visibleGraph } from "../../frontend/model.js";
import { layoutGraph, layoutGraphInSlices, splitBands } from "../../frontend/layout.js";

function chain(n, module) {
  // one weight read by the first op, then n ops each using the previous one
  const nodes = [{ id: 0, op: "AccumulateGrad", step: 0, tensor: "w" }];
  for (let i = 1; i <= n; i++) {
    nodes.push({ id: i, op: i % 2 ? "MulBackward0" : "TanhBackward0", step: 0, line: 3, module, next: [i - 1] });
  }
  return { version: 1, status: "ok", nodes, steps: [{ kind: "forward", line: 3, index: 0, nodes: nodes.map((x) => ({ id: x.id })) }] };
}

function overlaps(a, b) {
  return a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
}

test("a 3,000-node chain in an expanded module is laid out: every node boxed, each op below its input or in a column right of it", () => {
  const m = buildModel(chain(3000, "rnn.cell"));
  const all = new Set(m.groups.keys());
  const vis = visibleGraph(m, all);
  const l = layoutGraph(m, all, vis);
  assert.equal(l.items.size, vis.items.size);
  assert.equal(l.items.size, 3001);
  for (const e of vis.edges.values()) {
    const a = l.items.get(e.from);
    const b = l.items.get(e.to);
    assert.ok(a.y + a.h <= b.y || a.x + a.w <= b.x, `${e.from} above ${e.to}, or left of it`);
  }
  const frame = l.frames.get("rnn.cell");
  for (let i = 1; i <= 3000; i++) {
    const b = l.items.get(`n:${i}`);
    assert.ok(b.x >= frame.x && b.y >= frame.y && b.x + b.w <= frame.x + frame.w && b.y + b.h <= frame.y + frame.h, `n:${i} inside its frame`);
  }
});

test("a 3,000-node chain outside any module gets non-overlapping boxes", () => {
  const m = buildModel(chain(3000, undefined));
  const exp = new Set();
  const vis = visibleGraph(m, exp);
  const l = layoutGraph(m, exp, vis);
  assert.equal(l.items.size, 3001);
  const boxes = [...l.items.values()].sort((a, b) => a.y - b.y);
  // sorted by top: only boxes whose tops are closer than a box height can overlap
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length && boxes[j].y < boxes[i].y + boxes[i].h; j++) assert.ok(!overlaps(boxes[i], boxes[j]));
  }
});

test("bands of a big container hold every child once, inputs in the same or an earlier band", () => {
  const n = 1000;
  const edges = [];
  for (let i = 1; i < n; i++) edges.push([i - 1, i]);
  for (let i = 10; i < n; i += 10) edges.push([0, i]); // one weight read all along the chain
  const bands = splitBands(n, edges, { over: 100, items: 40, ranks: 20 });
  assert.ok(bands.length > 1);
  const bandOf = new Map();
  bands.forEach((b, k) => b.forEach((i) => (assert.ok(!bandOf.has(i)), bandOf.set(i, k))));
  assert.equal(bandOf.size, n);
  for (const [a, b] of edges) assert.ok(bandOf.get(a) <= bandOf.get(b), `${a} → ${b}`);
});

test("children on a cycle between module boxes still get a band", () => {
  const edges = [[0, 1], [1, 2], [2, 1], [2, 3]];
  const bands = splitBands(4, edges, { over: 2, items: 1, ranks: 1 });
  assert.deepEqual([...bands.flat()].sort(), [0, 1, 2, 3]);
});

test("laid out in slices, the layout gives the event loop turns and equals the one-go layout", async () => {
  const m = buildModel(chain(600, "rnn.cell"));
  const all = new Set(m.groups.keys());
  const vis = visibleGraph(m, all);
  let turns = 0;
  const tick = setInterval(() => turns++, 0);
  const sliced = await layoutGraphInSlices(m, all, vis, {}, 0);
  clearInterval(tick);
  assert.ok(turns > 0, "no timer ran while laying out");
  assert.deepEqual(sliced, layoutGraph(m, all, vis));
});

test("the layout worker posts a failure back with its reason", async () => {
  const posted = [];
  globalThis.self = { postMessage: (msg) => posted.push(msg) };
  await import("../../frontend/layout.worker.js");
  self.onmessage({ data: { type: "init", graph: { nodes: [] } } });
  self.onmessage({ data: { type: "layout", id: 7, expanded: ["nowhere"] } });
  const last = posted.at(-1);
  assert.equal(last.type, "error");
  assert.equal(last.id, 7);
  assert.match(last.message, /\w+Error: ./);
  delete globalThis.self;
});

test("a chain of 3,000 nodes is laid out in columns, not one column 3,000 boxes tall", () => {
  const m = buildModel(chain(3000, undefined));
  const l = layoutGraph(m, new Set(), visibleGraph(m, new Set()));
  assert.ok(l.width > l.height / 3, `${l.width} × ${l.height}`);
});

test("a chain of 100 boxes, fewer than a band's limit, is cut into bands all the same", () => {
  const edges = [];
  for (let i = 1; i < 100; i++) edges.push([i - 1, i]);
  assert.ok(splitBands(100, edges).length > 1);
  assert.equal(splitBands(30, edges.slice(0, 29)).length, 1);
});
