// Layout: where every visible item goes. Pure (no DOM), so it runs in a Web
// Worker (layout.worker.js), on the main thread for small graphs (or in slices
// when the worker failed), and in node tests. No recursion of ours: graphs can be
// thousands of nodes deep (see splitBands for dagre's).
//
// Computed over the union of all steps (every node the trace ever shows), so
// nothing moves while stepping. Modules are laid out one container at a time,
// as TensorBoard does: each expanded module is a small dagre graph of its own
// children (nodes and module boxes), whose size then counts as one box in its
// parent. Expanding a module re-lays out only it and its ancestors; results are
// cached per container and per expansion state below it.

import dagre from "./vendor/dagre.js";
import { effectiveExpanded, fmtGrad, modulePath } from "./model.js";

// Geometry shared with the renderer (graph.js). Text is monospace 11.5px.
export const G = {
  charW: 7.1,
  padX: 10,
  title: 18, // op name row
  vars: 15, // "loss1.grad_fn" row
  chips: 22, // saved tensors row
  gradRow: 16,
  accRow: 15,
  padY: 6,
  minW: 104,
  groupW: 176,
  groupH: 72, // a collapsed module: its name and three lines of facts
  framePad: 12,
  frameHead: 22,
  nodesep: 18,
  ranksep: 30,
};

export function chipWidth(name) {
  return name.length * 6.2 + 12;
}

/** Width and height of a node, stable over all steps. */
export function nodeSize(model, id) {
  const n = model.nodes[id];
  const gradRows = model.maxGradRows.get(id) ?? (n.isLeaf ? 1 : 0);
  const gradChars = Math.min(model.gradWidth.get(id) ?? 9, 50);
  const varsChars = (model.varsWidth.get(id) ?? (n.tensor ? n.tensor.length : 0)) + (n.isLeaf ? 0 : 8);
  if (n.isLeaf) {
    const accChars = Math.min((model.accWidth && model.accWidth.get(id)) || 0, 60) * (10.5 / 11.5);
    const w = Math.max(G.minW, G.padX * 2 + G.charW * Math.max(Math.min(varsChars, 30), gradChars, accChars, 14));
    const h = G.padY * 2 + G.title + Math.max(1, gradRows) * G.gradRow + G.accRow;
    return [Math.round(w), h];
  }
  const chips = n.savedTensors.length
    ? n.savedTensors.reduce((a, s) => a + chipWidth(s.name) + 4, 0)
    : G.charW * 16;
  const w = Math.max(G.minW, G.padX * 2 + Math.max(G.charW * Math.max(n.op.length + 3, Math.min(varsChars, 30), gradChars), chips));
  const h = G.padY * 2 + G.title + G.vars + G.chips + gradRows * G.gradRow;
  return [Math.round(w), h];
}

/** Longest grad text a node shows, in characters (for tests of stable sizes). */
export function gradTextWidth(grad) {
  return fmtGrad(grad).length;
}

/** The container an item sits in: its module when expanded, else the root (null). */
function containerOf(model, item) {
  return item.kind === "node" ? model.nodes[item.id].group : item.parent;
}

/**
 * Lay out the visible graph. `vis` is model.visibleGraph(expanded).
 * Returns absolute boxes (top-left x, y, w, h) for items and frames, and
 * routed points for edges whose ends share a container (others are drawn as
 * curves between their boxes). `cache` (a Map) keeps per-container results
 * between calls; `onProgress(done, total)` is called after each container.
 */
export function layoutGraph(model, expandedIn, vis, options = {}) {
  const steps = layoutSteps(model, expandedIn, vis, options);
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
  }
}

/**
 * layoutGraph in slices of about `sliceMs`, giving the page its turn between them: a
 * layout the page must do itself (no worker) never blocks it for long. One dagre run
 * (a container or band of at most BAND.over children) is the smallest slice.
 */
export async function layoutGraphInSlices(model, expandedIn, vis, options = {}, sliceMs = 40) {
  const steps = layoutSteps(model, expandedIn, vis, options);
  let start = performance.now();
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
    if (performance.now() - start > sliceMs) {
      await new Promise((resolve) => setTimeout(resolve, 0));
      start = performance.now();
    }
  }
}

