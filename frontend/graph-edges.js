// The graph's edges: one <path> per visible edge, keyed by edge key. joinEdges draws them along the
// layout; paintEdge shows a step on one (absent, new, gradient flowing against the arrow).
// An edge is a record {el, d, culled, sig} in ctx.state (graph.js), like an item.

import { edgeSig, edgeStatus } from "./graph-signatures.js";

/** The box of an edge's end: an item, or a frame ("f:<group>", an edge drawn to a whole group). */
export function endBox(layout, key) {
  return key.startsWith("f:") ? layout.frames.get(key.slice(2)) : layout.items.get(key);
}

/** Join the visible edges to <path class="gs-edge"> elements; sets ctx.edges. */
export function joinEdges(ctx) {
  const { layout } = ctx;
  const sel = ctx.layers.edges
    .selectAll("path.gs-edge")
    .data([...ctx.vis.edges.values()], (d) => d.key)
    .join((enter) => enter.append("path").attr("class", "gs-edge").attr("marker-end", "url(#gs-arrow)"))
    .attr("data-edge", (d) => d.key)
    .attr("d", (d) => edgePath(layout.edges.get(d.key), endBox(layout, d.from), endBox(layout, d.to)))
    .attr("role", (d) => (d.bundle ? "img" : null))
    .attr("aria-label", (d) => (d.bundle ? bundleText(ctx.model, d) : null));
  // a bundled edge says how many items it stands for, at its frame's end
  ctx.layers.edges
    .selectAll("text.gs-edge-count")
    .data([...ctx.vis.edges.values()].filter((d) => d.bundle && layout.frames.has(d.bundle)), (d) => d.key)
    .join((enter) => enter.append("text").attr("class", "gs-edge-count").attr("aria-hidden", "true"))
    .each(function (d) {
      const f = layout.frames.get(d.bundle);
      const pts = layout.edges.get(d.key);
      const end = d.outward ? [f.x + f.w / 2, f.y + f.h] : [f.x + f.w / 2, f.y];
      const [x, y] = pts && pts.length ? pts[d.outward ? 0 : pts.length - 1] : end;
      this.setAttribute("x", x + 6);
      this.setAttribute("y", d.outward ? y + 14 : y - 6);
      this.textContent = `×${d.count}`;
    });
  ctx.edges = [];
  sel.each(function (d) {
    const edge = ctx.itemOf(this);
    edge.d = d;
    ctx.edges.push(edge);
  });
}

/** What a bundled edge stands for, in words: "cell → 100 items of loop · 100 iterations". */
export function bundleText(model, d) {
  const name = (key) => {
    if (key.startsWith("f:") || key.startsWith("g:")) {
      const g = model.groups.get(key.slice(2));
      return g ? (g.label ?? g.module ?? g.id) : key.slice(2);
    }
    const n = model.nodes[Number(key.slice(2))];
    return n ? (n.tensor ?? n.op) : key;
  };
  const many = `${d.count} items of ${name(`f:${d.bundle}`)}`;
  return d.outward ? `Edges from ${many} into ${name(d.to)}, drawn as one` : `Edges from ${name(d.from)} into ${many}, drawn as one`;
}

export function paintEdge(ctx, edge, step, flowKeys, sig = null) {
  const e = edgeStatus(ctx.model, step, edge.d, flowKeys);
  edge.sig = sig ?? (step ? edgeSig(e) : null);
  const el = edge.el;
  const cl = el.classList;
  cl.toggle("gs-absent", !e.alive);
  cl.toggle("gs-edge-flow", e.flow);
  cl.toggle("gs-edge-new", e.isNew);
  // gradient flows against the forward arrow: point it at the input instead
  if (e.flow) {
    el.removeAttribute("marker-end");
    el.setAttribute("marker-start", "url(#gs-arrow-flow)");
  } else {
    el.setAttribute("marker-end", "url(#gs-arrow)");
    el.removeAttribute("marker-start");
  }
}

function edgePath(pts, a, b) {
  if (pts && pts.length >= 2) {
    let d = `M${pts[0][0]},${pts[0][1]}`;
    if (pts.length === 2) return `${d}L${pts[1][0]},${pts[1][1]}`;
    // smooth through dagre's points
    for (let i = 1; i < pts.length - 1; i++) {
      const [x0, y0] = pts[i];
      const [x1, y1] = pts[i + 1];
      const mx = i === pts.length - 2 ? x1 : (x0 + x1) / 2;
      const my = i === pts.length - 2 ? y1 : (y0 + y1) / 2;
      d += `Q${x0},${y0} ${mx},${my}`;
    }
    return d;
  }
  // ends in different modules: a curve from the bottom of a to the top of b
  const x0 = a.x + a.w / 2;
  const y0 = a.y + a.h;
  const x1 = b.x + b.w / 2;
  const y1 = b.y;
  if (y1 > y0) {
    const k = Math.max(20, (y1 - y0) / 2);
    return `M${x0},${y0}C${x0},${y0 + k} ${x1},${y1 - k} ${x1},${y1}`;
  }
  // b above a (rare): leave sideways
  const side = x1 >= x0 ? 1 : -1;
  return `M${x0},${y0}C${x0 + side * 80},${y0 + 60} ${x1 - side * 80},${y1 - 60} ${x1},${y1}`;
}

/** Points along an edge, from its consumer end up to its input end (no DOM reads). */
export function edgeSamples(layout, d) {
  const pts = layout.edges.get(d.key);
  if (pts && pts.length >= 2) return pts.slice().reverse();
  const a = endBox(layout, d.from);
  const b = endBox(layout, d.to);
  const x0 = a.x + a.w / 2;
  const y0 = a.y + a.h;
  const x1 = b.x + b.w / 2;
  const y1 = b.y;
  const k = Math.max(20, (y1 - y0) / 2);
  const out = [];
  for (let i = 12; i >= 0; i--) {
    const t = i / 12;
    const u = 1 - t;
    // the cubic of edgePath: (x0,y0) (x0,y0+k) (x1,y1-k) (x1,y1)
    out.push([
      u * u * u * x0 + 3 * u * u * t * x0 + 3 * u * t * t * x1 + t * t * t * x1,
      u * u * u * y0 + 3 * u * u * t * (y0 + k) + 3 * u * t * t * (y1 - k) + t * t * t * y1,
    ]);
  }
  return out;
}
