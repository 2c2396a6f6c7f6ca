// The graph view: SVG drawn with D3 data joins keyed by stable ids, composed of marks, one module
// each: frames of expanded modules (graph-frames.js), edges (graph-edges.js), nodes and collapsed
// modules (graph-nodes.js), the flow animation (graph-flow.js) and viewport culling
// (graph-cull.js); what a step shows on each is its signature (graph-signatures.js), and the
// data-* hooks of nodes are written by graph-hooks.js.
//
// Structure (what items exist, where they are) changes only when the trace or the set of expanded
// modules changes; stepping only sets attributes/classes on the same elements, and animates what
// the step's diff says changed. Per-element state lives in a WeakMap (ctx.state), not on the DOM.

import { select, zoom, zoomIdentity, zoomTransform } from "./vendor/d3.js";
import { signatureCache } from "./graph-signatures.js";
import { joinFrames } from "./graph-frames.js";
import { joinEdges, paintEdge } from "./graph-edges.js";
import { joinItems, buildItem, paintItem } from "./graph-nodes.js";
import { createFlow, prefersReducedMotion } from "./graph-flow.js";
import { createCuller, hideUntilShown, isBig } from "./graph-cull.js";
import { createHookWriter } from "./graph-hooks.js";

export { prefersReducedMotion };

/**
 * The smallest scale a view is fitted at: 11.5 px node text stays at 11 px (a collapsed module's
 * name at 12.4 px). A graph bigger than its pane at this scale is shown in part and panned (a big
 * model opens at a summary of module boxes, model.js initialExpanded, so the part is telling).
 */
export const MIN_READABLE = 11 / 11.5;

/** Pan and zoom in a straight line between two views [cx, cy, width] (d3's default zooms out mid-pan). */
function interpolateView(a, b) {
  return (t) => [a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t];
}

function sameView(a, b) {
  return Math.abs(a.k - b.k) < 1e-9 && Math.abs(a.x - b.x) < 1e-6 && Math.abs(a.y - b.y) < 1e-6;
}

function appendDefs(svg) {
  const defs = svg.append("defs");
  for (const [id, cls] of [["gs-arrow", "gs-arrowhead"], ["gs-arrow-flow", "gs-arrowhead gs-arrowhead-flow"]]) {
    defs
      .append("marker")
      .attr("id", id)
      .attr("viewBox", "0 0 10 10")
      .attr("refX", 9)
      .attr("refY", 5)
      .attr("markerUnits", "userSpaceOnUse")
      .attr("markerWidth", id === "gs-arrow" ? 9 : 12)
      .attr("markerHeight", id === "gs-arrow" ? 9 : 12)
      .attr("orient", "auto-start-reverse")
      .append("path")
      .attr("d", "M0,0L10,5L0,10z")
      .attr("class", cls);
  }
  const hatch = defs
    .append("pattern")
    .attr("id", "gs-hatch")
    .attr("patternUnits", "userSpaceOnUse")
    .attr("width", 6)
    .attr("height", 6)
    .attr("patternTransform", "rotate(45)");
  hatch.append("rect").attr("width", 6).attr("height", 6).attr("class", "gs-hatch-bg");
  hatch.append("line").attr("x1", 0).attr("y1", 0).attr("x2", 0).attr("y2", 6).attr("class", "gs-hatch-line");
}

