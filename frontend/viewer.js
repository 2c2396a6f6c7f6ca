// The viewer: stepper + graph + inspector for one trace. Used by the app (with
// the editor as its code pane) and by embeds/static exports (embed.js).
//
// The view is a pure function of (trace, step): setStep(i) reads model.step(i)
// and sets attributes; diffSteps(i-1, i) only decides what to animate.

import {
  buildModel, diffSteps, initialExpanded, visibleGraph, stepTitle, callFlags,
  fmtBytes, limitName, fmtGrad, fmtShape, fmtValues, nodeStatus, modulePath,
} from "./model.js";
import { layoutGraph, deserializeLayout } from "./layout.js";
import { createGraphView, prefersReducedMotion } from "./graph.js";
import { renderNarration } from "./narration.js";
import { h } from "./dom.js";

const WORKER_ITEMS = 400;

const svgIcon = (d) => `<svg viewBox="0 0 16 16" width="14" height="14" aria-hidden="true" focusable="false"><path d="${d}" fill="currentColor"/></svg>`;
const ICONS = {
  first: svgIcon("M3 2h2v12H3zM14 2v12L6 8z"),
  prev: svgIcon("M12 2v12L4 8z"),
  play: svgIcon("M4 2l10 6-10 6z"),
  pause: svgIcon("M3 2h4v12H3zM9 2h4v12H9z"),
  next: svgIcon("M4 2v12l8-6z"),
  last: svgIcon("M11 2h2v12h-2zM2 2v12l8-6z"),
}; // lay out bigger visible graphs in the worker

function layoutInput(model) {
  // what the worker needs to lay out (structured-cloneable)
  return {
    nodes: model.nodes,
    edges: model.edges,
    groups: model.groups,
    rootGroups: model.rootGroups,
    rootNodes: model.rootNodes,
    maxGradRows: model.maxGradRows,
    gradWidth: model.gradWidth,
    varsWidth: model.varsWidth,
    accWidth: model.accWidth,
  };
}

/**
 * createViewer(el, options) → viewer
 * options.code: { setMarks({current, linked, errors}), revealLine(n) } — the code pane
 * options.slots: { stepper, graph, panels } — elements to build into (defaults: inside el)
 * options.onStep(i), options.workerUrl
 */