/** The layout as a generator: yields after each dagre run. */
function* layoutSteps(model, expandedIn, vis, { cache = new Map(), onProgress = null } = {}) {
  if (!cache.shapes) cache.shapes = new Map();
  const shapes = cache.shapes;
  const expanded = effectiveExpanded(model, expandedIn);
  // Containers: the root (key "") and every expanded module.
  const containers = new Map([["", { id: "", items: [], frames: [], edges: [], pairs: new Set() }]]);
  for (const id of expanded) containers.set(id, { id, items: [], frames: [], edges: [], pairs: new Set() });
  const containerKey = (m) => (m === null || m === undefined ? "" : m);
  for (const item of vis.items.values()) {
    containers.get(containerKey(containerOf(model, item))).items.push(item);
  }
  for (const c of containers.values()) {
    if (c.id === "") continue;
    const parent = model.groups.get(c.id).parent;
    containers.get(containerKey(parent)).frames.push(c.id);
  }
  // Each item's chain of containers from the root.
  const chainOf = (item) => {
    const m = containerOf(model, item);
    return ["", ...modulePath(m)];
  };
  // Edges are laid out in their lowest common container, between the children
  // of that container that hold their ends.
  // an end "f:<group>" is a frame (model.js bundleEdges): it sits in its group's parent
  const chainOfEnd = (key) => (key.startsWith("f:") ? ["", ...modulePath(key.slice(2))] : chainOf(vis.items.get(key)));
  for (const e of vis.edges.values()) {
    const a = chainOfEnd(e.from);
    const b = chainOfEnd(e.to);
    let k = 0;
    while (k + 1 < a.length && k + 1 < b.length && a[k + 1] === b[k + 1]) k++;
    const ca = k + 1 < a.length ? `f:${a[k + 1]}` : e.from;
    const cb = k + 1 < b.length ? `f:${b[k + 1]}` : e.to;
    if (ca === cb) continue;
    const direct = ca === e.from && cb === e.to;
    const c = containers.get(a[k]);
    // edges between two frames are drawn as curves, not routed: one pulls them together as well
    // as hundreds (a loop's weights feed each of its iterations: 400 between two frames)
    if (!direct) {
      const pair = `${ca}>${cb}`;
      if (c.pairs.has(pair)) continue;
      c.pairs.add(pair);
    }
    c.edges.push({ key: e.key, from: ca, to: cb, direct });
  }

  // Signature of a container's layout: what is expanded below it.
  const below = (id) => [...expanded].filter((x) => id === "" || x.startsWith(`${id}.`)).sort().join(",");
  const sizeOfItem = (item) => (item.kind === "node" ? nodeSize(model, item.id) : [G.groupW, G.groupH]);

  // Children containers before their parents (reversed pre-order; no recursion).
  const order = [];
  for (const stack = [""]; stack.length; ) {
    const id = stack.pop();
    order.push(id);
    stack.push(...containers.get(id).frames);
  }
  order.reverse();
  const todo = order.filter((id) => {
    const hit = cache.get(id);
    return !(hit && hit.sig === below(id));
  });
  let done = 0;
  const results = new Map();
  for (const id of order) {
    const sig = below(id);
    const hit = cache.get(id);
    if (hit && hit.sig === sig) {
      results.set(id, hit);
      continue;
    }
    const c = containers.get(id);
    // The container as a shape: child sizes and edges by local index. Repeated
    // blocks (24 identical transformer layers) have the same shape, and dagre is
    // deterministic, so one layout serves them all.
    // a loop's iterations, in order, in rows (unconnected iterations would make one row 20 wide)
    const grid = id !== "" && model.groups.get(id).kind === "loop";
    const children = [
      ...c.items.map((i) => [i.key, sizeOfItem(i), i.group]),
      ...c.frames.map((f) => [`f:${f}`, [results.get(f).w, results.get(f).h], f]),
    ];
    if (grid) children.sort((a, b) => (model.groups.get(a[2])?.iteration ?? 0) - (model.groups.get(b[2])?.iteration ?? 0));
    const keys = children.map((x) => x[0]);
    const sizes = children.map((x) => x[1]);
    // NOTE [iterations share a place]: a collapsed iteration's box shows only while one of its nodes
    // is alive (model.js: its span), so iterations never alive together (a training loop's, each
    // dropped as the next one's forward runs) share one place; an opened one keeps its own (a
    // frame shows at every step)
    const slots = grid ? sharedSlots(children.map(([key, , group]) => (key.startsWith("f:") ? null : model.groups.get(group)?.span ?? null))) : null;
    const index = new Map(keys.map((k, i) => [k, i]));
    const local = c.edges.map((e) => [index.get(e.from), index.get(e.to)]);
    // only module boxes (a model's repeated blocks): a long chain of them wraps into rows
    const boxes = c.frames.length === 0 && c.items.every((i) => i.kind === "group");
    const shapeKey = `${id === "" ? "root" : grid ? "grid" : "box"}|${boxes}|${JSON.stringify(sizes)}|${JSON.stringify(local)}|${slots ? slots.join(",") : ""}`;
    let shape = shapes.get(shapeKey);
    if (!shape) {
      shape = yield* layoutShape(sizes, local, id === "", shapes, { grid, boxes, slots });
      shapes.set(shapeKey, shape);
    }
    const pos = new Map(keys.map((k, i) => [k, shape.pos[i]]));
    const points = new Map();
    c.edges.forEach((e, i) => {
      if (e.direct && shape.points[i]) points.set(e.key, shape.points[i]);
    });
    const r = { sig, pos, points, w: shape.w, h: shape.h };
    cache.set(id, r);
    results.set(id, r);
    done++;
    if (onProgress) onProgress(done, todo.length);
  }

  // Absolute positions, top-down.
  const items = new Map();
  const frames = new Map();
  const edges = new Map();
  for (const stack = [["", 0, 0]]; stack.length; ) {
    const [id, ox, oy] = stack.pop();
    const r = results.get(id);
    for (const [k, p] of r.pos) {
      const box = { x: p.x + ox, y: p.y + oy, w: p.w, h: p.h };
      if (k.startsWith("f:")) {
        frames.set(k.slice(2), box);
        stack.push([k.slice(2), box.x, box.y]);
      } else {
        items.set(k, box);
      }
    }
    for (const [k, pts] of r.points) edges.set(k, pts.map(([x, y]) => [x + ox, y + oy]));
  }
  const root = results.get("");
  return { items, frames, edges, width: root.w, height: root.h, laidOut: todo.length };
}