export function createGraphView(root, { onSelect, onHover, onToggleGroup } = {}) {
  root.classList.add("gs-graph");
  const svg = select(root)
    .append("svg")
    .attr("class", "gs-graph-svg")
    .attr("role", "group")
    .attr("aria-label", "Autograd graph")
    .attr("tabindex", "-1");
  appendDefs(svg);
  const viewport = svg.append("g").attr("class", "gs-viewport");
  const layers = {
    frames: viewport.append("g").attr("class", "gs-frames"),
    edges: viewport.append("g").attr("class", "gs-edges"),
    flow: viewport.append("g").attr("class", "gs-flow"),
    nodes: viewport.append("g").attr("class", "gs-nodes"),
  };
  const empty = select(root).append("div").attr("class", "gs-graph-empty").attr("hidden", true);
  const progress = select(root).append("div").attr("class", "gs-layout-progress").attr("hidden", true).attr("role", "status");

  // What the marks share: the data drawn, the layers they draw in, and per-element state.
  const state = new WeakMap(); // element → its record: {el, d, built, culled, sig, hooksSig, hookVals, refs}
  const signatures = signatureCache();
  const ctx = {
    root,
    svg,
    layers,
    on: { onSelect, onHover, onToggleGroup },
    model: null,
    vis: null,
    layout: null,
    current: null, // the step shown
    // the canvas size, kept by a ResizeObserver (reading it while painting would force a layout)
    size: { width: 0, height: 0 },
    items: [], // records of every drawn item, in DOM order
    edges: [],
    frames: [],
    shownItems: [], // the built items not culled: the only ones a step paints
    shownEdges: [],
    itemOf(el) {
      let rec = state.get(el);
      if (!rec) {
        rec = { el, d: null, built: false, culled: false, sig: null, hooksSig: null, hookVals: null, refs: null };
        state.set(el, rec);
      }
      return rec;
    },
    signatures: (step) => signatures(ctx.model, ctx.vis, step),
  };
  if (typeof ResizeObserver === "function") {
    new ResizeObserver(([e]) => {
      ctx.size.width = e.contentRect.width;
      ctx.size.height = e.contentRect.height;
    }).observe(root);
  }
  const flow = createFlow(ctx);
  const culler = createCuller(ctx);
  const hooks = createHookWriter(ctx);

  const zoomer = zoom()
    .scaleExtent([0.02, 3])
    .interpolate(interpolateView)
    .on("zoom", (ev) => {
      viewport.attr("transform", ev.transform);
      if (ev.sourceEvent) view.userMoved = true;
      svg.classed("gs-far", ev.transform.k < 0.4);
      culler.schedule();
    });
  svg.call(zoomer).on("dblclick.zoom", null);

  let selected = null;
  let chosenGroup = null;
  let linked = new Set();
  let drawnModel = null;

  /** Join frames, edges and items to the layout; returns the items just made (not yet built). */
  function drawStructure() {
    if (drawnModel !== ctx.model) {
      // a new trace: ids mean other nodes now, so nothing is reused
      for (const layer of Object.values(layers)) layer.selectAll("*").remove();
      selected = null;
      chosenGroup = null;
      ctx.current = null; // a step of the old trace
      drawnModel = ctx.model;
    }
    joinFrames(ctx);
    joinEdges(ctx);
    return joinItems(ctx);
  }

  function paint(step, diff) {
    flow.stop();
    if (!step) return;
    const sigs = ctx.signatures(step);
    // only what is on screen; off-screen items are painted when they come into view (cull)
    for (const item of ctx.shownItems) {
      const sig = sigs.items.get(item.d.key);
      if (sig !== item.sig) paintItem(ctx, item, step, sig);
    }
    for (const edge of ctx.shownEdges) {
      const sig = sigs.edges.get(edge.d.key);
      if (sig !== edge.sig) paintEdge(ctx, edge, step, sigs.flowKeys, sig);
    }
    if (ctx.shownItems.length < ctx.items.length) hooks.defer();
    if (diff) flow.animate(step, diff, sigs.flowKeys);
  }

  // The view a step gets while the user has not moved it is a function of the layout, the pane and
  // the step alone (stepView), and every move goes to an absolute transform: an animated pan cut
  // short by the next step ends where that step's own view is, however the steps were reached.
  let focus = [];
  function paneSize() {
    if (ctx.size.width && ctx.size.height) return ctx.size;
    const r = root.getBoundingClientRect();
    return { width: r.width, height: r.height };
  }

  /** The fitted view: whole if it is legible, else the top left at a legible scale. */
  function fitTransform() {
    const { layout } = ctx;
    const { width, height } = paneSize();
    if (!layout || !width || !height) return null;
    const pad = 24;
    const top = 46; // below the toolbar
    const bottom = 40; // above the Legend's button
    const kw = (width - pad * 2) / Math.max(1, layout.width);
    const kh = (height - bottom - top) / Math.max(1, layout.height);
    // Fit the whole graph, but never below a readable scale (a small pane pans instead: drag, or
    // the keyboard's focus on a node brings it into view).
    const k = Math.min(1.5, Math.max(MIN_READABLE, Math.min(kw, kh)));
    const w = layout.width * k;
    const hgt = layout.height * k;
    // centred when it fits; else from its left and top edges (a wide or tall graph is panned)
    const x = w <= width - pad * 2 ? (width - w) / 2 : pad;
    const y = hgt <= height - top - bottom ? top + (height - top - bottom - hgt) / 2 : top;
    return zoomIdentity.translate(x, y).scale(k);
  }

  /** The view of the step shown: the fitted one, panned to the step's first item if none is in it. */
  function stepView() {
    const t = fitTransform();
    const { vis, layout } = ctx;
    if (!t || !vis || !focus.length) return t;
    const { width, height } = paneSize();
    const boxes = focus.map((id) => layout.items.get(vis.rep[id])).filter(Boolean);
    const inView = (b) => t.applyX(b.x) >= 0 && t.applyY(b.y) >= 0 && t.applyX(b.x + b.w) <= width && t.applyY(b.y + b.h) <= height;
    if (!boxes.length || boxes.some(inView)) return t;
    const b = boxes[0];
    return zoomIdentity.translate(width / 2 - (b.x + b.w / 2) * t.k, height / 2 - (b.y + b.h / 2) * t.k).scale(t.k);
  }

  let target = null; // the transform the view is moving to (or is at)
  function moveTo(t, duration) {
    if (!t) return;
    zoomer.scaleExtent([Math.min(0.02, t.k), 3]);
    const now = zoomTransform(svg.node());
    if (target && sameView(t, target) && sameView(t, now)) return;
    target = t;
    svg.interrupt();
    if (duration && !prefersReducedMotion()) svg.transition().duration(duration).call(zoomer.transform, t);
    else svg.call(zoomer.transform, t);
  }

  // Expanding or collapsing a module keeps it where it was on screen: the toggled box (or frame)
  // keeps its top-left corner, at the same scale.
  let anchor = null;
  const toggle = ctx.on.onToggleGroup;
  ctx.on.onToggleGroup = (id, open) => {
    const box = ctx.layout && (open ? ctx.layout.items.get(`g:${id}`) : ctx.layout.frames.get(id));
    const t = zoomTransform(svg.node());
    anchor = box ? { id, open, sx: t.applyX(box.x), sy: t.applyY(box.y), k: t.k } : null;
    return toggle && toggle(id, open);
  };
  function keepAnchor() {
    const a = anchor;
    anchor = null;
    if (!a || !ctx.layout) return;
    const box = a.open ? ctx.layout.frames.get(a.id) : ctx.layout.items.get(`g:${a.id}`);
    if (!box) return;
    view.userMoved = true; // the user is looking here now: stepping does not move it away
    target = zoomIdentity.translate(a.sx - box.x * a.k, a.sy - box.y * a.k).scale(a.k);
    svg.interrupt();
    svg.call(zoomer.transform, target);
  }

  const view = {
    svg: svg.node(),
    userMoved: false,
    setEmpty(message) {
      empty.attr("hidden", message ? null : true).text(message || "");
      svg.classed("gs-hidden", Boolean(message));
    },
    setProgress(text) {
      progress.attr("hidden", text ? null : true).text(text || "");
    },
    /** Draw the structure: items, frames and edges of a layout. */
    async setGraph(m, v, l) {
      ctx.model = m;
      ctx.vis = v;
      ctx.layout = l;
      const big = isBig(v);
      svg.classed("gs-big", big);
      const fresh = drawStructure();
      // Big graphs are virtual: an item's content is built when it first comes into view.
      for (const item of fresh) {
        if (big) hideUntilShown(item);
        else buildItem(ctx, item);
      }
      view.select(selected);
      view.selectGroup(chosenGroup);
      view.link([]);
      keepAnchor();
      culler.cull();
      if (ctx.current) paint(ctx.current, null);
    },
    /** Show step `step` (model.step(i)); `diff` (diffSteps) animates what changed. */
    showStep(step, diff, { animate = true } = {}) {
      ctx.current = step;
      paint(step, animate && !prefersReducedMotion() ? diff : null);
    },
    select(id) {
      selected = id;
      layers.nodes.selectAll("g.gs-item").classed("gs-selected", (d) => d.kind === "node" && d.id === selected);
    },
    /** Mark a module (its box, or its frame when open) as the one picked; null: none. */
    selectGroup(path) {
      chosenGroup = path;
      for (const e of root.querySelectorAll("[data-chosen]")) e.removeAttribute("data-chosen");
      if (path !== null) for (const e of root.querySelectorAll(`[data-group="${CSS.escape(path)}"]`)) e.setAttribute("data-chosen", "");
    },
    /** Highlight the items standing for these node ids (hover on a code line). */
    link(ids) {
      linked = new Set();
      if (ids && ctx.vis) for (const id of ids) linked.add(ctx.vis.rep[id]);
      layers.nodes.selectAll("g.gs-item").classed("gs-linked", (d) => linked.has(d.key));
      svg.classed("gs-has-linked", linked.size > 0);
    },
    /** Back to the step's own view (the fitted one; see stepView). */
    fit(duration = 0) {
      if (!ctx.layout) return;
      view.userMoved = false;
      moveTo(stepView(), duration);
    },
    zoomBy(f) {
      svg.transition().duration(prefersReducedMotion() ? 0 : 200).call(zoomer.scaleBy, f);
    },
    /**
     * A graph bigger than its pane (shown at a readable scale, not shrunk): the step's nodes `ids`
     * are its focus; when none is in the fitted view, the view pans to the first (stepView). Reads
     * only the size a ResizeObserver measured.
     */
    follow(ids) {
      focus = ids;
      if (!ctx.vis || !ctx.layout || view.userMoved || !ctx.size.width || !ctx.size.height) return;
      moveTo(stepView(), 250);
    },
    /** Pan so that a node is in view (keyboard selection, inspector links). */
    reveal(id) {
      const { vis, layout } = ctx;
      if (!vis || !layout) return;
      const box = layout.items.get(vis.rep[id]);
      if (!box) return;
      const { width, height } = root.getBoundingClientRect();
      const t = zoomTransform(svg.node());
      const cx = t.applyX(box.x + box.w / 2);
      const cy = t.applyY(box.y + box.h / 2);
      if (cx < 0 || cy < 0 || cx > width || cy > height) {
        svg.transition().duration(prefersReducedMotion() ? 0 : 250).call(zoomer.translateTo, box.x + box.w / 2, box.y + box.h / 2);
      }
    },
  };
  return view;
}
