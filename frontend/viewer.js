// The viewer: stepper + graph + inspector for one trace. Used by the app (with
// the editor as its code pane) and by embeds/static exports (embed.js).
//
// The view is a pure function of (trace, step): setStep(i) reads model.step(i)
// and sets attributes; diffSteps(i-1, i) only decides what to animate.

import {
  buildModel, diffSteps, initialExpanded, openedAtStart, visibleGraph, stepTitle, callFlags, fmtBytes, limitName, modulePath,
  reportedText, reachSentence, quote,
} from "./model.js";
import { layoutGraph, layoutGraphInSlices, deserializeLayout } from "./layout.js";
import { createGraphView, prefersReducedMotion } from "./graph.js";
import { renderNarration } from "./narration.js";
import { h } from "./dom.js";
import { startsIteration, updateWord } from "./updates.js";
import { foldText, timelineFolds } from "./timeline-folds.js";
import { createInspector, createOutputPanel, createTensorsPanel, nearScreen, setText } from "./panels.js";
import { chartLabel, inspectorView, outputView, tensorsView } from "./panel-views.js";
import { createStepOutput, stepOutputView } from "./step-output.js";
import { createGradFlowChart } from "./grad-flow-chart.js";

const WORKER_ITEMS = 400;

/** Resolves in a task of its own: what follows runs after the browser had its turn. */
const nextTask = () => new Promise((resolve) => setTimeout(resolve, 0));

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
 * options.code: the code pane (editor.js): showStep({current, linked, errors}, line)
 * options.slots: { stepper, graph, panels } — elements to build into (defaults: inside el)
 * options.onStep(i), options.workerUrl
 * options.onTrace(model): a new trace's model, before its first step is shown
 * options.gate(from, to) → the step a move from `from` to `to` may reach (the exercise asks before
 *   a call is shown: exercise.js); a move it holds back stops Play
 * options.shows(i) → whether what step i did may be shown yet (the exercise: not before its question
 *   is answered): a step that may not shows no error in the timeline and no bytes in the chart;
 *   viewer.concealChanged() redraws those when it changes
 * viewer.picking = (id) => …: while set, choosing a node (click, Enter/Space) also calls it
 */
