// The side panels (tensors, inspector, output), updated in place: each is built once, and a step
// joins its view (frontend/panel-views.js) to the elements by stable keys, writing a text, class or
// attribute only where the value differs from what the element shows. Stepping through a big trace
// then costs a handful of DOM writes, one style and layout pass, instead of a rebuilt panel.
// A hidden part holds nothing (empty text, no rows): the DOM stays a function of what is shown,
// however the step was reached.

import { select } from "./vendor/d3.js";
import { h } from "./dom.js";

// ------------------------------------------------------------ writes that skip unchanged values

// What an element was last given, beside the DOM (never stored on the element).
const shownText = new WeakMap(); // element → its text
const shownAttrs = new WeakMap(); // element → Map(attribute → value)

/** Set an element's text; nothing is written when it shows that text already. */
export function setText(el, value) {
  if (shownText.get(el) === value) return;
  el.textContent = value;
  shownText.set(el, value);
}

function setAttr(el, name, value) {
  let attrs = shownAttrs.get(el);
  if (!attrs) shownAttrs.set(el, (attrs = new Map()));
  if (attrs.get(name) === value) return;
  if (value === null) el.removeAttribute(name);
  else el.setAttribute(name, value);
  attrs.set(name, value);
}

function setClass(el, value) {
  if (el.className !== value) el.className = value;
}

function shown(el, on) {
  if (el.hidden === !on) return;
  el.hidden = !on;
}

/** Join `items` (each with a `key`) to the children of `parent` made by `make`; `fill` updates one. */
function joinKeyed(parent, items, make, fill) {
  select(parent)
    .selectChildren()
    .data(items, (d) => d.key)
    .join((enter) => enter.append((d) => make(d)))
    .each(function (d) {
      fill(this, d);
    });
}

/**
 * Runs a panel's update now while the panel is on or near the screen; otherwise keeps only the
 * last one asked for and runs it when the panel comes near (a hidden or detached panel never pays).
 */
export function nearScreen(el, margin = 400) {
  let near = true; // until the first observation says otherwise
  let pending = null;
  if (typeof IntersectionObserver === "function") {
    const seen = (entries) => {
      near = entries[entries.length - 1].isIntersecting;
      if (near && pending) {
        const run = pending;
        pending = null;
        run();
      }
    };
    // The page's own document as the root: with the implicit root (the top-level viewport) a
    // browser ignores the margin inside a cross-origin iframe, so an embed's panel would be
    // updated only once on screen and show a step-old frame as it scrolls in.
    let observer;
    try {
      observer = new IntersectionObserver(seen, { root: document, rootMargin: `${margin}px 0px` });
    } catch {
      observer = new IntersectionObserver(seen, { rootMargin: `${margin}px 0px` }); // no document roots
    }
    observer.observe(el);
  }
  return (run) => {
    if (near) {
      pending = null;
      run();
    } else pending = run;
  };
}

// ------------------------------------------------------------ tensors

export function createTensorsPanel(el, { onSelect, onShowAll }) {
  const rowCells = new WeakMap(); // row → its cells
  const none = h("p", { class: "gs-muted", hidden: true }, "No named tensor that can hold a .grad at this step.");
  const body = h("tbody");
  const table = h("table", { class: "gs-table", hidden: true },
    h("thead", {}, h("tr", {}, ...["name", "shape", "leaf", ".grad", ""].map((c) => h("th", { scope: "col" }, c)))), body);
  const more = h("button", { type: "button", class: "gs-btn gs-more", hidden: true, onclick: () => onShowAll() });
  el.replaceChildren(h("h2", {}, "Tensors"), none, table, more);

  const makeRow = () => {
    const button = h("button", { type: "button", class: "gs-link" });
    const cells = { button, shape: h("td"), kind: h("td"), grad: h("td", { class: "gs-mono" }), what: h("td") };
    const tr = h("tr", {}, h("td", {}, button), cells.shape, cells.kind, cells.grad, cells.what);
    // the row's datum at click time: the same row shows the same name at every step
    button.addEventListener("click", () => {
      const d = select(tr).datum();
      if (d.node !== null) onSelect(d.node);
    });
    rowCells.set(tr, cells);
    return tr;
  };
  const fillRow = (tr, d) => {
    const c = rowCells.get(tr);
    setClass(tr, d.what ? "gs-changed" : "");
    setText(c.button, d.name);
    if (c.button.disabled !== (d.node === null)) c.button.disabled = d.node === null;
    setText(c.shape, d.shape);
    setText(c.kind, d.kind);
    setAttr(c.grad, "data-tensor-grad", d.name);
    setText(c.grad, d.grad);
    setClass(c.what, `gs-what gs-what-${d.whatKind ?? d.what}`);
    setText(c.what, d.what);
  };

  return {
    /** view: tensorsView(…), or null (no step). */
    update(view) {
      const rows = view ? view.rows : [];
      shown(none, Boolean(view) && !rows.length);
      shown(table, rows.length > 0);
      joinKeyed(body, rows, makeRow, fillRow);
      const cut = Boolean(view) && rows.length < view.total;
      shown(more, cut);
      setText(more, cut ? `Show all ${view.total} tensors` : "");
    },
  };
}