// dagre's ranking and network simplex recurse along paths and grow faster than
// linearly with a container's size: an unrolled loop (an LSTM over 100 time steps)
// is one container holding a chain thousands of nodes deep, which overflows the
// stack and takes minutes. Bigger containers are cut into bands of consecutive
// ranks, each laid out by dagre on its own and stacked top to bottom; edges
// between bands are drawn as curves between their boxes.
// A chain is the worst case: dagre takes ~0.3 s on 100 boxes in a row (a loop's iterations,
// collapsed), so a container deeper than `deep` ranks is cut too, whatever its size.
export const BAND = { over: 240, items: 30, ranks: 15, deep: 40 };

/**
 * Bands of a container too big for one dagre run: lists of child indices, in
 * rank order (longest path from the sources, computed without recursion).
 */
export function splitBands(count, edges, { over = BAND.over, items = BAND.items, ranks = BAND.ranks, deep = BAND.deep } = {}) {
  if (count <= over && count <= deep) return [[...Array(count).keys()]];
  const outs = Array.from({ length: count }, () => []);
  const indeg = new Array(count).fill(0);
  for (const [a, b] of edges) {
    if (a === b) continue;
    outs[a].push(b);
    indeg[b]++;
  }
  const rank = new Array(count).fill(0);
  const queue = [];
  for (let i = 0; i < count; i++) if (!indeg[i]) queue.push(i);
  for (let q = 0; q < queue.length; q++) {
    const a = queue[q];
    for (const b of outs[a]) {
      rank[b] = Math.max(rank[b], rank[a] + 1);
      if (--indeg[b] === 0) queue.push(b);
    }
  }
  // Pull each child down to just above its first user (inputs and weights next to
  // the op that reads them, not all in the first rank).
  for (let q = queue.length - 1; q >= 0; q--) {
    const a = queue[q];
    if (!outs[a].length) continue;
    let first = Infinity; // a loop, not Math.min(...): a weight may feed thousands of ops
    for (const b of outs[a]) first = Math.min(first, rank[b]);
    rank[a] = first - 1;
  }
  // Children on a cycle (edges between module boxes can form one) go after the rest.
  if (queue.length < count) {
    let next = queue.reduce((m, i) => Math.max(m, rank[i]), 0) + 1;
    for (let i = 0; i < count; i++) if (indeg[i]) rank[i] = next++;
  }
  if (count <= over && rank.reduce((m, r) => Math.max(m, r), 0) < deep) return [[...Array(count).keys()]];
  const byRank = new Map();
  for (let i = 0; i < count; i++) {
    if (!byRank.has(rank[i])) byRank.set(rank[i], []);
    byRank.get(rank[i]).push(i);
  }
  // A band ends once full, preferably after a rank of one child (the state carried from
  // one loop iteration to the next): few edges cross, and bands of a repeated body repeat.
  const bands = [];
  let band = [];
  let first = 0;
  let narrow = false;
  for (const r of [...byRank.keys()].sort((x, y) => x - y)) {
    const full = band.length >= items || r - first >= ranks;
    const overfull = band.length >= 2 * items || r - first >= 2 * ranks;
    if (band.length && ((full && narrow) || overfull)) {
      bands.push(band);
      band = [];
    }
    if (!band.length) first = r;
    band.push(...byRank.get(r));
    narrow = byRank.get(r).length === 1;
  }
  if (band.length) bands.push(band);
  return bands;
}

