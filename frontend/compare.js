// The side-by-side view: the original run and the run of a fix, stepping in
// lockstep over the rows of align.js (calls by order, forward steps by line),
// with what differs marked on both graphs and listed above them.
//
// Each side is an ordinary viewer (viewer.js); this module only drives their
// steps and sets `data-diff` on the nodes that differ (kinds: freed, stale,
// failed, grad, only — see align.js).

import { createViewer } from "./viewer.js";
import { compareTraces } from "./align.js";
import { fmtGrad, stepTitle, representative } from "./model.js";
import { h } from "./dom.js";
import { updateWord } from "./updates.js";

const SIDES = [
  { key: "a", side: "original", label: "Original" },
  { key: "b", side: "fixed", label: "Fixed" },
];

function nodeLabel(trace, id) {
  const n = trace.nodes[id];
  const name = n.op === "AccumulateGrad" && n.tensor ? `AccumulateGrad (${n.tensor})` : n.op;
  return n.line !== null && n.line !== undefined ? `${name} (line ${n.line})` : name;
}

function rowLabel(trace, i) {
  if (i === null) return "—";
  const s = trace.steps[i];
  const call = s.kind !== "forward";
  const word =
    s.kind === "error" ? (s.error ? s.error.type : "error")
    : s.kind === "update" ? updateWord(s)
    : call ? (s.kind === "grad" ? "grad" : "backward")
    : "fwd";
  return `${s.line !== null && s.line !== undefined ? `L${s.line}` : "—"} ${word}${s.error ? " ✕" : ""}`;
}

const LISTED = 6; // differences of one kind named one by one, before the rest is counted

/** What differs at a row, as sentences: [{kind, text}]. */
export function describeDiff(d, A, B) {
  const out = [];
  // torch's messages run long: their first sentence says which error it is
  const brief = (e) => `${e.type}: ${e.message.length > 110 ? `${e.message.slice(0, 109)}…` : e.message}`;
  if (d.errors.a) out.push({ kind: "error", text: `Only the original fails here: ${brief(d.errors.a)}` });
  if (d.errors.b) out.push({ kind: "error", text: `Only the fix fails here: ${brief(d.errors.b)}` });
  // a few by name, the rest counted: a 24-layer model frees ~1800 nodes at once
  for (const side of ["a", "b"]) {
    const freed = d.freed.filter((f) => f.freedIn === side);
    const [where, kept] = side === "a" ? ["the original", "the fix"] : ["the fix", "the original"];
    const named = freed.length > LISTED ? freed.slice(0, LISTED - 1) : freed;
    for (const f of named) out.push({ kind: "freed", text: `${nodeLabel(side === "a" ? A : B, f[side])}: freed in ${where}, held in ${kept}.` });
    const rest = freed.length - named.length;
    if (rest) out.push({ kind: "freed", text: `and ${rest} more nodes freed in ${where}, held in ${kept}.` });
  }
  const grads = d.grads.length > LISTED ? d.grads.slice(0, LISTED - 1) : d.grads;
  for (const g of grads) out.push({ kind: "grad", text: `${g.name}.grad: ${fmtGrad(g.a)} in the original, ${fmtGrad(g.b)} in the fix.` });
  if (d.grads.length > grads.length) out.push({ kind: "grad", text: `and ${d.grads.length - grads.length} more tensors whose .grad differs.` });
  const count = (m, kind) => [...m.values()].filter((k) => k.has(kind)).length;
  for (const kind of ["stale", "failed"]) {
    const n = count(d.a, kind);
    if (n) out.push({ kind, text: `${n} node${n === 1 ? "" : "s"} ${kind === "stale" ? "stale (modified in place)" : "failed"} in one run and not the other.` });
  }
  const onlyA = count(d.a, "only");
  const onlyB = count(d.b, "only");
  if (onlyA) out.push({ kind: "only", text: `${onlyA} node${onlyA === 1 ? "" : "s"} alive only in the original.` });
  if (onlyB) out.push({ kind: "only", text: `${onlyB} node${onlyB === 1 ? "" : "s"} alive only in the fix.` });
  return out;
}

/**
 * createCompare(host, { code, onExit }) → { open({original, fixed, title}), close(), active, handleKey, hoverLine }
 * code: the editor (it holds the fixed code, so the fixed side marks its lines there).
 */