// ------------------------------------------------------------ inspector

export function createInspector(el) {
  const blockSig = new WeakMap(); // gradient block → what it shows, as JSON
  const hint = h("p", { class: "gs-muted", hidden: true }, "Click a node to see its op, line, module, saved tensors and gradient.");
  const title = h("h3");
  const facts = h("dl", { class: "gs-facts" });
  const savedNone = h("p", { class: "gs-muted" });
  const savedBody = h("tbody");
  const savedTable = h("table", { class: "gs-table" },
    h("thead", {}, h("tr", {}, ...["name", "kind", "shape", "dtype", "bytes", "of", "state"].map((c) => h("th", { scope: "col" }, c)))),
    savedBody);
  const gradNone = h("p", {}, "grad: None");
  const gradBlocks = h("div", { class: "gs-gradblocks" });
  const grads = h("div", { class: "gs-grad-section" }, h("h4", {}, "Gradient"), gradNone, gradBlocks);
  const node = h("div", { class: "gs-inspected", hidden: true }, title, facts, h("h4", {}, "Saved for backward"), savedNone, savedTable, grads);
  el.replaceChildren(h("h2", {}, "Inspector"), hint, node);

  // a fact is a dt/dd pair: grouped in a div (allowed in a dl; display: contents keeps the grid)
  const makeFact = () => {
    const div = h("div", {}, h("dt"), h("dd"));
    return div;
  };
  const fillFact = (div, d) => {
    setText(div.firstChild, d.label);
    setText(div.lastChild, d.value);
  };
  const makeSaved = () => h("tr", {}, ...Array.from({ length: 7 }, () => h("td")));
  const fillSaved = (tr, d) => {
    setClass(tr, `gs-saved-${d.state}`);
    d.cells.forEach((v, i) => setText(tr.children[i], v));
  };
  const makeGrad = () => h("div", { class: "gs-gradblock" });
  const fillGrad = (div, d) => {
    // a block is small: rebuilt as a whole, only when what it says changed
    const sig = JSON.stringify(d);
    if (blockSig.get(div) === sig) return;
    blockSig.set(div, sig);
    if (d.none) div.replaceChildren(h("p", {}, `${d.name}.grad = None`));
    else {
      div.replaceChildren(
        h("div", {}, h("code", {}, `${d.name}.grad`), d.meta),
        h("pre", { class: "gs-values" }, d.values),
        h("div", { class: "gs-muted" }, d.norm),
      );
    }
  };

  return {
    /** view: inspectorView(…) or null (nothing selected); hasModel: false before any trace. */
    update(view, hasModel = true) {
      shown(hint, hasModel && !view);
      shown(node, Boolean(view));
      setText(title, view ? view.title : "");
      joinKeyed(facts, view ? view.facts : [], makeFact, fillFact);
      const none = view ? view.savedNone : null;
      shown(savedNone, none !== null);
      setText(savedNone, none ?? "");
      const saved = view ? view.saved : [];
      shown(savedTable, saved.length > 0);
      joinKeyed(savedBody, saved, makeSaved, fillSaved);
      shown(grads, Boolean(view) && view.grads !== null);
      const blocks = (view && view.grads) || [];
      shown(gradNone, blocks.length === 0);
      joinKeyed(gradBlocks, blocks, makeGrad, fillGrad);
    },
  };
}

// ------------------------------------------------------------ output

export function createOutputPanel(el) {
  const note = h("div", { class: "gs-muted", hidden: true });
  const stdout = h("pre", { class: "gs-stdout", hidden: true });
  const warnings = h("div", { class: "gs-warnings" });
  const restText = h("pre", { class: "gs-stdout" });
  const rest = h("div", { class: "gs-output-rest", hidden: true }, h("div", { class: "gs-muted" }, "printed after the last step"), restText);
  el.replaceChildren(h("h2", {}, "Output"), note, stdout, warnings, rest);

  const makeWarning = () => h("div", { class: "gs-warning", role: "note" }, h("strong"), h("span"));
  const fillWarning = (div, d) => {
    setText(div.firstChild, d.head);
    setText(div.lastChild, d.message);
  };

  return {
    /** view: outputView(…) or null (no trace); step: the index the stdout belongs to. */
    update(view, step) {
      shown(note, Boolean(view && view.note));
      setText(note, (view && view.note) || "");
      shown(stdout, Boolean(view));
      setClass(stdout, !view || view.empty ? "gs-stdout gs-muted" : "gs-stdout");
      setAttr(stdout, "data-stdout-step", view ? String(step) : null);
      setText(stdout, view ? view.stdout : "");
      joinKeyed(warnings, view ? view.warnings : [], makeWarning, fillWarning);
      shown(rest, Boolean(view && view.rest));
      setText(restText, (view && view.rest) || "");
    },
  };
}
