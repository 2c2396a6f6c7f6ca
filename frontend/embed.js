// Embeds and static exports: draw a trace anywhere, no server needed.
//
//   import { render } from "/static/embed.js";
//   const viewer = await render({ trace, el: document.querySelector("#demo"), step: 0, theme: "auto" });
//   viewer.setStep(3); viewer.next(); viewer.play();
//
// The same viewer as the app (stepper, graph, inspector, tensors, saved-bytes
// chart, output), with the trace's own code shown read-only beside it.

import { createEditor } from "./editor.js";
import { createViewer } from "./viewer.js";

function ensureStyles() {
  const href = new URL("./style.css", import.meta.url).href;
  if ([...document.querySelectorAll('link[rel="stylesheet"]')].some((l) => l.href.split("?")[0] === href)) return;
  const link = document.createElement("link");
  link.rel = "stylesheet";
  link.href = href;
  document.head.append(link);
}

/**
 * Render `trace` (a parsed trace, docs/trace-format.md) into `el`.
 * theme: "light" | "dark" | "auto" (follows prefers-color-scheme).
 * code: show the snippet beside the graph (default true).
 * styles: false when the host already provides style.css (static exports, shadow roots).
 * editable: the code can be edited; onRun(): called by Ctrl/⌘+Enter in it (the /embed page's Run).
 * onStep(i): called when the user or a message moves to another step.
 * Returns the viewer: setStep(i), next(), prev(), play(), stop(), step, editor, destroy().
 */
export async function render({ trace, el, step = 0, theme = "auto", code = true, panels = true, styles = true,
  editable = false, onRun = null, onStep = null }) {
  if (!el) throw new Error("render: `el` is required");
  if (styles) ensureStyles();
  el.replaceChildren();
  el.classList.add("gs-embed");
  el.classList.toggle("gs-embed-no-code", !code);
  if (theme === "light" || theme === "dark") el.dataset.theme = theme;
  else delete el.dataset.theme;
  const left = document.createElement("div");
  left.className = "gs-embed-left";
  const right = document.createElement("div");
  right.className = "gs-embed-right";
  const bottom = document.createElement("div");
  bottom.className = "gs-embed-bottom";
  const codeEl = document.createElement("div");
  codeEl.className = "gs-editor gs-embed-code";
  const stepperEl = document.createElement("div");
  const graphEl = document.createElement("div");
  graphEl.className = "gs-embed-graph";
  const panelsEl = document.createElement("div");
  if (code) left.append(codeEl);
  left.append(stepperEl);
  right.append(graphEl);
  bottom.append(panelsEl);
  el.append(left, right);
  if (panels) el.append(bottom);
  let viewer = null;
  const editor = code
    ? createEditor(codeEl, { doc: trace.code || "", readOnly: !editable, onRun, onHoverLine: (line) => viewer && viewer.hoverLine(line), label: "Snippet code" })
    : null;
  viewer = createViewer(el, { code: editor, onStep, slots: { stepper: stepperEl, graph: graphEl, panels: panelsEl } });
  viewer.editor = editor;
  el.tabIndex = el.tabIndex >= 0 ? el.tabIndex : 0; // ←/→, Home/End, space once focused
  el.setAttribute("aria-label", el.getAttribute("aria-label") || "gradstep: autograd steps");
  await viewer.setTrace(trace, { step });
  return viewer;
}
