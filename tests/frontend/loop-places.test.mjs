// A loop's iterations in the graph: the boxes of iterations never alive at the same step share one
// place (layout.js sharedSlots, NOTE [iterations share a place]); those alive together, or opened,
// keep their own.
// Run: node --test tests/frontend/
import { test } from "node:test";
import assert from "node:assert/strict";
import { buildModel, visibleGraph } from "../../frontend/model.js";
import { layoutGraph, sharedSlots } from "../../frontend/layout.js";

/**
 * A loop of `iterations`, each a forward of `ops` nodes on the weight w and a backward. Unless
 * `keep` (a running total that holds every graph), each forward drops the previous iteration's
 * nodes, as rebinding `loss` does.
 */
function trainingLoop(iterations, { ops = 6, keep = false } = {}) {
  const nodes = [{ id: 0, op: "AccumulateGrad", step: 0, line: 2, tensor: "w", next: [] }];
  const steps = [];
  let alive = [0];
  for (let t = 1; t <= iterations; t++) {
    const made = [];
    for (let k = 0; k < ops; k++) {
      const id = nodes.length;
      nodes.push({ id, op: "MulBackward0", step: steps.length, line: 4, iteration: t, seq: id, next: [k === 0 ? 0 : id - 1] });
      made.push(id);
    }
    const dropped = keep ? [] : alive.filter((id) => id !== 0);
    const kept = alive.filter((id) => !dropped.includes(id));
    const states = [...kept.map((id) => ({ id })), ...dropped.map((id) => ({ id, dropped: true })), ...made.map((id) => ({ id }))];
    steps.push({ kind: "forward", line: 4, index: steps.length, iteration: t, nodes: states });
    alive = [...kept, ...made];
    steps.push({ kind: "backward", line: 5, index: steps.length, iteration: t, nodes: alive.map((id) => ({ id })) });
  }
  return { version: 1, status: "ok", nodes, steps };
}

/** Each iteration's box in the loop opened at its iterations (each closed). */
function iterationBoxes(trace) {
  const m = buildModel(trace);
  const loop = [...m.groups.values()].find((g) => g.kind === "loop");
  assert.ok(loop, "the trace's loop is grouped");
  const expanded = new Set([loop.id]);
  const layout = layoutGraph(m, expanded, visibleGraph(m, expanded));
  return { boxes: loop.groups.map((id) => layout.items.get(`g:${id}`)), frame: layout.frames.get(loop.id), m, loop };
}

test("a place is shared by children whose steps on screen never meet", () => {
  assert.deepEqual(sharedSlots([[0, 1], [2, 3], [4, 5]]), [0, 0, 0]);
  assert.deepEqual(sharedSlots([[0, 2], [2, 3], [3, 5], [4, 6]]), [0, 1, 0, 1]); // one step together
  assert.deepEqual(sharedSlots([[0, 9], [1, 9], [2, 9]]), [0, 1, 2]);
  assert.deepEqual(sharedSlots([[0, 1], null, [2, 3]]), [0, 1, 0]); // null: shown at every step
});

test("iterations each dropped by the next one's forward share one place in the graph", () => {
  const { boxes, frame, m, loop } = iterationBoxes(trainingLoop(8));
  assert.equal(boxes.length, 8);
  assert.ok(boxes.every(Boolean), "every iteration has its box");
  assert.equal(new Set(boxes.map((b) => `${b.x},${b.y}`)).size, 1);
  // the loop's frame holds one box, not eight
  assert.ok(frame.w < 2 * boxes[0].w && frame.h < 2 * boxes[0].h, JSON.stringify(frame));
  // each is alive at its own steps only: [its forward, its backward]
  const spans = loop.groups.map((id) => m.groups.get(id).span);
  assert.deepEqual(spans, spans.map((_, k) => [2 * k, 2 * k + 1]));
});

test("iterations whose graphs are all kept keep a place each, without overlaps", () => {
  const { boxes } = iterationBoxes(trainingLoop(8, { keep: true }));
  const overlap = (a, b) => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) assert.ok(!overlap(boxes[i], boxes[j]));
});

test("an opened iteration keeps a place of its own beside the shared one", () => {
  const m = buildModel(trainingLoop(8));
  const loop = [...m.groups.values()].find((g) => g.kind === "loop");
  const opened = loop.groups[3];
  const expanded = new Set([loop.id, opened]);
  const layout = layoutGraph(m, expanded, visibleGraph(m, expanded));
  const frame = layout.frames.get(opened);
  const closed = loop.groups.filter((id) => id !== opened).map((id) => layout.items.get(`g:${id}`));
  assert.equal(new Set(closed.map((b) => `${b.x},${b.y}`)).size, 1);
  const b = closed[0];
  assert.ok(!(b.x < frame.x + frame.w && frame.x < b.x + b.w && b.y < frame.y + frame.h && frame.y < b.y + b.h));
});