/** dagre over some children: boxes (top-left) and routed edges, in dagre's coordinates. */
function dagreBoxes(sizes, edges) {
  const g = new dagre.graphlib.Graph({ multigraph: true });
  g.setGraph({ rankdir: "TB", nodesep: G.nodesep, ranksep: G.ranksep, edgesep: 8, marginx: 0, marginy: 0 });
  g.setDefaultEdgeLabel(() => ({}));
  sizes.forEach(([w, h], i) => g.setNode(String(i), { width: w, height: h }));
  edges.forEach(([a, b], i) => g.setEdge(String(a), String(b), {}, String(i)));
  dagre.layout(g);
  const pos = sizes.map((_, i) => {
    const n = g.node(String(i));
    return { x: n.x - n.width / 2, y: n.y - n.height / 2, w: n.width, h: n.height };
  });
  const points = edges.map(([a, b], i) => {
    const ed = g.edge(String(a), String(b), String(i));
    return ed && ed.points ? ed.points.map((p) => [p.x, p.y]) : null;
  });
  return { pos, points };
}

function extent(pos) {
  let minX = Infinity;
  let minY = Infinity;
  let maxX = -Infinity;
  let maxY = -Infinity;
  for (const p of pos) {
    minX = Math.min(minX, p.x);
    minY = Math.min(minY, p.y);
    maxX = Math.max(maxX, p.x + p.w);
    maxY = Math.max(maxY, p.y + p.h);
  }
  if (!Number.isFinite(minX)) minX = minY = maxX = maxY = 0;
  return { minX, minY, maxX, maxY };
}

export const CHAIN = { min: 5, cols: 3, gapX: 16, gapY: 16 };

/**
 * A chain of at least CHAIN.min boxes of one size (a model's repeated blocks,
 * collapsed), laid out in rows of CHAIN.cols that turn back at each end (row 2
 * runs right to left, under the end of row 1), so a summary of a deep model is
 * as wide as it is tall instead of a strip. Null for any other shape.
 */
