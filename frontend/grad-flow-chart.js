// The gradient-flow panel: at a backward call, one row per module (the model's blocks in order)
// with its parameters' .grad norm on a log axis, the same module at the earlier calls as faint dots
// (a training loop's iterations), and vanishing / exploding / non-finite rows marked by colour AND
// a sign and a word. A row is a button: it picks the module in the graph. The rows are HTML, joined
// by D3 keyed by module path, so a step rewrites only the widths and texts that changed; "As a
// table" gives the same facts with the previous call's norm, built only while open.

import { select } from "./vendor/d3.js";
import { h } from "./dom.js";
import { fmtNumber } from "./printing.js";
import { stepTitle } from "./model.js";
import {
  EXPLODING, EXPLODING_MIN, HISTORY, VANISHING, callAt, callSteps, defaultLevel, flowLevels, gradFlowView, logDomain, logPosition, sharedPrefix, sparkline,
} from "./grad-flow.js";
import { moduleStats } from "./module-stats.js";

const MARKS = {
  nonfinite: { sign: "✕", word: "nan/inf" },
  vanishing: { sign: "↓", word: "vanishing" },
  exploding: { sign: "↑", word: "exploding" },
  none: { sign: "", word: "no .grad" },
  ok: { sign: "", word: "" },
};

const SVG = "http://www.w3.org/2000/svg";
const SPARK_W = 56; // the sparkline's box, px
const SPARK_H = 14;
const pct = (x) => `${(100 * x).toFixed(2)}%`;
const tickText = (e) => (e >= -2 && e <= 3 ? String(10 ** e >= 1 ? 10 ** e : Number((10 ** e).toFixed(-e))) : `1e${e}`);

/** The value a row shows: its norm, or what stands for it. */
function valueText(row) {
  if (row.status === "nonfinite") return `${MARKS.nonfinite.sign} nan/inf`;
  if (row.status === "none" || row.norm === null) return "—";
  const sign = MARKS[row.status].sign;
  return sign ? `${sign} ${fmtNumber(row.norm)}` : fmtNumber(row.norm);
}

/** A row's accessible name: its visible text first (speech input), then what the marks say. */
function rowName(row, shown) {
  const parts = [`${shown} ${valueText(row)}`];
  if (shown !== row.key) parts.push(`module ${row.key}`);
  if (MARKS[row.status].word && row.status !== "nonfinite") parts.push(MARKS[row.status].word);
  if (row.status === "nonfinite") parts.push(`${row.nonfinite} of ${row.params} .grad hold nan or inf`);
  if (row.history.length) parts.push(`previous call ${row.prev === null ? "—" : fmtNumber(row.prev)}`);
  return parts.join(", ");
}

/**
 * createGradFlowChart(el, {onPick(path)}) → {setModel(model), update(index), setSelected(path)}.
 * setModel hides the panel for a run with no module holding parameters (nothing to chart).
 */