export function createViewer(el, options = {}) {
  const code = options.code || null;
  const shows = options.shows || (() => true);
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
  const printed = h("div"); // what the code printed at the step, beside the buttons (step-output.js)
  stepperEl.append(
    h("div", { class: "gs-controls" }, bFirst, bPrev, bPlay, bNext, bLast, counter, slider),
    timeline,
    printed,
  );
  const printedUI = createStepOutput(printed);

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
  const flowPanel = h("section", { class: "gs-panel gs-gradflow", "aria-label": "Gradient flow: .grad norm per module" });
  panelsEl.append(inspector, tensorsPanel, flowPanel, chartPanel, outputPanel);
  // built once, then updated in place; a panel away from the screen (or hidden) is updated when it comes near
  const inspectorUI = createInspector(inspector);
  const tensorsUI = createTensorsPanel(tensorsPanel, {
    onSelect: (id) => selectNode(id),
    onShowAll: () => {
      showAllTensors = true;
      renderTensors();
    },
  });
  const outputUI = createOutputPanel(outputPanel);
  const flowUI = createGradFlowChart(flowPanel, { onPick: (path) => selectModule(path) });
  const whenNear = new Map([inspector, tensorsPanel, flowPanel, chartPanel, outputPanel].map((p) => [p, nearScreen(p)]));

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
    /**
     * Show a trace at `step`; returns a promise resolved when its graph is painted. By default at
     * the first step, or where a run stopped by a limit stopped (its last step: the graph it had).
     */
    async setTrace(trace, { step = null } = {}) {
      stop();
      // Reading the trace, building the model, and laying out and painting it are each a task of
      // their own on a big model (no long task blocks the page); the view keeps the last trace
      // until the new model is built, and a newer trace given meanwhile wins.
      const seq = ++traceSeq;
      await nextTask();
      if (seq !== traceSeq) return;
      const built = buildModel(trace);
      await nextTask();
      if (seq !== traceSeq) return;
      stop();
      model = built;
      if (options.onTrace) options.onTrace(model);
      layoutCache = new Map();
      showAllTensors = false;
      if (worker) worker.postMessage({ type: "init", graph: layoutInput(model) });
      selected = null;
      nodeHover = null; // ids of the last trace's nodes: a new trace may have fewer
      fitted = false;
      expanded = openedAtStart(model, initialExpanded(model));
      index = Math.max(0, Math.min(step ?? (model.trace.status === "limit" ? steps() - 1 : 0), steps() - 1));
      if (options.gate && steps()) index = options.gate(0, index);
      buildTimeline();
      renderChart();
      flowUI.setModel(model);
      chosenModule = null;
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
    /** What options.shows says changed: redraw the timeline and the chart (the step stays as it is). */
    concealChanged() {
      if (!model) return;
      buildTimeline();
      markCurrentChip();
      renderChart();
      renderChartCursor();
    },
    /** Bring the run's notes into view: they follow the step's narration in the banner. */
    showNotes() {
      const note = banner.querySelector(".gs-note");
      if (note) note.scrollIntoView({ block: "nearest" });
    },
    next: () => go(index + 1),
    prev: () => go(index - 1),
    play: () => !playing && togglePlay(),
    stop,
    handleKey,
    selectNode,
    selectModule,
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

  let traceSeq = 0; // setTrace calls, the last one shown

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
        console.error(`gradstep: the layout worker failed (${e && e.message ? e.message : e}); laying out ${vis.items.size} nodes on the page instead`);
        // in slices, so the page keeps its turn while it lays out
        layout = await layoutGraphInSlices(model, expanded, vis, { cache: layoutCache });
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
      // served, a module importing its neighbours; in a static export, one script in a Blob URL, which
      // Chromium starts from file:// only as a classic worker (gradstep.export)
      worker = new Worker(url, { type: String(url).startsWith("blob:") ? "classic" : "module" });
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
        } else if (msg.type === "error") {
          worker.removeEventListener("message", onMessage);
          reject(new Error(msg.message));
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
    expanded = openedAtStart(model, initialExpanded(model));
    await relayout();
    if (model.step(index)) graph.showStep(model.step(index), null, { animate: false });
    graph.fit(300);
  }

  // ---------------------------------------------------------- stepping

  function go(i, { animate = true } = {}) {
    if (!model || !steps()) return;
    const asked = Math.max(0, Math.min(steps() - 1, i));
    const j = options.gate ? options.gate(index, asked) : asked;
    if (j !== asked) stop();
    if (j === index && animate) return;
    const from = index;
    index = j;
    update(animate && j === from + 1, from);
    if (options.onStep) options.onStep(index);
  }

  function update(animate, from = index - 1) {
    const n = steps();
    const step = model ? model.step(index) : null;
    // One style and layout pass per step: what must read the layout goes first, on the layout the
    // last frame left clean (the editor's update reads the DOM selection), then only writes. A read
    // after the writes would force a synchronous layout.
    markCode(step);
    scrollTimeline();
    stepperEl.dataset.step = String(index);
    stepperEl.dataset.steps = String(n);
    slider.max = String(Math.max(0, n - 1));
    slider.value = String(index);
    slider.disabled = n <= 1;
    slider.setAttribute("aria-valuetext", n ? `Step ${index + 1} of ${n}: ${stepTitle(model.steps[index])}` : "No steps");
    setText(counter, n ? `${index + 1} / ${n}` : "0 / 0");
    bFirst.disabled = bPrev.disabled = index <= 0;
    bNext.disabled = bLast.disabled = index >= n - 1;
    bPlay.disabled = n <= 1;
    markCurrentChip();
    const diff = step && animate ? diffSteps(model, from, index) : null;
    if (step) {
      graph.showStep(step, diff, { animate });
      graph.follow(focusOf(step));
    }
    renderBanner(step);
    renderInspector();
    renderTensors();
    renderChartCursor();
    renderFlow();
    renderOutput();
    printedUI.update(stepOutputView(model, index));
  }

  function markCurrentChip() {
    for (const li of tlChips) {
      const k = Number(li.dataset.index);
      li.classList.toggle("gs-current", k === index);
      li.classList.toggle("gs-past", k < index);
      const b = li.lastChild;
      if (k === index) b.setAttribute("aria-current", "step");
      else b.removeAttribute("aria-current");
    }
    for (const f of tlFolds) showFold(f);
  }

  /**
   * The nodes a step is about: where it failed, else what it built, else what ran (in order). Of
   * what ran, the leaves count only when nothing else ran: parameters are shared by every call (a
   * loop's 20 backward calls all end in the model's box), the call's own graph is what it ran through.
   */
  function focusOf(step) {
    const all = [...step.state.values()];
    const failed = all.filter((s) => s.failed);
    if (failed.length) return failed.map((s) => s.id);
    const made = all.filter((s) => s.isNew);
    if (made.length) return made.map((s) => s.id);
    const ran = all.filter((s) => s.executed).sort((a, b) => (a.order ?? 0) - (b.order ?? 0));
    const own = ran.filter((s) => !model.nodes[s.id].isLeaf);
    return (own.length ? own : ran).map((s) => s.id);
  }

  // The timeline's geometry, measured when the browser has laid it out anyway (ResizeObserver), so
  // a step reads no layout; its scroll position follows its scroll events.
  const tl = { lefts: [], widths: [], width: 0, scroll: 0, tops: [], heights: [], height: 0, top: 0 };
  let tlChips = []; // each step's chip, by index
  let tlFolds = []; // folds of forward steps (timeline-folds.js), each with its chip
  let tlModel = null; // the model the timeline was drawn for
  let tlFoldOf = []; // each step's fold, or null
  const tlSizes = typeof ResizeObserver === "function" ? new ResizeObserver(() => {
    tl.width = timeline.clientWidth;
    tl.scroll = timeline.scrollLeft;
    // per step: its chip, or its fold's while the fold is closed
    const items = tlChips.map((li, i) => (tlFoldOf[i] && !tlFoldOf[i].open ? tlFoldOf[i].li : li));
    tl.lefts = items.map((li) => li.offsetLeft - timeline.offsetLeft);
    tl.widths = items.map((li) => li.offsetWidth);
    // where chips wrap into rows (the app's stepper), the timeline scrolls down instead
    tl.height = timeline.clientHeight;
    tl.top = timeline.scrollTop;
    tl.tops = items.map((li) => li.offsetTop - timeline.offsetTop);
    tl.heights = items.map((li) => li.offsetHeight);
    scrollTimeline();
  }) : null;
  timeline.addEventListener("scroll", () => {
    tl.scroll = timeline.scrollLeft;
    tl.top = timeline.scrollTop;
  }, { passive: true });

  /** Keep the current step's button in the timeline's view. */
  function scrollTimeline() {
    if (!tlSizes || index >= tl.lefts.length) return; // measured (then scrolled) once laid out
    const left = tl.lefts[index];
    const width = tl.widths[index];
    if (left < tl.scroll || left + width > tl.scroll + tl.width) {
      tl.scroll = Math.max(0, left - tl.width / 2 + width / 2);
      timeline.scrollLeft = tl.scroll;
    }
    const top = tl.tops[index];
    const height = tl.heights[index];
    if (tl.height && (top < tl.top || top + height > tl.top + tl.height)) {
      tl.top = Math.max(0, top - tl.height / 2 + height / 2);
      timeline.scrollTop = tl.top;
    }
  }

  function stepDuration() {
    const s = model.steps[Math.min(index + 1, steps() - 1)];
    if (prefersReducedMotion()) return 1400;
    return s && (s.kind === "backward" || s.kind === "grad") ? 2300 : 900; // an engine call animates its flow
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
    // Space on a timeline chip plays, as everywhere in the stepper ("space to play"); Enter goes to its step
    if (t && t.tagName === "BUTTON" && ev.key === " " && !timeline.contains(t)) return;
    handleKey(ev);
  });
  // the chip's own activation by Space (on keyup) would jump to its step
  timeline.addEventListener("keyup", (ev) => {
    if (ev.key === " ") ev.preventDefault();
  });

  /** What a timeline chip shows, as text (its accessible name starts with it). */
  function chipText(s, call) {
    const line = s.line !== null ? `L${s.line}` : "—";
    if (s.kind === "error") return `${line} ${s.concealed ? "?" : s.error ? s.error.type : "error"}`;
    const what = s.kind === "update" ? updateWord(s) : call ? (s.api === "torch.autograd.grad" || s.kind === "grad" ? "grad" : "backward") : s.repeat > 1 ? `×${s.repeat}` : "fwd";
    const flags = call ? callFlags(s).map((f) => f.replace("=True", "")) : [];
    return [line, what, ...flags].join(" ");
  }

  // A fold: consecutive forward steps shown as one chip until opened (timeline-folds.js).
  function showFold(f) {
    const inside = index >= f.start && index <= f.end;
    f.li.classList.toggle("gs-current", inside && !f.open);
    f.li.classList.toggle("gs-past", index > f.end);
    f.li.classList.toggle("gs-tl-open", f.open);
    setText(f.text, foldText(f, inside ? index : null));
    setText(f.mark, f.open ? "▾" : "▸");
    f.button.setAttribute("aria-expanded", String(f.open));
    if (inside && !f.open) f.button.setAttribute("aria-current", "step");
    else f.button.removeAttribute("aria-current");
    for (let i = f.start; i <= f.end; i++) tlChips[i].hidden = !f.open;
  }

  function toggleFold(f) {
    f.open = !f.open;
    showFold(f);
  }

  function buildTimeline() {
    // a redraw of the same run (an exercise's reveal) keeps the folds the reader opened
    const opened = tlModel === model ? new Set(tlFolds.filter((f) => f.open).map((f) => f.start)) : new Set();
    tlModel = model;
    timeline.replaceChildren();
    tl.lefts = [];
    tl.tops = [];
    tl.widths = [];
    tlChips = [];
    tlFolds = [];
    tlFoldOf = [];
    if (tlSizes) tlSizes.disconnect();
    if (!model) return;
    const folds = timelineFolds(model.steps);
    const foldAt = new Map(folds.map((f) => [f.start, f]));
    model.steps.forEach((shown, i) => {
      // a step the page may not show yet (the exercise's question before it): nothing says whether it fails
      const s = shows(i) ? shown : { ...shown, error: null, concealed: true };
      const fold = foldAt.get(i);
      if (fold) {
        const n = fold.end - fold.start + 1;
        const lines = new Set(model.steps.slice(fold.start, fold.end + 1).map((x) => x.line));
        const where = fold.iteration !== null ? `iteration ${fold.iteration}, ` : "";
        fold.open = opened.has(fold.start);
        fold.mark = h("span", { class: "gs-tl-mark", "aria-hidden": "true" }, "▸");
        fold.text = h("span", { class: "gs-tl-fwd" }, foldText(fold));
        fold.button = h("button", {
          type: "button", class: "gs-tl-foldbtn", "aria-expanded": "false",
          title: `Steps ${fold.start + 1}–${fold.end + 1} (${where}${n} forward steps over ${lines.size} lines): click to show each`,
          onclick: () => toggleFold(fold),
        }, fold.mark, fold.text);
        const iteration = startsIteration(model.steps, i) ? h("span", { class: "gs-tl-iter" }, `iteration ${s.iteration}`) : null;
        fold.li = h("li", { class: `gs-tl-step gs-tl-fold ${iteration ? "gs-tl-newiter" : ""}`, "data-fold": `${fold.start}-${fold.end}`, "data-iteration": s.iteration ?? "" }, iteration, fold.button);
        tlFolds.push(fold);
        timeline.append(fold.li);
        if (tlSizes) tlSizes.observe(fold.li);
      }
      const inFold = folds.find((f) => i >= f.start && i <= f.end) ?? null;
      tlFoldOf.push(inFold);
      const update = s.kind === "update";
      const crash = s.kind === "error"; // the code raised outside a call: the run's last step
      const call = s.kind !== "forward" && !update && !crash;
      const label = crash && s.concealed
        ? h("span", { class: "gs-tl-concealed" }, "?")
        : crash
        ? h("span", { class: "gs-tl-crash" }, s.error ? s.error.type : "error")
        : update
        ? h("span", { class: "gs-tl-update" }, updateWord(s))
        : call
        ? h("span", { class: "gs-tl-call" }, `${s.api === "torch.autograd.grad" || s.kind === "grad" ? "grad" : "backward"}`)
        : h("span", { class: "gs-tl-fwd" }, s.repeat > 1 ? `×${s.repeat}` : "fwd");
      const flags = call ? callFlags(s).map((f) => h("span", { class: "gs-flag" }, f.replace("=True", ""))) : [];
      // the first step of each iteration of the snippet's loop carries its label
      const iteration = startsIteration(model.steps, i) ? h("span", { class: "gs-tl-iter" }, `iteration ${s.iteration}`) : null;
      const of = s.iteration !== null ? ` (iteration ${s.iteration})` : "";
      const title = crash && s.concealed ? `${s.where ?? (s.line !== null ? `line ${s.line}` : "no line")} · shown after the exercise's question` : stepTitle(s);
      const li = h("li", { class: `gs-tl-step ${call ? "gs-tl-callstep" : ""} ${update ? "gs-tl-updatestep" : ""} ${iteration ? "gs-tl-newiter" : ""} ${s.error ? "gs-tl-error" : ""}`, "data-index": i, "data-iteration": s.iteration ?? "" },
        inFold ? null : iteration,
        h("button", { type: "button", title: `Step ${i + 1}${of}: ${title} (Enter: go there, space: play)`, "aria-label": `${chipText(s, call)}: step ${i + 1}, ${title}`, "aria-keyshortcuts": "Enter Space", onclick: () => go(i, { animate: i === index + 1 }) },
          h("span", { class: "gs-tl-line" }, s.line !== null ? `L${s.line}` : "—"),
          " ", // (not drawn between flex items) its accessible text reads "L15 fwd", as its name starts
          label,
          ...flags.flatMap((f) => [" ", f]),
          s.error ? h("span", { class: "gs-tl-x", "aria-hidden": "true" }, "✕") : null,
        ),
      );
      if (inFold) li.hidden = true;
      tlChips.push(li);
      timeline.append(li);
      if (tlSizes) tlSizes.observe(li);
    });
    for (const f of tlFolds) showFold(f);
    if (tlSizes) tlSizes.observe(timeline);
  }

  // ---------------------------------------------------------- banner

  let bannerFor = null; // [model, step index] the banner tells
  function renderBanner(step) {
    if (bannerFor && bannerFor[0] === model && bannerFor[1] === index) return;
    bannerFor = [model, index];
    // its links go with it (no mouseleave comes from a removed link): so do their highlights
    for (const e of narrTargets) e.classList.remove("gs-narr-target");
    narrTargets = [];
    banner.replaceChildren();
    if (!model) return;
    const t = model.trace;
    const notes = [];
    // first, above the narration: what follows is the code's word
    const reported = t.reaches.length
      ? h("div", { class: "gs-note gs-note-reported" }, h("strong", {}, "Reported by the code."), ` ${reachSentence(t.reaches)}`)
      : null;
    let stopped = null; // first, above the step's narration: a run cut short shows only part of the graph
    if (t.status === "timeout" || t.status === "limit" || t.status === "crashed") {
      const which = t.status === "timeout" ? "the wall-clock time limit" : t.status === "limit" ? `the ${limitName(t.limit)} limit` : "a crash";
      stopped = h("div", { class: "gs-note gs-note-error" }, h("strong", {}, `Run stopped by ${which}.`),
        ` ${t.error ? t.error.message : ""}${reportedText(t.error, 2000)}`);
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
    if (stopped) banner.prepend(stopped);
    if (reported) banner.prepend(reported);
  }

  /** Narration links: highlight the nodes (and a tensor's .grad texts) they name. */
  let narrTargets = []; // the .grad texts a narration link highlights
  function highlightLinked(ids, tensor) {
    graph.link(ids);
    for (const e of narrTargets) e.classList.remove("gs-narr-target");
    narrTargets = [];
    if (tensor === null) return;
    const name = CSS.escape(tensor);
    narrTargets = [...el.querySelectorAll(`[data-grad-for="${name}"], [data-tensor-grad="${name}"]`)];
    for (const e of narrTargets) e.classList.add("gs-narr-target");
  }

  // ---------------------------------------------------------- code pane

  function markCode(step) {
    if (!code || !model) return;
    const errors = [];
    const t = model.trace;
    if (step && step.error) {
      errors.push({ key: `s${index}`, line: step.line ?? step.error.line, title: `${step.error.type}:`, message: quote(step.error.message, 2000), kind: "error" });
    }
    if (t.error && !(step && step.error && (step.error.line ?? step.line) === t.error.line && step.error.message === t.error.message)) {
      const last = index === steps() - 1 || !steps();
      if (last || t.status !== "error" || !steps()) {
        errors.push({
          key: "trace",
          line: t.error.line ?? 1,
          column: t.error.line ? t.error.column ?? null : null,
          title: `${t.error.type}${t.error.line ? ` (line ${t.error.line}${t.error.column ? `, column ${t.error.column}` : ""})` : ""}:`,
          // an exception's words are the run's (quoted); a limit's or a crash's sentence is the server's
          message: t.status === "error" ? quote(t.error.message, 2000) : t.error.message,
          kind: t.status === "error" ? "error" : "limit",
        });
      }
    }
    const linked = nodeHover ? [...new Set(nodeHover.map((id) => model.nodes[id]?.line).filter((l) => l !== null && l !== undefined))] : [];
    code.showStep({ current: step ? step.line : null, linked, errors }, step ? step.line : null);
  }

  function hoverNodes(ids) {
    nodeHover = ids;
    markCode(model ? model.step(index) : null);
  }

  // ---------------------------------------------------------- inspector

  function selectNode(id) {
    if (viewer.picking && id !== null && id !== undefined) viewer.picking(id);
    if (chosenModule !== null) pickModule(null);
    selected = id;
    graph.select(id);
    if (id !== null && id !== undefined) graph.reveal(id);
    renderInspector();
  }

  function renderInspector() {
    whenNear.get(inspector)(() => inspectorUI.update(inspectorView(model, index, selected), Boolean(model)));
  }

  // ---------------------------------------------------------- tensors panel

  let showAllTensors = false;
  const TENSOR_ROWS = 40;

  function renderTensors() {
    whenNear.get(tensorsPanel)(() => tensorsUI.update(tensorsView(model, index, showAllTensors ? Infinity : TENSOR_ROWS)));
  }

  // ---------------------------------------------------------- saved bytes chart

  let chartBars = [];
  let chartCursor = null;
  let chartLabelEl = null;
  let chartPeak = 0;
  let chartAt = -1; // the bar marked current
  function renderChart() {
    chartPanel.replaceChildren(h("h2", {}, "Bytes held by saved tensors"));
    chartBars = [];
    chartCursor = null;
    chartLabelEl = null;
    chartAt = -1;
    if (!model || !steps()) return;
    const W = 280;
    const H = 70;
    // the bytes of a step the page may not show yet are not drawn (a drop would say that a call frees)
    const bytes = model.steps.map((s, i) => (shows(i) ? s.savedBytes : null));
    const drawn = bytes.filter((b) => b !== null);
    chartPeak = Math.max(0, ...drawn);
    const max = Math.max(1, chartPeak);
    const bw = W / steps();
    const svgNS = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(svgNS, "svg");
    svg.setAttribute("viewBox", `0 0 ${W} ${H + 14}`);
    svg.setAttribute("class", "gs-chart-svg");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", `Saved bytes per step, from ${fmtBytes(drawn[0] ?? 0)} to ${fmtBytes(drawn[drawn.length - 1] ?? 0)}${drawn.length < steps() ? " (so far)" : ""}, peak ${fmtBytes(max)}`);
    model.steps.forEach((s, i) => {
      const b = bytes[i] ?? 0;
      const hgt = Math.max(b ? 2 : 0, (b / max) * H);
      const r = document.createElementNS(svgNS, "rect");
      r.setAttribute("x", String(i * bw + 1));
      r.setAttribute("width", String(Math.max(1, bw - 2)));
      r.setAttribute("y", String(H - hgt));
      r.setAttribute("height", String(hgt));
      r.setAttribute("class", `gs-bar ${s.kind !== "forward" ? "gs-bar-call" : ""} ${bytes[i] === null ? "gs-bar-concealed" : ""}`);
      const title = document.createElementNS(svgNS, "title");
      title.textContent = `Step ${i + 1}: ${bytes[i] === null ? "shown after the exercise's question" : fmtBytes(s.savedBytes)}`;
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
    chartLabelEl = h("div", { class: "gs-chart-label" });
    chartPanel.append(svg, chartLabelEl);
  }

  function renderChartCursor() {
    whenNear.get(chartPanel)(() => {
      if (!chartLabelEl) return;
      if (chartAt !== index) {
        if (chartBars[chartAt]) chartBars[chartAt].classList.remove("gs-bar-current");
        chartBars[index].classList.add("gs-bar-current");
        const x = Number(chartBars[index].getAttribute("x")) + Number(chartBars[index].getAttribute("width")) / 2;
        chartCursor.setAttribute("transform", `translate(${x},0)`);
        chartAt = index;
      }
      setText(chartLabelEl, chartLabel(model, index, chartPeak));
    });
  }

  // ---------------------------------------------------------- gradient flow

  let chosenModule = null; // the module picked in the gradient-flow chart, marked in the graph

  function renderFlow() {
    whenNear.get(flowPanel)(() => flowUI.update(index));
  }

  function pickModule(path) {
    chosenModule = path;
    graph.selectGroup(path);
    flowUI.setSelected(path);
  }

  /** Mark a module in the graph and bring it into view: its parents open, so it shows. */
  async function selectModule(path) {
    if (!model || !model.groups.has(path)) return;
    const parent = model.groups.get(path).parent;
    if (parent !== null && !canvas.querySelector(`[data-group="${CSS.escape(path)}"]`)) await toggleGroup(parent, true);
    selected = null;
    graph.select(null);
    renderInspector();
    pickModule(path);
    const inside = model.nodes.find((n) => n.group === path || (n.group && n.group.startsWith(`${path}.`)));
    if (inside) graph.reveal(inside.id);
  }

  // ---------------------------------------------------------- output

  function renderOutput() {
    whenNear.get(outputPanel)(() => outputUI.update(outputView(model, index), index));
  }

  return viewer;
}