export function createCompare(host, options = {}) {
  host.classList.add("gs-compare");
  let viewers = null;
  let cmp = null;
  let traces = null;
  let row = 0;
  let rowEls = [];

  const title = h("h2", { class: "gs-cmp-title", tabindex: "-1" });
  // leaving: back to the student's own code and run, or on with the fix (both runs are kept)
  const back = h("button", { type: "button", class: "gs-btn gs-cmp-back", title: "Your code and its run again (Escape)", onclick: () => exit("original") }, "← Back to my code");
  const keep = h("button", { type: "button", class: "gs-btn gs-cmp-keep", title: "Go on with the fixed code", onclick: () => exit("fixed") }, "Keep the fix");
  const btn = (label, path, on) => {
    const b = h("button", { type: "button", class: "gs-btn gs-icon-btn", "aria-label": label, title: label, onclick: on });
    b.innerHTML = `<svg viewBox="0 0 16 16" width="14" height="14" aria-hidden="true" focusable="false"><path d="${path}" fill="currentColor"/></svg>`;
    return b;
  };
  const bFirst = btn("First step (Home)", "M3 2h2v12H3zM14 2v12L6 8z", () => go(0));
  const bPrev = btn("Previous step (←)", "M12 2v12L4 8z", () => go(row - 1));
  const bNext = btn("Next step (→)", "M4 2v12l8-6z", () => go(row + 1));
  const bLast = btn("Last step (End)", "M11 2h2v12h-2zM2 2v12l8-6z", () => go(rows() - 1));
  const counter = h("span", { class: "gs-counter", "aria-live": "polite" });
  const timeline = h("ol", { class: "gs-cmp-timeline", "aria-label": "Aligned steps: original above, fix below" });
  const stepper = h("div", { class: "gs-cmp-stepper", role: "group", "aria-label": "Steps of both runs" },
    h("div", { class: "gs-controls" }, bFirst, bPrev, bNext, bLast, counter), timeline);
  const diffList = h("ul", { class: "gs-cmp-diff", "aria-live": "polite", "aria-label": "Differences at this step" });
  const cols = h("div", { class: "gs-cmp-cols" });
  host.replaceChildren(h("div", { class: "gs-cmp-head" }, title, back, keep), stepper, diffList, cols);
  host.hidden = true;

  const rows = () => (cmp ? cmp.rows.length : 0);

  host.addEventListener("keydown", (ev) => {
    const t = ev.target;
    if (t && t.tagName === "BUTTON" && (ev.key === " " || ev.key === "Enter")) return;
    api.handleKey(ev);
    // the single view around this one must not step while hidden (Ctrl/⌘ shortcuts still reach the page)
    if (!ev.ctrlKey && !ev.metaKey) ev.stopPropagation();
  }, true);

  function buildTimeline() {
    rowEls = cmp.rows.map((r, k) => {
      const d = cmp.diffAt(k);
      const differs = describeDiff(d, traces.a, traces.b).length > 0;
      // its name starts with what it shows (both runs' labels), then says what they are
      const b = h("button", { type: "button", onclick: () => go(k), "aria-label": `${rowLabel(traces.a, r.a)} ${rowLabel(traces.b, r.b)}: step ${k + 1}, original ${rowLabel(traces.a, r.a)}, fix ${rowLabel(traces.b, r.b)}${differs ? ", differs" : ""}` },
        h("span", { class: `gs-cmp-tl-a ${r.a === null ? "gs-cmp-none" : ""}` }, rowLabel(traces.a, r.a)),
        " ",
        h("span", { class: `gs-cmp-tl-b ${r.b === null ? "gs-cmp-none" : ""}` }, rowLabel(traces.b, r.b)));
      return h("li", { class: `gs-cmp-tl-row ${r.kind === "call" ? "gs-cmp-tl-call" : ""} ${differs ? "gs-cmp-differs" : ""}`, "data-row": k }, b);
    });
    timeline.replaceChildren(...rowEls);
  }

  function markDiffs(d) {
    SIDES.forEach(({ key }, s) => {
      const v = viewers[s];
      const root = v.el;
      for (const e of root.querySelectorAll("[data-diff]")) e.removeAttribute("data-diff");
      // a node inside a collapsed module is drawn as that module's box: mark the box
      const expanded = v.expanded;
      const groups = new Map();
      for (const [id, kinds] of d[key]) {
        const rep = representative(v.model, expanded, id);
        if (rep.startsWith("g:")) {
          const path = rep.slice(2);
          if (!groups.has(path)) groups.set(path, new Set());
          for (const k of kinds) groups.get(path).add(k);
          continue;
        }
        const e = root.querySelector(`[data-node-id="${id}"]`);
        if (e) e.setAttribute("data-diff", [...kinds].sort().join(" "));
      }
      for (const [path, kinds] of groups) {
        const e = root.querySelector(`g.gs-item[data-group="${CSS.escape(path)}"]`);
        if (e) e.setAttribute("data-diff", [...kinds].sort().join(" "));
      }
    });
  }

  function go(k) {
    if (!cmp || !rows()) return;
    row = Math.max(0, Math.min(rows() - 1, k));
    const d = cmp.diffAt(row);
    SIDES.forEach(({ key }, s) => {
      const v = viewers[s];
      const i = d.shown[key];
      const col = v.el;
      if (i !== null) {
        if (i === v.step + 1) v.next();
        else v.setStep(i);
      }
      const held = key === "a" ? d.shown.heldA : d.shown.heldB;
      col.dataset.step = i === null ? "" : String(i);
      col.dataset.held = String(held);
      const trace = traces[key];
      col.querySelector(".gs-cmp-col-step").textContent = i === null
        ? "no steps"
        : held
          ? `no matching step (showing step ${i + 1}: ${stepTitle(v.model.steps[i])})`
          : `step ${i + 1} of ${trace.steps.length}: ${stepTitle(v.model.steps[i])}`;
    });
    markDiffs(d);
    host.dataset.row = String(row);
    host.dataset.rows = String(rows());
    counter.textContent = `${row + 1} / ${rows()}`;
    bFirst.disabled = bPrev.disabled = row <= 0;
    bNext.disabled = bLast.disabled = row >= rows() - 1;
    rowEls.forEach((li, k) => {
      li.classList.toggle("gs-current", k === row);
      if (k === row) li.firstChild.setAttribute("aria-current", "step");
      else li.firstChild.removeAttribute("aria-current");
    });
    const cur = rowEls[row];
    if (cur) {
      const left = cur.offsetLeft - timeline.offsetLeft;
      if (left < timeline.scrollLeft || left + cur.offsetWidth > timeline.scrollLeft + timeline.clientWidth) {
        timeline.scrollLeft = left - timeline.clientWidth / 2 + cur.offsetWidth / 2;
      }
    }
    const sentences = describeDiff(d, traces.a, traces.b);
    diffList.replaceChildren(...(sentences.length
      ? sentences.map((x) => h("li", { class: `gs-cmp-diff-${x.kind}`, "data-diff-kind": x.kind }, x.text))
      : [h("li", { class: "gs-muted" }, "No difference at this step.")]));
  }

  function exit(choice = "original") {
    api.close();
    if (options.onExit) options.onExit(choice);
  }

  const api = {
    get active() {
      return Boolean(viewers);
    },
    get row() {
      return row;
    },
    get comparison() {
      return cmp;
    },
    /** Show two traces side by side from their first row; map: the fix's line map (fixLineMap). */
    async open({ original, fixed, title: fixTitle = "", map }) {
      api.close();
      traces = { a: original, b: fixed };
      cmp = compareTraces(original, fixed, map);
      title.textContent = fixTitle ? `Original and fixed: ${fixTitle}` : "Original and fixed";
      host.hidden = false;
      viewers = SIDES.map(({ side, label }) => {
        const graph = h("div", { class: "gs-cmp-graph" });
        const col = h("section", { class: "gs-cmp-col", "data-side": side, "aria-label": `${label} run` },
          h("h3", { class: "gs-cmp-col-title" }, label, " ", h("span", { class: "gs-cmp-col-step gs-muted" })), graph);
        cols.append(col);
        const hidden = h("div", { hidden: true });
        col.append(hidden);
        const v = createViewer(col, {
          code: side === "fixed" ? options.code || null : null,
          slots: { stepper: hidden.appendChild(h("div")), graph, panels: hidden.appendChild(h("div")) },
        });
        // a relayout (expand/collapse) rebuilds nodes: mark them again
        col.addEventListener("gs-layout", () => cmp && markDiffs(cmp.diffAt(row)));
        return v;
      });
      await Promise.all([viewers[0].setTrace(original), viewers[1].setTrace(fixed)]);
      buildTimeline();
      // open where the runs first differ ("No difference at this step" tells nothing)
      let first = 0;
      for (let k = 0; k < rows(); k++) {
        if (describeDiff(cmp.diffAt(k), original, fixed).length) {
          first = k;
          break;
        }
      }
      go(first);
      // the Apply fix button that had the focus is gone: move it here (←/→ step from here on)
      title.focus({ preventScroll: true });
      host.dispatchEvent(new CustomEvent("gs-compare-ready"));
    },
    close() {
      if (viewers) for (const v of viewers) v.destroy();
      viewers = null;
      cmp = null;
      traces = null;
      row = 0;
      cols.replaceChildren();
      timeline.replaceChildren();
      diffList.replaceChildren();
      host.hidden = true;
      delete host.dataset.row;
      delete host.dataset.rows;
    },
    go,
    hoverLine(line) {
      if (viewers) viewers[1].hoverLine(line);
    },
    handleKey(ev) {
      if (!viewers || ev.altKey || ev.ctrlKey || ev.metaKey) return false;
      const keys = {
        ArrowRight: () => go(row + 1),
        ArrowLeft: () => go(row - 1),
        Home: () => go(0),
        End: () => go(rows() - 1),
        f: () => viewers.forEach((v) => v.fit()),
        Escape: () => exit("original"),
      };
      const fn = keys[ev.key];
      if (!fn) return false;
      ev.preventDefault();
      fn();
      return true;
    },
  };
  return api;
}