export function createGradFlowChart(el, { onPick } = {}) {
  let model = null;
  let calls = [];
  let levels = [];
  let level = 0;
  let index = 0;
  let selected = null;
  let view = null;
  let drawn = null; // "call:level:earlier calls" the rows show: the steps up to the next call show the same
  // Earlier calls whose module stats are computed: a jump to the 20th call of a loop draws that call
  // at once and the earlier ones a call a task after (each is a pass over a step's nodes).
  let computed = new Set();
  let warming = null;

  const caption = h("p", { class: "gs-gf-caption" });
  const none = h("p", { class: "gs-muted", hidden: true }, "No backward call yet: each module's .grad norm shows from the first call on.");
  const coarser = h("button", { type: "button", class: "gs-btn gs-gf-coarser", onclick: () => setLevel(level - 1) }, "Coarser");
  const finer = h("button", { type: "button", class: "gs-btn gs-gf-finer", onclick: () => setLevel(level + 1) }, "Finer");
  const levelText = h("span", { class: "gs-gf-level", "aria-live": "polite" });
  const controls = h("div", { class: "gs-gf-controls", role: "group", "aria-label": "Module level" }, coarser, levelText, finer);
  const keys = h("p", { class: "gs-gf-keys" },
    h("span", { class: "gs-gf-key" }, h("span", { class: "gs-gf-swatch gs-gf-swatch-now", "aria-hidden": "true" }), "this call"),
    h("span", { class: "gs-gf-key gs-gf-key-past" }, h("span", { class: "gs-gf-swatch gs-gf-swatch-past", "aria-hidden": "true" }), "earlier calls"),
    h("span", { class: "gs-gf-key gs-gf-st-nonfinite", title: "a .grad of the module holds nan or inf" }, "✕ nan/inf"),
    h("span", { class: "gs-gf-key gs-gf-st-vanishing", title: `below ${VANISHING} × the call's largest norm` }, "↓ vanishing (≈0)"),
    h("span", { class: "gs-gf-key gs-gf-st-exploding", title: `above ${EXPLODING} × the call's median norm, and above ${EXPLODING_MIN}` }, "↑ exploding"),
  );
  const list = h("ol", { class: "gs-gf-rows", "aria-label": "‖.grad‖ per module, log scale" });
  const axis = h("div", { class: "gs-gf-axis", "aria-hidden": "true" },
    h("span"), h("span", { class: "gs-gf-ticks" }), h("span", { class: "gs-gf-spark-head" }, "by call"), h("span", {}, "‖.grad‖"));
  const tableBody = h("tbody");
  const table = h("details", { class: "gs-gf-table" },
    h("summary", {}, "As a table"),
    h("table", { class: "gs-table" },
      h("thead", {}, h("tr", {}, ...["module", "‖.grad‖", "previous call", ".grad tensors", "state"].map((c) => h("th", { scope: "col" }, c)))),
      tableBody));
  table.addEventListener("toggle", () => fillTable());
  const chart = h("div", { class: "gs-gf-chart" }, controls, keys, list, axis, table);
  el.replaceChildren(h("h2", {}, "Gradient flow"), caption, none, chart);

  function setLevel(i) {
    const j = Math.max(0, Math.min(levels.length - 1, i));
    if (j === level) return;
    level = j;
    draw();
  }

  const makeRow = (d) => {
    const name = h("span", { class: "gs-gf-name" });
    const bar = h("span", { class: "gs-gf-bar" });
    const past = h("span", { class: "gs-gf-pasts" });
    const dot = h("span", { class: "gs-gf-dot" });
    const track = h("span", { class: "gs-gf-track", "aria-hidden": "true" }, bar, past, dot);
    const spark = document.createElementNS(SVG, "svg");
    spark.setAttribute("class", "gs-gf-spark");
    spark.setAttribute("viewBox", `-3 -3 ${SPARK_W + 6} ${SPARK_H + 6}`);
    spark.setAttribute("aria-hidden", "true");
    spark.setAttribute("focusable", "false");
    const now = document.createElementNS(SVG, "circle");
    now.setAttribute("r", "2.6");
    now.setAttribute("class", "gs-gf-spark-now");
    spark.append(document.createElementNS(SVG, "g"), now);
    const value = h("span", { class: "gs-gf-value" });
    // spaces between the cells (not drawn between grid items): the text reads as the name starts
    const button = h("button", { type: "button", class: "gs-gf-row", "aria-pressed": "false" }, name, " ", track, " ", spark, " ", value);
    // the row's datum at click time: the same row is the same module at every step
    button.addEventListener("click", () => {
      const row = select(button.parentNode).datum();
      if (onPick) onPick(row.key);
    });
    const li = h("li", { "data-module": d.key }, button);
    return li;
  };

  function fillRow(li, d, lo, hi, shown) {
    const button = li.firstChild;
    const [name, track, spark, value] = button.children; // elements only: the spaces between are text
    const [bar, past, dot] = track.children;
    li.className = `gs-gf-st-${d.status}`;
    li.dataset.status = d.status;
    li.dataset.norm = d.norm === null ? "" : String(d.norm);
    name.textContent = shown;
    button.title = d.key;
    const x = d.status === "nonfinite" ? 1 : logPosition(d.norm, lo, hi);
    bar.style.width = pct(x);
    dot.style.left = pct(x);
    dot.hidden = d.status === "none";
    value.textContent = valueText(d);
    button.setAttribute("aria-label", rowName(d, shown));
    button.setAttribute("aria-pressed", String(d.key === selected));
    // the norm over the calls, on the same log axis
    const line = sparkline(d, lo, hi, SPARK_W, SPARK_H);
    select(spark.firstChild)
      .selectChildren()
      .data(line.runs)
      .join((enter) => enter.append(() => document.createElementNS(SVG, "polyline")))
      .attr("points", (pts) => pts);
    const [circle] = [spark.lastChild];
    circle.style.display = line.now ? "" : "none";
    if (line.now) {
      circle.setAttribute("cx", String(line.now[0]));
      circle.setAttribute("cy", String(line.now[1]));
    }
    // the earlier calls, oldest faintest; keyed by the call's step
    const n = d.history.length;
    select(past)
      .selectChildren()
      .data(d.history.filter((p) => p.norm !== null && p.norm > 0), (p) => String(p.call))
      .join((enter) => enter.append(() => h("span", { class: "gs-gf-past" })))
      .each(function (p) {
        const age = n - d.history.indexOf(p); // 1: the previous call
        this.style.left = pct(logPosition(p.norm, lo, hi));
        this.style.opacity = String(age === 1 ? 0.9 : Math.max(0.15, 0.6 - age * 0.03));
        this.classList.toggle("gs-gf-prev", age === 1);
      });
  }

  function fillTable() {
    if (!table.open || !view) {
      tableBody.replaceChildren();
      return;
    }
    select(tableBody)
      .selectChildren()
      .data(view.rows, (d) => d.key)
      .join((enter) => enter.append(() => h("tr", {}, h("th", { scope: "row" }), h("td"), h("td"), h("td"), h("td"))))
      .order()
      .each(function (d) {
        const cells = this.children;
        cells[0].textContent = d.key;
        cells[1].textContent = d.status === "nonfinite" ? "nan/inf" : d.norm === null ? "—" : fmtNumber(d.norm);
        cells[2].textContent = d.history.length ? (d.prev === null ? "—" : fmtNumber(d.prev)) : "(first call)";
        cells[3].textContent = d.status === "nonfinite" ? `${d.params} (${d.nonfinite} non-finite)` : String(d.params);
        cells[4].textContent = MARKS[d.status].word ? `${MARKS[d.status].sign} ${MARKS[d.status].word}`.trim() : "";
      });
  }

  function draw() {
    if (!model || !levels.length) return;
    const call = callAt(calls, index);
    const key = `${call}:${level}:${computed.size}`;
    if (key === drawn) return;
    drawn = key;
    if (call !== null) computed.add(call);
    view = gradFlowView(model, index, levels[level], { calls, ready: (c) => computed.has(c) });
    if (call !== null) warm(call);
    none.hidden = view !== null;
    chart.hidden = view === null;
    el.dataset.call = view ? String(view.call) : "";
    el.dataset.level = String(level);
    if (!view) {
      caption.textContent = "";
      select(list).selectChildren().remove();
      fillTable();
      return;
    }
    const k = calls.indexOf(view.call);
    const { prefix, names } = sharedPrefix(levels[level]);
    caption.textContent = `‖.grad‖ per module${prefix ? ` of ${prefix}` : ""} after the call of step ${view.call + 1} (${stepTitle(model.steps[view.call])}, call ${k + 1} of ${calls.length}). Log scale${view.earlier.length ? `; faint dots and the line by call: the ${view.earlier.length} calls before` : ""}.`;
    coarser.disabled = level <= 0;
    finer.disabled = level >= levels.length - 1;
    levelText.textContent = `${levels[level].length} rows · level ${level + 1} of ${levels.length}`;
    const { lo, hi, ticks } = logDomain(view);
    list.setAttribute("aria-label", `‖.grad‖ per module${prefix ? ` of ${prefix}` : ""}, log scale`);
    el.classList.toggle("gs-gf-over-calls", view.earlier.length > 0);
    select(list)
      .selectChildren()
      .data(view.rows, (d) => d.key)
      .join((enter) => enter.append((d) => makeRow(d)))
      .order()
      .each(function (d) {
        fillRow(this, d, lo, hi, names.get(d.key));
      });
    select(axis.children[1])
      .selectChildren()
      .data(ticks, (t) => String(t.exp))
      .join((enter) => enter.append(() => h("span", { class: "gs-gf-tick" })))
      .each(function (t) {
        this.style.left = pct(t.at);
        this.textContent = tickText(t.exp);
      });
    fillTable();
  }

  /** Compute the stats of the calls before `call`, one a task, then draw them. */
  function warm(call) {
    if (warming !== null) clearTimeout(warming);
    warming = null;
    const k = calls.indexOf(call);
    const missing = calls.slice(Math.max(0, k - HISTORY), k).filter((c) => !computed.has(c));
    if (!missing.length) return;
    const m = model;
    const next = () => {
      warming = null;
      if (m !== model) return;
      const c = missing.shift();
      moduleStats(model, c);
      computed.add(c);
      if (missing.length) warming = setTimeout(next, 0);
      else draw();
    };
    warming = setTimeout(next, 0);
  }

  return {
    setModel(m) {
      model = m;
      calls = m ? callSteps(m) : [];
      levels = m ? flowLevels(m) : [];
      level = defaultLevel(levels);
      selected = null;
      view = null;
      drawn = null;
      computed = new Set();
      el.dataset.call = "";
      if (warming !== null) clearTimeout(warming);
      warming = null;
      select(list).selectChildren().remove();
      el.hidden = !levels.length || !calls.length;
    },
    update(i) {
      index = i;
      draw();
    },
    /** Mark the module picked (null: none). */
    setSelected(path) {
      selected = path;
      for (const b of list.querySelectorAll("button.gs-gf-row")) {
        b.setAttribute("aria-pressed", String(b.parentNode.dataset.module === path));
      }
    },
  };
}
