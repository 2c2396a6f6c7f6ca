// The graph view: SVG drawn with D3 data joins keyed by stable ids.
//
// Structure (what nodes exist, where they are) changes only when the trace or
// the set of expanded modules changes; stepping only sets attributes/classes on
// the same elements, and animates what the step's diff says changed.

import { select, zoom, zoomIdentity, easeCubicOut, easeLinear } from "./vendor/d3.js";
import { G, chipWidth } from "./layout.js";
import { accText, fmtGrad, groupStatus, nodeStatus, fmtShape } from "./model.js";

export function prefersReducedMotion() {
  return typeof matchMedia === "function" && matchMedia("(prefers-reduced-motion: reduce)").matches;
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

function short(text, max) {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

export function createGraphView(root, { onSelect, onHover, onToggleGroup, onProgressCancel } = {}) {
  root.classList.add("gs-graph");
  const svg = select(root)
    .append("svg")
    .attr("class", "gs-graph-svg")
    .attr("role", "group")
    .attr("aria-label", "Autograd graph")
    .attr("tabindex", "-1");
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

  const viewport = svg.append("g").attr("class", "gs-viewport");
  const gFrames = viewport.append("g").attr("class", "gs-frames");
  const gEdges = viewport.append("g").attr("class", "gs-edges");
  const gFlow = viewport.append("g").attr("class", "gs-flow");
  const gNodes = viewport.append("g").attr("class", "gs-nodes");

  const empty = select(root).append("div").attr("class", "gs-graph-empty").attr("hidden", true);
  const progress = select(root).append("div").attr("class", "gs-layout-progress").attr("hidden", true).attr("role", "status");

  const zoomer = zoom()
    .scaleExtent([0.02, 3])
    .on("zoom", (ev) => {
      viewport.attr("transform", ev.transform);
      if (ev.sourceEvent) view.userMoved = true;
      svg.classed("gs-far", ev.transform.k < 0.4);
      scheduleCull();
    });
  svg.call(zoomer).on("dblclick.zoom", null);

  let model = null;
  let layout = null;
  let vis = null;
  let current = null; // step object
  let selected = null;
  let linked = new Set();
  let animToken = 0;
  // the canvas size, kept by a ResizeObserver (reading it while painting would force a layout)
  const size = { width: 0, height: 0 };
  if (typeof ResizeObserver === "function") {
    new ResizeObserver(([e]) => {
      size.width = e.contentRect.width;
      size.height = e.contentRect.height;
    }).observe(root);
  }
  let buildToken = 0;

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
      model = m;
      vis = v;
      layout = l;
      const token = ++buildToken;
      svg.classed("gs-big", v.items.size > 300);
      const fresh = drawStructure();
      if (v.items.size > 300) {
        // Big graphs are virtual: an item's content is built when it first comes into view.
        for (const [el] of fresh) {
          el.__culled = true;
          el.style.display = "none";
        }
      } else {
        for (const [el, d] of fresh) buildItem(select(el), d);
      }
      void token;
      view.select(selected);
      view.link([]);
      cull();
      if (current) paint(current, null);
    },
    /** Show step `step` (model.step(i)); `diff` (diffSteps) animates what changed. */
    showStep(step, diff, { animate = true } = {}) {
      current = step;
      paint(step, animate && !prefersReducedMotion() ? diff : null);
    },
    select(id) {
      selected = id;
      gNodes.selectAll("g.gs-item").classed("gs-selected", (d) => d.kind === "node" && d.id === selected);
    },
    /** Highlight the items standing for these node ids (hover on a code line). */
    link(ids) {
      linked = new Set();
      if (ids && vis) for (const id of ids) linked.add(vis.rep[id]);
      gNodes.selectAll("g.gs-item").classed("gs-linked", (d) => linked.has(d.key));
      svg.classed("gs-has-linked", linked.size > 0);
    },
    fit(duration = 0) {
      if (!layout) return;
      view.userMoved = false;
      const { width, height } = root.getBoundingClientRect();
      if (!width || !height) return;
      const pad = 24;
      const top = 46; // below the toolbar
      const kw = (width - pad * 2) / Math.max(1, layout.width);
      const kh = (height - pad - top) / Math.max(1, layout.height);
      // Fit the whole graph, but never below a readable scale when it fits the
      // width: a tall graph (a stack of layers) is then shown from the top.
      const k = Math.min(1.5, kw, Math.max(kh, Math.min(0.6, kw)));
      const kk = Math.max(k, 0.02);
      zoomer.scaleExtent([Math.min(0.02, kk), 3]);
      const t = zoomIdentity
        .translate((width - layout.width * kk) / 2, Math.max(top, top + (height - top - pad - layout.height * kk) / 2))
        .scale(kk);
      if (duration && !prefersReducedMotion()) svg.transition().duration(duration).call(zoomer.transform, t);
      else svg.call(zoomer.transform, t);
    },
    zoomBy(f) {
      svg.transition().duration(prefersReducedMotion() ? 0 : 200).call(zoomer.scaleBy, f);
    },
    /** Pan so that a node is in view (keyboard selection, inspector links). */
    reveal(id) {
      if (!vis || !layout) return;
      const box = layout.items.get(vis.rep[id]);
      if (!box) return;
      const { width, height } = root.getBoundingClientRect();
      const t = svg.node().__zoom || zoomIdentity;
      const cx = t.applyX(box.x + box.w / 2);
      const cy = t.applyY(box.y + box.h / 2);
      if (cx < 0 || cy < 0 || cx > width || cy > height) {
        svg.transition().duration(prefersReducedMotion() ? 0 : 250).call(zoomer.translateTo, box.x + box.w / 2, box.y + box.h / 2);
      }
    },
  };

  // ------------------------------------------------------------ structure

  let drawnModel = null;
  let itemEls = []; // [element, datum] of every drawn item, in DOM order
  let edgeEls = [];
  let shownItems = []; // the built items not culled: the only ones a step paints
  let shownEdges = [];
  function drawStructure() {
    if (drawnModel !== model) {
      // a new trace: ids mean other nodes now, so nothing is reused
      gFrames.selectAll("*").remove();
      gEdges.selectAll("*").remove();
      gFlow.selectAll("*").remove();
      gNodes.selectAll("*").remove();
      selected = null;
      current = null; // a step of the old trace
      drawnModel = model;
    }
    const fresh = [];
    const items = [...vis.items.values()].filter((d) => layout.items.has(d.key));
    const frames = vis.frames.filter((f) => layout.frames.has(f.id));
    const edges = [...vis.edges.values()];

    gFrames
      .selectAll("g.gs-frame")
      .data(frames, (d) => d.id)
      .join(
        (enter) => {
          const g = enter.append("g").attr("class", "gs-frame");
          g.append("rect").attr("class", "gs-frame-box").attr("rx", 8);
          const head = g.append("g").attr("class", "gs-frame-head").attr("role", "button").attr("tabindex", 0);
          head.append("rect").attr("class", "gs-frame-head-bg").attr("rx", 4);
          head.append("text").attr("class", "gs-frame-label");
          head.on("click", (ev, d) => onToggleGroup && onToggleGroup(d.id, false)).on("keydown", (ev, d) => {
            if (ev.key === "Enter" || ev.key === " ") {
              ev.preventDefault();
              onToggleGroup && onToggleGroup(d.id, false);
            }
          });
          return g;
        },
        (update) => update,
        (exit) => exit.remove(),
      )
      .attr("data-group", (d) => d.id)
      .each(function (d) {
        const b = layout.frames.get(d.id);
        const g = select(this);
        g.select("rect.gs-frame-box").attr("x", b.x).attr("y", b.y).attr("width", b.w).attr("height", b.h);
        const label = `▾ ${d.id}`;
        g.select(".gs-frame-head").attr("aria-label", `Collapse module ${d.id}`);
        g.select("rect.gs-frame-head-bg").attr("x", b.x + 4).attr("y", b.y + 3).attr("width", Math.min(b.w - 8, label.length * 6.6 + 12)).attr("height", 17);
        g.select("text.gs-frame-label").attr("x", b.x + 10).attr("y", b.y + 15).text(short(label, Math.floor((b.w - 16) / 6.6)));
      });

    const edgeSel = gEdges
      .selectAll("path.gs-edge")
      .data(edges, (d) => d.key)
      .join((enter) => enter.append("path").attr("class", "gs-edge").attr("marker-end", "url(#gs-arrow)"))
      .attr("data-edge", (d) => d.key)
      .attr("d", (d) => edgePath(layout.edges.get(d.key), layout.items.get(d.from), layout.items.get(d.to)));

    const itemSel = gNodes
      .selectAll("g.gs-item")
      .data(items, (d) => d.key)
      .join(
        (enter) => enter.append("g").attr("class", "gs-item gs-building").each(function (d) {
          if (d.kind === "node") {
            this.setAttribute("data-node-id", d.id);
            this.setAttribute("data-op", model.nodes[d.id].op);
          } else this.setAttribute("data-group", d.group);
          fresh.push([this, d]);
        }),
        (update) => update,
        (exit) => exit.remove(),
      )
      .attr("transform", (d) => {
        const b = layout.items.get(d.key);
        return `translate(${b.x},${b.y})`;
      });
    // plain arrays for the per-step loops (no selection walk, no DOM query per step)
    itemEls = itemSel.nodes().map((el) => [el, el.__data__]);
    edgeEls = edgeSel.nodes().map((el) => [el, el.__data__]);
    return fresh;
  }

  function buildItem(g, d) {
    const b = layout.items.get(d.key);
    g.node().__gsBuilt = true;
    g.attr("class", `gs-item ${d.kind === "node" ? "gs-node" : "gs-group"}`).attr("tabindex", 0).attr("role", "button");
    if (d.kind === "group") {
      const grp = model.groups.get(d.group);
      g.attr("data-group", d.group);
      g.append("rect").attr("class", "gs-group-shadow").attr("x", 5).attr("y", 5).attr("width", b.w).attr("height", b.h).attr("rx", 8);
      g.append("rect").attr("class", "gs-body").attr("width", b.w).attr("height", b.h).attr("rx", 8);
      const rel = grp.parent ? d.group.slice(grp.parent.length + 1) : d.group;
      g.append("text").attr("class", "gs-group-name").attr("x", 10).attr("y", 18).text(short(`▸ ${rel}`, 24));
      g.append("title").text(`${d.group}: click to expand`);
      g.append("text").attr("class", "gs-group-count").attr("x", 10).attr("y", 34).text(`${grp.size} nodes`);
      g.append("text").attr("class", "gs-group-state").attr("x", 10).attr("y", 49);
      g.on("click", () => onToggleGroup && onToggleGroup(d.group, true));
      g.on("keydown", (ev) => {
        if (ev.key === "Enter" || ev.key === " ") {
          ev.preventDefault();
          onToggleGroup && onToggleGroup(d.group, true);
        }
      });
      g.on("mouseenter", () => onHover && onHover(d.members)).on("mouseleave", () => onHover && onHover(null));
      return;
    }
    const n = model.nodes[d.id];
    g.attr("data-node-id", n.id).attr("data-op", n.op);
    if (n.isLeaf) g.classed("gs-leaf", true);
    if (n.gradGraph) g.classed("gs-gradgraph", true);
    g.append("rect").attr("class", "gs-body").attr("width", b.w).attr("height", b.h).attr("rx", n.isLeaf ? 14 : 6);
    let y = G.padY + 13;
    if (n.isLeaf) {
      g.append("text").attr("class", "gs-leaf-name").attr("x", G.padX).attr("y", y);
      g.append("text").attr("class", "gs-op-small").attr("x", b.w - G.padX).attr("y", y).attr("text-anchor", "end").text("leaf");
      y += G.title - 13;
      const rows = Math.max(1, model.maxGradRows.get(n.id) ?? 1);
      for (let i = 0; i < rows; i++) {
        const t = g.append("text").attr("class", "gs-grad-row").attr("x", G.padX).attr("y", y + 12 + i * G.gradRow);
        t.append("tspan").attr("class", "gs-grad-label").text("grad ");
        t.append("tspan").attr("class", "gs-grad-text");
      }
      y += rows * G.gradRow;
      g.append("text").attr("class", "gs-acc").attr("x", G.padX).attr("y", y + 11);
    } else {
      g.append("text").attr("class", "gs-op").attr("x", G.padX).attr("y", y).text(n.op);
      y += G.title - 13;
      g.append("text").attr("class", "gs-vars").attr("x", G.padX).attr("y", y + 11);
      y += G.vars;
      const chips = g.append("g").attr("class", "gs-chips").attr("transform", `translate(${G.padX},${y + 2})`);
      if (n.savedTensors.length) {
        let x = 0;
        for (const s of n.savedTensors) {
          const w = chipWidth(s.name);
          const c = chips.append("g").attr("class", "gs-chip").attr("data-saved", s.name).attr("transform", `translate(${x},0)`);
          c.append("rect").attr("width", w).attr("height", 16).attr("rx", 8);
          c.append("text").attr("x", w / 2).attr("y", 11.5).attr("text-anchor", "middle").text(s.name);
          x += w + 4;
        }
      } else {
        chips.append("text").attr("class", "gs-nothing").attr("y", 12).text("∅ nothing saved");
      }
      y += G.chips;
      const rows = model.maxGradRows.get(n.id) ?? 0;
      for (let i = 0; i < rows; i++) {
        const t = g.append("text").attr("class", "gs-grad-row").attr("x", G.padX).attr("y", y + 12 + i * G.gradRow);
        t.append("tspan").attr("class", "gs-grad-label");
        t.append("tspan").attr("class", "gs-grad-text");
      }
    }
    // badges above the node: execution order, freed / retained / stale / failed
    const order = g.append("g").attr("class", "gs-order").attr("transform", `translate(${b.w},0)`);
    order.append("circle").attr("r", 9);
    order.append("text").attr("text-anchor", "middle").attr("y", 3.5);
    g.append("g").attr("class", "gs-badge").attr("transform", "translate(8,-9)").call((bg) => {
      bg.append("rect").attr("height", 15).attr("rx", 7.5);
      bg.append("text").attr("x", 7).attr("y", 11);
    });
    g.on("click", () => onSelect && onSelect(n.id));
    g.on("keydown", (ev) => {
      if (ev.key === "Enter" || ev.key === " ") {
        ev.preventDefault();
        onSelect && onSelect(n.id);
      }
    });
    g.on("mouseenter", () => onHover && onHover([n.id])).on("mouseleave", () => onHover && onHover(null));
    g.on("focus", () => onHover && onHover([n.id])).on("blur", () => onHover && onHover(null));
  }

  // ------------------------------------------------------------ per step

  // What a step shows on each item, as a string: an item's DOM is a function of its
  // signature, so stepping touches only items whose signature differs from what they show.
  // Computed once per step (model.step(i) objects are cached), without reading the DOM.
  const sigCache = new WeakMap(); // step → {items: Map(item key → sig), groups, edges: Map(edge key → sig), flowKeys}
  function stepSigs(step) {
    let s = sigCache.get(step);
    if (s && s.vis === vis) return s;
    // a collapsed module's status walks all its members: kept for its paint
    s = { vis, items: new Map(), groups: new Map(), edges: new Map(), flowKeys: new Map() };
    const changes = model.gradChanges(step.index);
    const dropped = new Set(step.dropped);
    for (const d of vis.items.values()) {
      if (d.kind === "group") {
        const gs = groupStatus(model, step, d.members);
        s.groups.set(d.key, gs);
        s.items.set(d.key, groupSig(gs));
      } else s.items.set(d.key, nodeSig(step, d.id, changes, dropped));
    }
    // the step's graph is the `next` of its alive nodes; gradient flowed along step.flow
    for (const f of step.flow) {
      const key = `${vis.rep[f.to]}>${vis.rep[f.from]}`;
      if (!s.flowKeys.has(key) || s.flowKeys.get(key) > f.order) s.flowKeys.set(key, f.order);
    }
    for (const d of vis.edges.values()) {
      const alive = d.pairs.some(([a, b]) => step.state.has(a) && step.state.has(b));
      const isNew = alive && d.pairs.some(([, b]) => model.nodes[b].step === step.index);
      s.edges.set(d.key, `${alive}${s.flowKeys.has(d.key)}${Boolean(isNew)}`);
    }
    sigCache.set(step, s);
    return s;
  }

  function nodeSig(step, id, changes, dropped) {
    const n = model.nodes[id];
    const st = step.state.has(id) ? nodeStatus(model, step, id) : { alive: false, dropped: dropped.has(id) };
    const tensors = (st.alive && step.gradsOf.get(id)) || [];
    const acc = n.isLeaf && tensors[0] ? changes.get(tensors[0].name) : null;
    const badge = statusBadge(model, step, n, st);
    return [
      st.alive, st.dropped, st.isNew, st.executed, st.failed, st.freed, st.stale, st.retained, st.order,
      st.alive ? st.vars.join(",") : "", (st.staleSaved || []).join(","), badge ? badge.text : "",
      tensors.map((t) => `${t.name}=${fmtGrad(t.grad)}${t.grad && t.grad.has_grad_fn ? "*" : ""}`).join("|"),
      acc ? `${fmtGrad(acc.old)}>${fmtGrad(acc.total)}` : "", step.isCall ? 1 : 0,
    ].join(";");
  }

  function groupSig(s) {
    return `${s.alive};${s.executed};${s.failed};${s.withTensors};${s.freed};${s.stale};${s.isNew}`;
  }

  function paint(step, diff) {
    const token = ++animToken;
    gFlow.selectAll("*").interrupt().remove();
    if (!step) return;
    const sigs = stepSigs(step);
    // only what is on screen; off-screen items are painted when they come into view (cull)
    for (const [el, d] of shownItems) {
      const sig = sigs.items.get(d.key);
      if (sig !== el.__gsSig) paintItem(el, d, step, sig);
    }
    for (const [el, d] of shownEdges) {
      const sig = sigs.edges.get(d.key);
      if (sig !== el.__gsSig) paintEdge(el, d, step, sigs.flowKeys, sig);
    }
    if (shownItems.length < itemEls.length) deferHooks();
    if (diff) animate(step, diff, token, sigs.flowKeys);
  }

  /** Paint one item at a step from scratch (its signature differs, or it just came into view). */
  function paintItem(el, d, step, sig) {
    el.__gsSig = sig;
    el.__gsHooks = sig;
    if (d.kind === "group") return paintGroup(select(el), d, stepSigs(step).groups.get(d.key));
    const n = model.nodes[d.id];
    const st = nodeStatus(model, step, n.id);
    const tensors = (step && st.alive && step.gradsOf.get(n.id)) || [];
    const acc = n.isLeaf && tensors[0] ? model.gradChanges(step.index).get(tensors[0].name) : null;
    paintNode(el, refsOf(el, n), n, st, tensors, acc, statusBadge(model, step, n, st), step);
  }

  /** Transient classes for a step reached by stepping forward: pops, the run order, freeing, particles. */
  function animate(step, diff, token, flowKeys) {
    const changes = model.gradChanges(step.index);
    const flowing = diff.flow.length > 0;
    const dt = flowing ? Math.max(12, Math.min(140, 1600 / Math.max(1, step.order.length))) : 0;
    // per-node pulses only while they can be followed by eye
    const pulses = flowing && step.order.length <= 150;
    const pending = [];
    const freedNow = new Set(diff.freed);
    const later = (el, cls, at, until) => {
      if (at <= 0) el.classList.add(cls);
      else pending.push([at, () => el.classList.add(cls)]);
      pending.push([until, () => el.classList.remove(cls)]);
    };
    for (const [el, d] of shownItems) {
      if (d.kind !== "node") continue;
      const s = step.state.get(d.id);
      if (!s) continue;
      if (diff.forward && s.isNew) later(el, "gs-pop", 0, 700);
      if (!flowing || s.order === null || s.order === undefined) continue;
      const when = s.order * dt;
      if (s.freed && freedNow.has(d.id)) later(el, "gs-freeing", 0, when);
      if (pulses) later(el, "gs-running", when, when + 450);
      const n = model.nodes[d.id];
      const leafTensor = n.isLeaf ? (step.gradsOf.get(d.id) || [])[0] : null;
      if (leafTensor && changes.get(leafTensor.name)) later(el, "gs-grad-hold", 0, when + dt);
    }
    schedule(pending, token);
    if (flowing) animateFlow(flowKeys, dt, token);
  }

  function paintEdge(el, d, step, flowKeys, sig = null) {
    const alive = step ? d.pairs.some(([a, b]) => step.state.has(a) && step.state.has(b)) : false;
    const flow = flowKeys.has(d.key);
    const isNew = alive && step && d.pairs.some(([, b]) => model.nodes[b].step === step.index);
    el.__gsSig = sig ?? (step ? `${alive}${flow}${Boolean(isNew)}` : null);
    const cl = el.classList;
    cl.toggle("gs-absent", !alive);
    cl.toggle("gs-edge-flow", flow);
    cl.toggle("gs-edge-new", Boolean(isNew));
    // gradient flows against the forward arrow: point it at the input instead
    if (flow) {
      el.removeAttribute("marker-end");
      el.setAttribute("marker-start", "url(#gs-arrow-flow)");
    } else {
      el.setAttribute("marker-end", "url(#gs-arrow)");
      el.removeAttribute("marker-start");
    }
  }

  // Viewport culling for big graphs: items and edges outside the view (plus a
  // margin) are display:none, so the browser restyles and paints only what shows.
  let cullPending = false;
  function scheduleCull() {
    if (cullPending) return;
    cullPending = true;
    requestAnimationFrame(() => {
      cullPending = false;
      cull();
    });
  }

  function cull() {
    if (!layout || !vis) return;
    const big = vis.items.size > 300;
    const t = svg.node().__zoom || zoomIdentity;
    const m = 300; // px of margin around the view
    const x0 = t.invertX(-m);
    const x1 = t.invertX((size.width || 2000) + m);
    const y0 = t.invertY(-m);
    const y1 = t.invertY((size.height || 2000) + m);
    const inside = (b) => b && b.x + b.w >= x0 && b.x <= x1 && b.y + b.h >= y0 && b.y <= y1;
    const sigs = current ? stepSigs(current) : null;
    for (const [el, d] of itemEls) {
      const hide = big && !inside(layout.items.get(d.key));
      if (Boolean(el.__culled) === hide) continue;
      el.__culled = hide;
      el.style.display = hide ? "none" : "";
      if (hide) continue;
      if (!el.__gsBuilt) buildItem(select(el), d);
      // it shows the step it was last painted at: repaint if that differs
      if (sigs && el.__gsSig !== sigs.items.get(d.key)) paintItem(el, d, current, sigs.items.get(d.key));
    }
    gFrames.selectAll("g.gs-frame").each(function (d) {
      const hide = big && !inside(layout.frames.get(d.id));
      if (Boolean(this.__culled) === hide) return;
      this.__culled = hide;
      this.style.display = hide ? "none" : "";
    });
    for (const [el, d] of edgeEls) {
      const a = layout.items.get(d.from);
      const b = layout.items.get(d.to);
      const hide = big && !(inside(a) || inside(b) || (a && b && Math.min(a.y, b.y) <= y1 && Math.max(a.y, b.y) >= y0 && Math.min(a.x, b.x) <= x1 && Math.max(a.x + a.w, b.x + b.w) >= x0));
      if (Boolean(el.__culled) === hide) continue;
      el.__culled = hide;
      el.style.display = hide ? "none" : "";
      if (!hide && sigs && el.__gsSig !== sigs.edges.get(d.key)) paintEdge(el, d, current, sigs.flowKeys, sigs.edges.get(d.key));
    }
    shownItems = itemEls.filter(([el]) => !el.__culled && el.__gsBuilt);
    shownEdges = edgeEls.filter(([el]) => !el.__culled);
  }

  /** Run timed class changes from one timer loop (not one setTimeout per node). */
  function schedule(pending, token) {
    if (!pending.length) return;
    pending.sort((a, b) => a[0] - b[0]);
    const t0 = performance.now();
    let k = 0;
    const tick = () => {
      if (token !== animToken) {
        // a newer step took over: settle what is left
        for (; k < pending.length; k++) pending[k][1]();
        return;
      }
      const now = performance.now() - t0;
      while (k < pending.length && pending[k][0] <= now) pending[k++][1]();
      if (k < pending.length) requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  }

  function refsOf(el, n) {
    if (el.__gs) return el.__gs;
    const g = select(el);
    const r = {
      g,
      name: el.querySelector(n.isLeaf ? "text.gs-leaf-name" : "text.gs-vars"),
      rows: [...el.querySelectorAll("text.gs-grad-row")].map((row) => ({
        row,
        label: row.querySelector(".gs-grad-label"),
        text: row.querySelector(".gs-grad-text"),
      })),
      acc: el.querySelector("text.gs-acc"),
      chips: [...el.querySelectorAll("g.gs-chip")],
      order: el.querySelector("g.gs-order"),
      orderText: el.querySelector("g.gs-order text"),
      badge: el.querySelector("g.gs-badge"),
      badgeText: el.querySelector("g.gs-badge text"),
      badgeRect: el.querySelector("g.gs-badge rect"),
    };
    el.__gs = r;
    return r;
  }

  const HOOKS = ["freed", "stale", "executed", "failed", "alive"];
  function setHooks(el, st) {
    // only the attributes that change: each write restyles the element
    const was = el.__hookVals || [];
    const now = HOOKS.map((k) => (st[k] ? "true" : "false"));
    for (let i = 0; i < HOOKS.length; i++) if (was[i] !== now[i]) el.setAttribute(`data-${HOOKS[i]}`, now[i]);
    el.__hookVals = now;
  }

  // The data-* hooks of off-screen nodes of a big graph: written in small tasks after the step's
  // frame (thousands of attribute writes would not fit in it), for the step shown by then.
  let hookCursor = 0;
  let hookTimer = null;
  function deferHooks() {
    hookCursor = 0;
    // a task queued from requestAnimationFrame runs once that frame is painted (a plain timeout
    // may run before it, and hold the step's paint back)
    if (hookTimer === null) hookTimer = requestAnimationFrame(() => (hookTimer = setTimeout(flushHooks, 0)));
  }
  function flushHooks() {
    hookTimer = null;
    if (!current) return;
    const sigs = stepSigs(current);
    const end = Math.min(itemEls.length, hookCursor + 400);
    for (; hookCursor < end; hookCursor++) {
      const [el, d] = itemEls[hookCursor];
      if (d.kind !== "node") continue;
      const sig = sigs.items.get(d.key);
      if (el.__gsHooks === sig) continue;
      setHooks(el, nodeStatus(model, current, d.id));
      el.__gsHooks = sig;
    }
    if (hookCursor < itemEls.length) hookTimer = setTimeout(flushHooks, 0);
    else root.dispatchEvent(new CustomEvent("gs-hooks-settled"));
  }

  function paintNode(el, r, n, st, tensors, acc, badge, step) {
    const dropped = !st.alive && st.dropped;
    const cl = el.classList;
    cl.toggle("gs-absent", !st.alive && !dropped);
    cl.toggle("gs-dropped", Boolean(dropped));
    cl.toggle("gs-new", Boolean(st.alive && st.isNew));
    cl.toggle("gs-executed", Boolean(st.executed));
    cl.toggle("gs-failed", Boolean(st.failed));
    cl.toggle("gs-freed", Boolean(st.freed));
    cl.toggle("gs-stale", Boolean(st.stale));
    cl.toggle("gs-retained", Boolean(st.retained));
    setHooks(el, st);
    const vars = st.alive ? st.vars : [];
    if (n.isLeaf) {
      // inside its module's frame a parameter goes by its name in that module
      const rel = (x) => (n.group && x.startsWith(`${n.group}.`) ? x.slice(n.group.length + 1) : x);
      r.name.textContent = short(vars.length ? vars.map(rel).join(", ") : rel(n.tensor || "(unnamed leaf)"), 30);
    }
    else r.name.textContent = vars.length ? short(`${vars.join(", ")}.grad_fn`, 30) : "";
    // grads held by tensors whose node this is
    r.rows.forEach(({ row, label, text }, i) => {
      const t = tensors[i];
      if (!t && !(n.isLeaf && i === 0)) {
        // hidden rows hold nothing: the DOM stays a function of the step, however it was reached
        row.setAttribute("visibility", "hidden");
        text.removeAttribute("data-grad-for");
        text.textContent = "";
        if (!n.isLeaf) label.textContent = "";
        row.classList.remove("gs-grad-none", "gs-grad-fn");
        return;
      }
      row.removeAttribute("visibility");
      const name = t ? t.name : n.tensor || "";
      if (!n.isLeaf) label.textContent = `${short(name, 12)}.grad `;
      text.setAttribute("data-grad-for", name);
      text.textContent = fmtGrad(t ? t.grad : null);
      row.classList.toggle("gs-grad-none", !(t && t.grad));
      row.classList.toggle("gs-grad-fn", Boolean(t && t.grad && t.grad.has_grad_fn));
    });
    // .grad accumulating: old + new = total
    if (n.isLeaf) {
      cl.toggle("gs-accumulated", Boolean(acc && acc.old));
      cl.toggle("gs-grad-written", Boolean(acc && !acc.old));
      if (acc && acc.old) r.acc.textContent = accText(acc.old, acc.total);
      else if (acc) r.acc.textContent = step && step.isCall ? "= new (was None)" : "";
      else r.acc.textContent = "";
    }
    // saved tensors: held / freed / stale / retained
    const staleNames = new Set(st.staleSaved || []);
    for (const c of r.chips) {
      const nm = c.getAttribute("data-saved");
      const isStale = st.stale && (staleNames.size === 0 || staleNames.has(nm));
      c.classList.toggle("gs-chip-freed", Boolean(st.freed));
      c.classList.toggle("gs-chip-stale", Boolean(isStale && !st.freed));
      c.classList.toggle("gs-chip-retained", Boolean(st.retained));
    }
    const hasOrder = st.order !== null && st.order !== undefined;
    if (hasOrder) r.order.removeAttribute("visibility");
    else r.order.setAttribute("visibility", "hidden");
    r.orderText.textContent = hasOrder ? String(st.order) : "";
    r.badge.setAttribute("class", `gs-badge ${badge ? badge.cls : ""}`);
    if (badge) {
      r.badge.removeAttribute("visibility");
      r.badgeText.textContent = badge.text;
      r.badgeRect.setAttribute("width", String(badge.text.length * 6.3 + 14));
    } else {
      r.badge.setAttribute("visibility", "hidden");
      r.badgeText.textContent = "";
      r.badgeRect.removeAttribute("width");
    }
    el.setAttribute("aria-label", ariaFor(model, step, n, st, tensors));
  }

  /** Points along an edge, from its consumer end up to its input end (no DOM reads). */
  function edgeSamples(d) {
    const pts = layout.edges.get(d.key);
    if (pts && pts.length >= 2) return pts.slice().reverse();
    const a = layout.items.get(d.from);
    const b = layout.items.get(d.to);
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

  function animateFlow(flowKeys, dt, token) {
    const t = svg.node().__zoom || zoomIdentity;
    const { width, height } = size;
    const inView = (b) => b && t.applyX(b.x + b.w) > 0 && t.applyX(b.x) < width && t.applyY(b.y + b.h) > 0 && t.applyY(b.y) < height;
    const edges = [];
    for (const [key, order] of flowKeys) {
      const d = vis.edges.get(key);
      if (!d || !layout.items.has(d.from) || !layout.items.has(d.to)) continue;
      if (inView(layout.items.get(d.from)) || inView(layout.items.get(d.to))) edges.push({ d, order });
    }
    edges.sort((a, b) => a.order - b.order);
    const cap = 160;
    const stride = Math.max(1, Math.ceil(edges.length / cap));
    for (let i = 0; i < edges.length; i += stride) {
      const { d, order } = edges[i];
      const pts = edgeSamples(d);
      // cumulative length, to move at an even speed
      const cum = [0];
      for (let k = 1; k < pts.length; k++) cum.push(cum[k - 1] + Math.hypot(pts[k][0] - pts[k - 1][0], pts[k][1] - pts[k - 1][1]));
      const total = cum[cum.length - 1] || 1;
      const at = (u) => {
        const target = u * total;
        let k = 1;
        while (k < cum.length - 1 && cum[k] < target) k++;
        const f = (target - cum[k - 1]) / Math.max(1e-6, cum[k] - cum[k - 1]);
        return [pts[k - 1][0] + (pts[k][0] - pts[k - 1][0]) * f, pts[k - 1][1] + (pts[k][1] - pts[k - 1][1]) * f];
      };
      const [x0, y0] = pts[0];
      const dot = gFlow.append("circle").attr("class", "gs-particle").attr("r", 4.5).attr("cx", x0).attr("cy", y0).style("opacity", 0);
      dot
        .transition("flow")
        .delay(order * dt)
        .duration(Math.max(220, dt * 2.2))
        .ease(easeLinear)
        .style("opacity", 1)
        .attrTween("transform", () => (u) => {
          const [x, y] = at(u);
          return `translate(${x - x0},${y - y0})`;
        })
        .transition()
        .duration(200)
        .style("opacity", 0)
        .remove();
    }
    void token;
  }

  function paintGroup(g, d, s) {
    g.classed("gs-absent", s.alive === 0)
      .classed("gs-executed", s.executed > 0)
      .classed("gs-failed", s.failed > 0)
      .classed("gs-freed", s.withTensors > 0 && s.freed >= s.withTensors)
      .classed("gs-stale", s.stale > 0)
      .classed("gs-new", s.isNew > 0)
      .attr("data-freed", s.withTensors > 0 && s.freed >= s.withTensors ? "true" : "false")
      .attr("data-executed", s.executed > 0 ? "true" : "false")
      .attr("data-stale", s.stale > 0 ? "true" : "false");
    const parts = [];
    if (s.executed) parts.push(`${s.executed} ran`);
    if (s.failed) parts.push("✕ failed");
    if (s.withTensors) parts.push(s.freed ? `saved: ${s.freed}/${s.withTensors} freed` : `saved: ${s.withTensors} held`);
    if (s.stale) parts.push(`${s.stale} stale`);
    g.select("text.gs-group-state").text(parts.join(" · "));
    g.attr("aria-label", `Module ${d.group}, ${model.groups.get(d.group).size} nodes${parts.length ? `, ${parts.join(", ")}` : ""}. Press Enter to expand.`);
  }

  return view;
}

function statusBadge(model, step, n, st) {
  if (!st.alive) return st.dropped ? { cls: "gs-b-dropped", text: "dropped" } : null;
  if (st.failed) return { cls: "gs-b-failed", text: st.freed ? "✕ failed: freed" : st.stale ? "✕ failed: stale" : "✕ failed here" };
  if (st.stale) {
    const since = model.staleSince.get(n.id);
    const line = since !== undefined ? model.steps[since].line : null;
    return { cls: "gs-b-stale", text: line ? `! stale: modified at line ${line}` : "! stale" };
  }
  if (st.freed) return { cls: "gs-b-freed", text: "freed" };
  if (st.retained) return { cls: "gs-b-retained", text: "retained" };
  if (n.gradGraph) return { cls: "gs-b-gradgraph", text: "create_graph" };
  return null;
}

function ariaFor(model, step, n, st, tensors) {
  const parts = [];
  if (n.isLeaf) parts.push(`Leaf ${(st.vars && st.vars.join(", ")) || n.tensor || ""}`);
  else parts.push(`${n.op}${st.vars && st.vars.length ? `, grad_fn of ${st.vars.join(", ")}` : ""}`);
  if (n.line !== null) parts.push(`line ${n.line}`);
  if (!st.alive) parts.push(st.dropped ? "dropped" : "not created yet");
  if (st.executed) parts.push(`ran ${st.order !== null ? `#${st.order}` : ""}`);
  if (st.failed) parts.push("failed here");
  if (n.savedTensors.length) {
    parts.push(`saved ${n.savedTensors.map((s) => s.name).join(", ")}: ${st.freed ? "freed" : st.stale ? "stale" : st.retained ? "retained" : "held"}`);
  } else if (!n.isLeaf) parts.push("nothing saved");
  for (const t of tensors) parts.push(`${t.name}.grad ${fmtGrad(t.grad)}`);
  if (n.isLeaf && !tensors.length) parts.push("grad None");
  return parts.join("; ");
}

export { fmtShape };