export function chainRows(sizes, edges) {
  const n = sizes.length;
  if (n < CHAIN.min || sizes.some(([w, h]) => w !== sizes[0][0] || h !== sizes[0][1])) return null;
  const next = new Array(n).fill(-1);
  const into = new Array(n).fill(0);
  for (const [a, b] of edges) {
    if (a === b || next[a] === b) continue;
    if (next[a] !== -1) return null;
    next[a] = b;
    into[b]++;
  }
  const start = into.indexOf(0);
  if (start < 0 || into.some((k) => k > 1)) return null;
  const order = [];
  for (let i = start; i !== -1 && order.length <= n; i = next[i]) order.push(i);
  if (order.length !== n) return null;
  const [w, h] = sizes[0];
  const cols = Math.min(CHAIN.cols, n);
  const pos = new Array(n);
  order.forEach((i, k) => {
    const row = Math.floor(k / cols);
    const col = row % 2 ? cols - 1 - (k % cols) : k % cols;
    pos[i] = { x: col * (w + CHAIN.gapX), y: row * (h + CHAIN.gapY), w, h };
  });
  // along a row: side to side; at a turn: bottom to top
  const points = edges.map(([a, b]) => {
    const p = pos[a];
    const q = pos[b];
    if (p.y === q.y) {
      const right = q.x > p.x;
      return [[right ? p.x + w : p.x, p.y + h / 2], [right ? q.x : q.x + w, q.y + h / 2]];
    }
    return [[p.x + w / 2, p.y + h], [q.x + w / 2, q.y]];
  });
  return { pos, points };
}

/** One container's children laid out: dagre per band, bands stacked and centred. */
function* bandedBoxes(sizes, edges, memo) {
  const bands = splitBands(sizes.length, edges);
  if (bands.length === 1) {
    const r = dagreBoxes(sizes, edges);
    yield;
    return r;
  }
  const bandOf = new Array(sizes.length);
  const slot = new Array(sizes.length);
  bands.forEach((b, k) => b.forEach((i, j) => ((bandOf[i] = k), (slot[i] = j))));
  const inner = bands.map(() => ({ edges: [], ids: [] }));
  edges.forEach(([a, b], i) => {
    if (bandOf[a] !== bandOf[b]) return;
    inner[bandOf[a]].edges.push([slot[a], slot[b]]);
    inner[bandOf[a]].ids.push(i);
  });
  const laid = [];
  for (const [k, b] of bands.entries()) {
    // bands of a repeated body have the same shape: laid out once (results are not mutated)
    const bandSizes = b.map((i) => sizes[i]);
    const key = `band|${JSON.stringify(bandSizes)}|${JSON.stringify(inner[k].edges)}`;
    let r = memo.get(key);
    if (!r) {
      r = dagreBoxes(bandSizes, inner[k].edges);
      r.box = extent(r.pos);
      memo.set(key, r);
      yield;
    }
    laid.push(r);
  }
  const widest = Math.max(...laid.map((r) => r.box.maxX - r.box.minX));
  const pos = new Array(sizes.length);
  const points = edges.map(() => null);
  // Bands stacked top to bottom, in columns read left to right when one column would be much
  // taller than wide (a loop's 100 iterations in a row): about 3:2, as the panel is.
  const heights = laid.map((r) => r.box.maxY - r.box.minY + G.ranksep);
  const total = heights.reduce((a, b) => a + b, 0);
  const columns = Math.max(1, Math.min(laid.length, Math.round(Math.sqrt((1.5 * total) / (widest + G.ranksep)))));
  const perColumn = total / columns;
  let top = 0;
  let left = 0;
  laid.forEach((r, k) => {
    if (top > 0 && top + heights[k] / 2 > perColumn) {
      top = 0;
      left += widest + 2 * G.ranksep;
    }
    const dx = left + (widest - (r.box.maxX - r.box.minX)) / 2 - r.box.minX;
    const dy = top - r.box.minY;
    bands[k].forEach((i, j) => {
      const p = r.pos[j];
      pos[i] = { x: p.x + dx, y: p.y + dy, w: p.w, h: p.h };
    });
    inner[k].ids.forEach((i, j) => {
      if (r.points[j]) points[i] = r.points[j].map(([x, y]) => [x + dx, y + dy]);
    });
    top += r.box.maxY - r.box.minY + G.ranksep;
  });
  return { pos, points };
}