export function createViewer(el, options = {}) {
  const code = options.code || null;
  const slots = options.slots || {};
  el.classList.add("gs-viewer");
  const stepperEl = slots.stepper || el.appendChild(h("div"));
  const graphHost = slots.graph || el.appendChild(h("div"));
  const panelsEl = slots.panels || el.appendChild(h("div"));

  // ---------------------------------------------------------- stepper DOM
  stepperEl.classList.add("gs-stepper");
  stepperEl.setAttribute("role", "group");
  stepperEl.setAttribute("aria-label", "Steps");
  stepperEl.dataset.step = "0";
  stepperEl.dataset.steps = "0";
  const btn = (label, icon, on, extra = {}) => {
    const b = h("button", { type: "button", class: "gs-btn gs-icon-btn", "aria-label": label, title: label, onclick: on, ...extra });
    b.innerHTML = ICONS[icon];
    return b;
  };
  const bFirst = btn("First step (Home)", "first", () => go(0));
  const bPrev = btn("Previous step (←)", "prev", () => go(index - 1));
  const bPlay = btn("Play (space)", "play", () => togglePlay(), { "aria-pressed": "false", class: "gs-btn gs-icon-btn gs-play" });
  const bNext = btn("Next step (→)", "next", () => go(index + 1));
  const bLast = btn("Last step (End)", "last", () => go(steps() - 1));
  bNext.classList.add("gs-next");
  const counter = h("span", { class: "gs-counter", "aria-live": "polite" });
  const slider = h("input", { type: "range", min: 0, max: 0, value: 0, step: 1, class: "gs-slider", "aria-label": "Step" });
  slider.addEventListener("input", () => go(Number(slider.value)));
  const timeline = h("ol", { class: "gs-timeline", "aria-label": "Timeline of steps" });
  const caption = h("div", { class: "gs-caption" });
  stepperEl.append(
    h("div", { class: "gs-controls" }, bFirst, bPrev, bPlay, bNext, bLast, counter, slider),
    timeline,
  );

  // ---------------------------------------------------------- graph DOM
  graphHost.classList.add("gs-graph-host");
  const banner = h("div", { class: "gs-banner", "aria-live": "polite", role: "region", "aria-label": "What this step did" });
  const toolbar = h("div", { class: "gs-toolbar", role: "toolbar", "aria-label": "Graph view" },
    h("button", { type: "button", class: "gs-btn", title: "Zoom in", "aria-label": "Zoom in", onclick: () => graph.zoomBy(1.3) }, "+"),
    h("button", { type: "button", class: "gs-btn", title: "Zoom out", "aria-label": "Zoom out", onclick: () => graph.zoomBy(1 / 1.3) }, "−"),
    h("button", { type: "button", class: "gs-btn", title: "Fit the graph (f)", "aria-label": "Fit graph to view", onclick: () => graph.fit(300) }, "Fit"),
    h("button", { type: "button", class: "gs-btn gs-expand-all", title: "Expand every module", onclick: () => expandAll() }, "Expand all"),
    h("button", { type: "button", class: "gs-btn gs-collapse-all", title: "Collapse modules", onclick: () => collapseAll() }, "Collapse"),
  );
  const legend = h("details", { class: "gs-legend" },
    h("summary", {}, "Legend"),
    h("ul", {},
      h("li", {}, h("span", { class: "gs-key gs-key-op" }), "op node (grad_fn), chips = saved tensors"),
      h("li", {}, h("span", { class: "gs-key gs-key-leaf" }), "leaf (AccumulateGrad) with its .grad"),
      h("li", {}, h("span", { class: "gs-key gs-key-held" }), "saved tensor held"),
      h("li", {}, h("span", { class: "gs-key gs-key-freed" }), "freed (released by backward)"),
      h("li", {}, h("span", { class: "gs-key gs-key-retained" }), "retained (retain_graph=True)"),
      h("li", {}, h("span", { class: "gs-key gs-key-stale" }), "stale (modified in place)"),
      h("li", {}, h("span", { class: "gs-key gs-key-flow" }), "gradient flow, numbered in engine order"),
      h("li", {}, h("span", { class: "gs-key gs-key-failed" }), "where a call failed"),
      h("li", {}, h("span", { class: "gs-key gs-key-gradgraph" }), "graph of a gradient (create_graph=True)"),
    ),
  );
  const canvas = h("div", { class: "gs-graph-canvas" });
  graphHost.append(banner, h("div", { class: "gs-graph-frame" }, toolbar, legend, canvas));
  const graph = createGraphView(canvas, {
    onSelect: (id) => selectNode(id),
    onHover: (ids) => hoverNodes(ids),
    onToggleGroup: (id, open) => toggleGroup(id, open),
  });

  // Keep the graph fitted while the user has not zoomed or panned it.
  if (typeof ResizeObserver === "function") {
    let last = "";
    new ResizeObserver(([entry]) => {
      const r = entry.contentRect;
      const key = `${Math.round(r.width)}x${Math.round(r.height)}`;
      if (key === last) return;
      last = key;
      if (model && !graph.userMoved) graph.fit();
    }).observe(canvas);
  }

  // ---------------------------------------------------------- panels DOM
  panelsEl.classList.add("gs-panels");
  const inspector = h("section", { class: "gs-panel gs-inspector", "aria-label": "Inspector" });
  const tensorsPanel = h("section", { class: "gs-panel gs-tensors", "aria-label": "Tensors at this step" });
  const chartPanel = h("section", { class: "gs-panel gs-chart", "aria-label": "Bytes held by saved tensors" });
  const outputPanel = h("section", { class: "gs-panel gs-output", "aria-label": "Output of this step" });
  panelsEl.append(inspector, tensorsPanel, chartPanel, outputPanel);

  // ---------------------------------------------------------- state
  let model = null;
  let index = 0;
  let expanded = new Set();
  let layoutCache = new Map();
  let worker = null;
  let layoutReq = 0;
  let selected = null;
  let playing = null;
  let lineHover = null;
  let nodeHover = null;
  let fitted = false;
  const steps = () => (model ? model.steps.length : 0);

  const viewer = {
    el,
    get model() {
      return model;
    },
    get step() {
      return index;
    },
    /** Show a trace; returns a promise resolved when its graph is painted. */
    async setTrace(trace, { step = 0 } = {}) {
      stop();
      model = buildModel(trace);
      layoutCache = new Map();
      showAllTensors = false;
      if (worker) worker.postMessage({ type: "init", graph: layoutInput(model) });
      selected = null;
      fitted = false;
      expanded = initialExpanded(model);
      index = Math.max(0, Math.min(step, steps() - 1));
      buildTimeline();
      renderChart();
      el.classList.toggle("gs-no-modules", model.groups.size === 0);
      if (!steps()) {
        await graph.setGraph(model, visibleGraph(model, expanded), { items: new Map(), frames: new Map(), edges: new Map(), width: 0, height: 0 });
        graph.setEmpty(emptyMessage(model));
        update(false);
        return;
      }
      graph.setEmpty(null);
      await relayout();
      update(false);
      graph.fit(); // after the banner and panels took their height
    },
    setStep: (i) => go(i, { animate: false }),
    next: () => go(index + 1),
    prev: () => go(index - 1),
    play: () => !playing && togglePlay(),
    stop,
    handleKey,
    selectNode,
    /** Highlight the nodes created on a code line (hover in the code pane). */
    hoverLine(line) {
      lineHover = line;
      graph.link(line && model ? model.byLine.get(line) || [] : []);
    },
    expand: (id) => toggleGroup(id, true),
    expandAll,
    collapseAll,
    fit: () => graph.fit(),
    get expanded() {
      return new Set(expanded);
    },
    graphView: graph,
    destroy() {
      stop();
      if (worker) worker.terminate();
      el.replaceChildren();
    },
  };

  function emptyMessage(m) {
    const t = m.trace;
    if (t.status === "error" && t.error) return `No graph: the snippet raised ${t.error.type} before building any autograd node${t.error.line ? ` (line ${t.error.line})` : ""}.`;
    if (t.status === "timeout") return "No graph: the run was stopped by the time limit before it finished, and what ran is lost.";
    if (t.status === "limit") return `No graph: the run hit the ${limitName(t.limit)} limit.`;
    if (t.status === "crashed") return "No graph: the process running the snippet crashed.";
    return "No autograd graph: no line of this snippet built a node that requires grad.";
  }

  // ---------------------------------------------------------- layout

  async function relayout() {
    const vis = visibleGraph(model, expanded);
    const id = ++layoutReq;
    let layout;
    if (vis.items.size > WORKER_ITEMS && typeof Worker === "function") {
      graph.setProgress(`Laying out ${vis.items.size} nodes…`);
      el.classList.add("gs-laying-out");
      try {
        layout = await layoutInWorker(id, [...expanded], vis.items.size);
      } catch (e) {
        console.warn("gradstep: layout worker failed, laying out here", e);
        layout = layoutGraph(model, expanded, vis, { cache: layoutCache });
      }
      el.classList.remove("gs-laying-out");
      graph.setProgress(null);
      if (id !== layoutReq) return;
    } else {
      layout = layoutGraph(model, expanded, vis, { cache: layoutCache });
    }
    viewer.lastLayout = layout;
    await graph.setGraph(model, vis, layout);
    graph.select(selected);
    if (!fitted) {
      graph.fit();
      fitted = true;
    }
  }

  function layoutInWorker(id, expandedList, count) {
    if (!worker) {
      const url = options.workerUrl || new URL("./layout.worker.js", import.meta.url);
      worker = new Worker(url, { type: "module" });
      worker.postMessage({ type: "init", graph: layoutInput(model) });
    }
    return new Promise((resolve, reject) => {
      const onMessage = (ev) => {
        const msg = ev.data;
        if (msg.id !== id) return;
        if (msg.type === "progress") {
          graph.setProgress(`Laying out ${count} nodes… ${Math.round((100 * msg.done) / Math.max(1, msg.total))}%`);
        } else if (msg.type === "layout") {
          worker.removeEventListener("message", onMessage);
          resolve(deserializeLayout(msg.layout));
        }
      };
      worker.addEventListener("message", onMessage);
      worker.addEventListener("error", (e) => reject(e), { once: true });
      worker.postMessage({ type: "layout", id, expanded: expandedList });
    });
  }

  async function toggleGroup(id, open) {
    if (!model) return;
    const t0 = performance.now();
    if (open) {
      for (const p of modulePath(id)) expanded.add(p);
    } else {
      for (const e of [...expanded]) if (e === id || e.startsWith(`${id}.`)) expanded.delete(e);
    }
    await relayout();
    if (model.step(index)) graph.showStep(model.step(index), null, { animate: false });
    viewer.lastToggleMs = performance.now() - t0;
    el.dispatchEvent(new CustomEvent("gs-layout", { detail: { ms: viewer.lastToggleMs } }));
  }

  async function expandAll() {
    if (!model) return;
    expanded = new Set(model.groups.keys());
    await relayout();
    if (model.step(index)) graph.showStep(model.step(index), null, { animate: false });
    graph.fit(300);
  }

  async function collapseAll() {
    if (!model) return;
    expanded = initialExpanded(model);
    await relayout();
    if (model.step(index)) graph.showStep(model.step(index), null, { animate: false });
    graph.fit(300);
  }

  // ---------------------------------------------------------- stepping

  function go(i, { animate = true } = {}) {
    if (!model || !steps()) return;
    const j = Math.max(0, Math.min(steps() - 1, i));
    if (j === index && animate) return;
    const from = index;
    index = j;
    update(animate && j === from + 1, from);
    if (options.onStep) options.onStep(index);
  }

  function update(animate, from = index - 1) {
    const n = steps();
    stepperEl.dataset.step = String(index);
    stepperEl.dataset.steps = String(n);
    slider.max = String(Math.max(0, n - 1));
    slider.value = String(index);
    slider.disabled = n <= 1;
    slider.setAttribute("aria-valuetext", n ? `Step ${index + 1} of ${n}: ${stepTitle(model.steps[index])}` : "No steps");
    counter.textContent = n ? `${index + 1} / ${n}` : "0 / 0";
    bFirst.disabled = bPrev.disabled = index <= 0;
    bNext.disabled = bLast.disabled = index >= n - 1;
    bPlay.disabled = n <= 1;
    for (const li of timeline.children) {
      const k = Number(li.dataset.index);
      li.classList.toggle("gs-current", k === index);
      li.classList.toggle("gs-past", k < index);
      const b = li.firstChild;
      if (k === index) b.setAttribute("aria-current", "step");
      else b.removeAttribute("aria-current");
    }
    const cur = timeline.children[index];
    if (cur) {
      // offsets, not client rects: no forced layout of the whole page
      const left = cur.offsetLeft - timeline.offsetLeft;
      if (left < timeline.scrollLeft || left + cur.offsetWidth > timeline.scrollLeft + timeline.clientWidth) {
        timeline.scrollLeft = left - timeline.clientWidth / 2 + cur.offsetWidth / 2;
      }
    }
    const step = model ? model.step(index) : null;
    const diff = step && animate ? diffSteps(model, from, index) : null;
    // Reads of layout first (the editor reads the selection), then the writes:
    // reading after thousands of SVG writes would force a synchronous layout.
    markCode(step);
    if (step) graph.showStep(step, diff, { animate });
    renderBanner(step);
    renderInspector();
    renderTensors(step);
    renderChartCursor();
    renderOutput(step);
  }

  function stepDuration() {
    const s = model.steps[Math.min(index + 1, steps() - 1)];
    if (prefersReducedMotion()) return 1400;
    return s && s.kind !== "forward" ? 2300 : 900;
  }

  function togglePlay() {
    if (playing) return stop();
    if (index >= steps() - 1) go(0, { animate: false });
    bPlay.setAttribute("aria-pressed", "true");
    bPlay.innerHTML = ICONS.pause;
    bPlay.setAttribute("aria-label", "Pause (space)");
    const tick = () => {
      if (index >= steps() - 1) return stop();
      go(index + 1);
      playing = setTimeout(tick, stepDuration());
    };
    playing = setTimeout(tick, 350);
  }

  function stop() {
    if (playing) clearTimeout(playing);
    playing = null;
    bPlay.setAttribute("aria-pressed", "false");
    bPlay.innerHTML = ICONS.play;
    bPlay.setAttribute("aria-label", "Play (space)");
  }

  function handleKey(ev) {
    if (!model || ev.altKey || ev.ctrlKey || ev.metaKey) return false;
    const keys = {
      ArrowRight: () => go(index + 1),
      ArrowLeft: () => go(index - 1),
      Home: () => go(0),
      End: () => go(steps() - 1),
      " ": () => togglePlay(),
      f: () => graph.fit(300),
      Escape: () => selectNode(null),
    };
    const fn = keys[ev.key];
    if (!fn) return false;
    ev.preventDefault();
    if (ev.key !== " " && ev.key !== "f" && ev.key !== "Escape") stop();
    fn();
    return true;
  }
  el.addEventListener("keydown", (ev) => {
    const t = ev.target;
    if (t && (t.closest(".cm-editor") || /^(INPUT|SELECT|TEXTAREA)$/.test(t.tagName) && t !== slider)) return;
    if (t === slider && (ev.key === "ArrowLeft" || ev.key === "ArrowRight" || ev.key === "Home" || ev.key === "End")) return;
    if (t && t.tagName === "BUTTON" && ev.key === " ") return;
    handleKey(ev);
  });

  function buildTimeline() {
    timeline.replaceChildren();
    if (!model) return;
    model.steps.forEach((s, i) => {
      const call = s.kind !== "forward";
      const label = call
        ? h("span", { class: "gs-tl-call" }, `${s.api === "torch.autograd.grad" || s.kind === "grad" ? "grad" : "backward"}`)
        : h("span", { class: "gs-tl-fwd" }, s.repeat > 1 ? `×${s.repeat}` : "fwd");
      const flags = call ? callFlags(s).map((f) => h("span", { class: "gs-flag" }, f.replace("=True", ""))) : [];
      const li = h("li", { class: `gs-tl-step ${call ? "gs-tl-callstep" : ""} ${s.error ? "gs-tl-error" : ""}`, "data-index": i },
        h("button", { type: "button", title: `Step ${i + 1}: ${stepTitle(s)}`, "aria-label": `Step ${i + 1}: ${stepTitle(s)}`, onclick: () => go(i, { animate: i === index + 1 }) },
          h("span", { class: "gs-tl-line" }, s.line !== null ? `L${s.line}` : "—"),
          label,
          ...flags,
          s.error ? h("span", { class: "gs-tl-x", "aria-hidden": "true" }, "✕") : null,
        ),
      );
      timeline.append(li);
    });
  }

  // ---------------------------------------------------------- banner

  function renderBanner(step) {
    banner.replaceChildren();
    if (!model) return;
    const t = model.trace;
    const notes = [];
    if (t.status === "timeout" || t.status === "limit" || t.status === "crashed") {
      const which = t.status === "timeout" ? "the wall-clock time limit" : t.status === "limit" ? `the ${limitName(t.limit)} limit` : "a crash";
      notes.push(h("div", { class: "gs-note gs-note-error" }, h("strong", {}, `Run stopped by ${which}.`), ` ${t.error ? t.error.message : ""}`));
    }
    if (t.status === "error" && outOfMemory(t.error)) {
      // the sandbox's per-run memory limit refused an allocation (RLIMIT_DATA): say so in words
      notes.push(h("div", { class: "gs-note gs-note-error" }, h("strong", {}, "Run stopped by the memory limit."),
        ` Line ${t.error.line ?? "?"} asked for more memory than a run may use.`));
    }
    for (const n of t.notes) notes.push(h("div", { class: "gs-note" }, n));
    const capped = t.truncated.filter((x) => x !== "stdout");
    if (t.truncated.includes("stdout")) {
      notes.push(h("div", { class: "gs-note gs-note-capped" }, h("strong", {}, "Output capped:"),
        " the snippet printed more than a run may keep; the Output panel shows the beginning."));
    }
    if (capped.length) notes.push(h("div", { class: "gs-note" }, `Trace capped (${capped.join(", ")}): what is shown is not the whole run.`));
    const tone = step ? renderNarration(banner, model, index, { highlight: highlightLinked, select: selectNode }) : null;
    banner.className = tone ? `gs-banner gs-tone-${tone}` : "gs-banner";
    banner.append(...notes);
  }

  function outOfMemory(error) {
    return Boolean(error) && (error.type === "MemoryError" || /can't allocate memory/.test(error.message || ""));
  }

  /** Narration links: highlight the nodes (and a tensor's .grad texts) they name. */
  function highlightLinked(ids, tensor) {
    graph.link(ids);
    for (const e of el.querySelectorAll(".gs-narr-target")) e.classList.remove("gs-narr-target");
    if (tensor === null) return;
    const name = CSS.escape(tensor);
    for (const e of el.querySelectorAll(`[data-grad-for="${name}"], [data-tensor-grad="${name}"]`)) e.classList.add("gs-narr-target");
  }

  // ---------------------------------------------------------- code pane

  function markCode(step) {
    if (!code || !model) return;
    const errors = [];
    const t = model.trace;
    if (step && step.error) {
      errors.push({ key: `s${index}`, line: step.line ?? step.error.line, title: `${step.error.type}:`, message: step.error.message, kind: "error" });
    }
    if (t.error && !(step && step.error && (step.error.line ?? step.line) === t.error.line && step.error.message === t.error.message)) {
      const last = index === steps() - 1 || !steps();
      if (last || t.status !== "error" || !steps()) {
        errors.push({
          key: "trace",
          line: t.error.line ?? 1,
          column: t.error.line ? t.error.column ?? null : null,
          title: `${t.error.type}${t.error.line ? ` (line ${t.error.line}${t.error.column ? `, column ${t.error.column}` : ""})` : ""}:`,
          message: t.error.message,
          kind: t.status === "error" ? "error" : "limit",
        });
      }
    }
    const linked = nodeHover ? [...new Set(nodeHover.map((id) => model.nodes[id].line).filter((l) => l !== null))] : [];
    code.setMarks({ current: step ? step.line : null, linked, errors });
    if (step && step.line) code.revealLine(step.line);
  }

  function hoverNodes(ids) {
    nodeHover = ids;
    markCode(model ? model.step(index) : null);
  }

  // ---------------------------------------------------------- inspector

  function selectNode(id) {
    selected = id;
    graph.select(id);
    if (id !== null && id !== undefined) graph.reveal(id);
    renderInspector();
  }

  function renderInspector() {
    inspector.replaceChildren(h("h2", {}, "Inspector"));
    if (!model) return;
    if (selected === null || selected === undefined || !model.nodes[selected]) {
      inspector.append(h("p", { class: "gs-muted" }, "Click a node to see its op, line, module, saved tensors and gradient."));
      return;
    }
    const n = model.nodes[selected];
    const step = model.step(index);
    const st = nodeStatus(model, step, n.id);
    const dl = h("dl", { class: "gs-facts" });
    const fact = (k, v) => dl.append(h("dt", {}, k), h("dd", {}, v));
    fact("op", n.op);
    fact("node id", String(n.id));
    if (st.alive && st.vars.length) fact(n.isLeaf ? "tensor" : "grad_fn of", st.vars.join(", "));
    else if (n.tensor) fact("tensor", n.tensor);
    fact("line", n.line !== null ? String(n.line) : "—");
    fact("module", n.module || (n.group ? `${n.group} (by name)` : "—"));
    fact("created at", `step ${n.step + 1}`);
    fact("state now", !st.alive ? (st.dropped ? "dropped (no variable reaches it)" : "not created yet / gone") :
      [st.failed ? "failed here" : st.executed ? `ran (#${st.order})` : "did not run this step", st.freed ? "freed" : null, st.stale ? "stale" : null, st.retained ? "retained" : null].filter(Boolean).join(", "));
    if (n.gradGraph) fact("graph", "built by create_graph=True (a gradient's graph)");
    inspector.append(h("h3", {}, n.isLeaf ? `leaf ${n.tensor || ""}` : n.op), dl);
    // saved values
    inspector.append(h("h4", {}, "Saved for backward"));
    if (!n.saved.length) inspector.append(h("p", { class: "gs-muted" }, n.isLeaf ? "AccumulateGrad saves nothing: nothing to free." : "Nothing saved: nothing to free."));
    else {
      const staleNames = new Set(st.staleSaved || []);
      const table = h("table", { class: "gs-table" }, h("thead", {}, h("tr", {}, ...["name", "kind", "shape", "dtype", "bytes", "of", "state"].map((c) => h("th", { scope: "col" }, c)))));
      const body = h("tbody");
      for (const s of n.saved) {
        const state = s.kind === "value" ? `value ${JSON.stringify(s.value)}` :
          !st.alive ? "—" : st.freed ? "freed" : st.stale && (staleNames.size === 0 || staleNames.has(s.name)) ? "stale" : st.retained ? "retained" : "held";
        body.append(h("tr", { class: `gs-saved-${state.split(" ")[0]}` },
          h("td", {}, s.name), h("td", {}, s.kind), h("td", {}, s.shape ? fmtShape(s.shape) : "—"), h("td", {}, s.dtype || "—"),
          h("td", {}, s.bytes !== null ? fmtBytes(s.bytes) : "—"), h("td", {}, s.of || "—"), h("td", {}, state)));
      }
      table.append(body);
      inspector.append(table);
    }
    const tensors = (step && st.alive && step.gradsOf.get(n.id)) || [];
    if (tensors.length || n.isLeaf) {
      inspector.append(h("h4", {}, "Gradient"));
      if (!tensors.length) inspector.append(h("p", {}, "grad: None"));
      for (const t of tensors) inspector.append(gradBlock(t.name, t.grad));
    }
  }

  function gradBlock(name, grad) {
    if (!grad) return h("p", {}, `${name}.grad = None`);
    const vals = grad.values !== null && grad.values !== undefined ? fmtValues(grad.values) : "(values not recorded: more than 64 elements)";
    return h("div", { class: "gs-gradblock" },
      h("div", {}, h("code", {}, `${name}.grad`), ` ${fmtShape(grad.shape)} ${grad.dtype}${grad.has_grad_fn ? " · has grad_fn" : ""}`),
      h("pre", { class: "gs-values" }, vals),
      h("div", { class: "gs-muted" }, `norm ${grad.norm === null ? "—" : grad.norm}`));
  }

  // ---------------------------------------------------------- tensors panel

  function renderTensors(step) {
    tensorsPanel.replaceChildren(h("h2", {}, "Tensors"));
    if (!step) return;
    if (!step.tensors.length) {
      tensorsPanel.append(h("p", { class: "gs-muted" }, "No named tensor that can hold a .grad at this step."));
      return;
    }
    const changes = model.gradChanges(index);
    const table = h("table", { class: "gs-table" }, h("thead", {}, h("tr", {}, ...["name", "shape", "leaf", ".grad", ""].map((c) => h("th", { scope: "col" }, c)))));
    const body = h("tbody");
    const shown = showAllTensors ? step.tensors : step.tensors.slice(0, TENSOR_ROWS);
    for (const t of shown) {
      const c = changes.get(t.name);
      const changed = Boolean(c);
      const what = changed ? (c.old ? "accumulated" : "written") : "";
      body.append(h("tr", { class: changed ? "gs-changed" : "" },
        h("td", {}, h("button", { type: "button", class: "gs-link", disabled: t.node === null, onclick: () => t.node !== null && selectNode(t.node) }, t.name)),
        h("td", {}, fmtShape(t.shape)),
        h("td", {}, t.isLeaf ? "leaf" : t.retainsGrad ? "retain_grad" : "—"),
        h("td", { class: "gs-mono", "data-tensor-grad": t.name }, fmtGrad(t.grad)),
        h("td", { class: `gs-what gs-what-${what}` }, what)));
    }
    table.append(body);
    tensorsPanel.append(table);
    if (shown.length < step.tensors.length) {
      tensorsPanel.append(h("button", { type: "button", class: "gs-btn gs-more", onclick: () => {
        showAllTensors = true;
        renderTensors(model.step(index));
      } }, `Show all ${step.tensors.length} tensors`));
    }
  }

  // ---------------------------------------------------------- saved bytes chart

  let showAllTensors = false;
  const TENSOR_ROWS = 40;
  let chartBars = [];
  let chartCursor = null;
  function renderChart() {
    chartPanel.replaceChildren(h("h2", {}, "Bytes held by saved tensors"));
    chartBars = [];
    if (!model || !steps()) return;
    const W = 280;
    const H = 70;
    const max = Math.max(1, ...model.steps.map((s) => s.savedBytes));
    const bw = W / steps();
    const svgNS = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(svgNS, "svg");
    svg.setAttribute("viewBox", `0 0 ${W} ${H + 14}`);
    svg.setAttribute("class", "gs-chart-svg");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", `Saved bytes per step, from ${fmtBytes(model.steps[0].savedBytes)} to ${fmtBytes(model.steps[steps() - 1].savedBytes)}, peak ${fmtBytes(max)}`);
    model.steps.forEach((s, i) => {
      const hgt = Math.max(s.savedBytes ? 2 : 0, (s.savedBytes / max) * H);
      const r = document.createElementNS(svgNS, "rect");
      r.setAttribute("x", String(i * bw + 1));
      r.setAttribute("width", String(Math.max(1, bw - 2)));
      r.setAttribute("y", String(H - hgt));
      r.setAttribute("height", String(hgt));
      r.setAttribute("class", `gs-bar ${s.kind !== "forward" ? "gs-bar-call" : ""}`);
      const title = document.createElementNS(svgNS, "title");
      title.textContent = `Step ${i + 1}: ${fmtBytes(s.savedBytes)}`;
      r.append(title);
      r.addEventListener("click", () => go(i, { animate: false }));
      svg.append(r);
      chartBars.push(r);
    });
    const base = document.createElementNS(svgNS, "line");
    base.setAttribute("x1", "0");
    base.setAttribute("x2", String(W));
    base.setAttribute("y1", String(H + 0.5));
    base.setAttribute("y2", String(H + 0.5));
    base.setAttribute("class", "gs-chart-base");
    svg.append(base);
    // the current step: a marker under its bar (a bar of 0 bytes has no height to colour)
    chartCursor = document.createElementNS(svgNS, "path");
    chartCursor.setAttribute("d", `M0,${H + 3}l5,8h-10z`);
    chartCursor.setAttribute("class", "gs-chart-cursor");
    svg.append(chartCursor);
    const label = h("div", { class: "gs-chart-label" });
    chartPanel.append(svg, label);
  }

  function renderChartCursor() {
    chartBars.forEach((r, i) => r.classList.toggle("gs-bar-current", i === index));
    if (chartCursor && chartBars[index]) {
      const x = Number(chartBars[index].getAttribute("x")) + Number(chartBars[index].getAttribute("width")) / 2;
      chartCursor.setAttribute("transform", `translate(${x},0)`);
    }
    const label = chartPanel.querySelector(".gs-chart-label");
    if (label && model && steps()) {
      const max = Math.max(...model.steps.map((s) => s.savedBytes));
      label.textContent = `now ${fmtBytes(model.steps[index].savedBytes)} · peak ${fmtBytes(max)}`;
    }
  }

  // ---------------------------------------------------------- output

  function renderOutput(step) {
    outputPanel.replaceChildren(h("h2", {}, "Output"));
    if (!model) return;
    const out = step ? step.stdout : model.trace.stdout;
    const warns = step ? step.warnings : model.trace.warnings;
    if (step) outputPanel.append(h("div", { class: "gs-muted" }, index > 0 ? "printed since the previous step" : "printed before this step"));
    outputPanel.append(h("pre", { class: `gs-stdout ${out ? "" : "gs-muted"}`, "data-stdout-step": String(index) }, out || "(nothing)"));
    for (const w of warns) {
      outputPanel.append(h("div", { class: "gs-warning", role: "note" }, h("strong", {}, `${w.category}${w.line ? ` (line ${w.line})` : ""}: `), w.message));
    }
    const last = index === steps() - 1 || !steps();
    if (last && model.trace.stdout) {
      const rest = model.trace.stdout.slice(model.steps.reduce((a, s) => a + s.stdout.length, 0));
      if (rest) outputPanel.append(h("div", { class: "gs-muted" }, "printed after the last step"), h("pre", { class: "gs-stdout" }, rest));
    }
  }

  return viewer;
}