/**
 * The place of each child, by the steps it shows (``spans``, [first, last]; null: at every step):
 * the first place whose last child was gone before this one came, else a new one. In order of
 * their first step (a loop's iterations) this takes as few places as children are ever shown at
 * once (NOTE [iterations share a place]).
 */
export function sharedSlots(spans) {
  const until = []; // per place: the last step its latest child shows
  return spans.map((span) => {
    let k = span ? until.findIndex((end) => end < span[0]) : -1;
    if (k < 0) k = until.push(0) - 1;
    until[k] = span ? span[1] : Infinity;
    return k;
  });
}

/**
 * Children in rows, in their order, left to right (a loop's iterations: 1, 2, 3, ...), about
 * 3:2 as the panel is; each row as tall as its tallest. Children of one slot (``slots[i]``, from
 * sharedSlots) share a place, as large as the largest of them. Edges are not routed (curves).
 */
export function gridBoxes(sizes, edges, slots = null) {
  const slotOf = slots ?? sizes.map((_, i) => i);
  const places = [];
  sizes.forEach(([w, h], i) => {
    const p = (places[slotOf[i]] ??= [0, 0]);
    p[0] = Math.max(p[0], w);
    p[1] = Math.max(p[1], h);
  });
  const gap = G.ranksep;
  const area = places.reduce((a, [w, h]) => a + (w + gap) * (h + gap), 0);
  let widest = 0;
  for (const [w] of places) widest = Math.max(widest, w + gap);
  const rowWidth = Math.max(widest, Math.sqrt(area * 1.5));
  const at = [];
  let x = 0;
  let y = 0;
  let rowH = 0;
  for (const [w, h] of places) {
    if (x > 0 && x + w > rowWidth) {
      x = 0;
      y += rowH + gap;
      rowH = 0;
    }
    at.push({ x, y });
    x += w + gap;
    rowH = Math.max(rowH, h);
  }
  const pos = sizes.map(([w, h], i) => ({ x: at[slotOf[i]].x, y: at[slotOf[i]].y, w, h }));
  return { pos, points: edges.map(() => null) };
}

/** A container's children as boxes (top-left) and routed edges by index, inside its frame. */
function* layoutShape(sizes, edges, isRoot, memo, { grid = false, boxes = false, slots = null } = {}) {
  // a loop's iterations in rows, in order; a chain of module boxes in rows; else dagre, banded
  const { pos, points: raw } = grid ? gridBoxes(sizes, edges, slots) : (boxes && chainRows(sizes, edges)) || (yield* bandedBoxes(sizes, edges, memo));
  const pad = isRoot ? 0 : G.framePad;
  const head = isRoot ? 0 : G.frameHead;
  const { minX, minY, maxX, maxY } = extent(pos);
  const dx = pad - minX;
  const dy = pad + head - minY;
  for (const p of pos) {
    p.x += dx;
    p.y += dy;
  }
  const points = raw.map((pts) => (pts ? pts.map(([x, y]) => [x + dx, y + dy]) : null));
  const w = Math.ceil(Math.max(maxX - minX + pad * 2, isRoot ? 0 : G.groupW));
  const h = Math.ceil(maxY - minY + pad * 2 + head);
  return { pos, points, w, h };
}

/** A layout as plain arrays (what the worker posts back). */
export function serializeLayout(l) {
  return {
    items: [...l.items],
    frames: [...l.frames],
    edges: [...l.edges],
    width: l.width,
    height: l.height,
    laidOut: l.laidOut,
  };
}

export function deserializeLayout(o) {
  return {
    items: new Map(o.items),
    frames: new Map(o.frames),
    edges: new Map(o.edges),
    width: o.width,
    height: o.height,
    laidOut: o.laidOut,
  };
}
