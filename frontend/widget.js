// The stepper as an anywidget module, for Jupyter (anywidget), MyST / Jupyter Book ({anywidget}
// directive) and any host following the anywidget front-end contract:
//
//   export default { render({ model, el }) }
//
// model keys: "trace" (a trace object or its JSON text), or "trace_url" (fetched; for MyST pages
// next to a `gradstep export --format json` file), "step" (from 0, clamped), "theme"
// ("light" | "dark" | "auto"). Changing "step" moves the stepper; changing "trace" or "theme" redraws.
// The view lives in its own shadow root with style.css scoped to it, so the notebook's or book's
// styles and ours never touch. gradstep.notebook inlines this module and everything it imports
// into the one string anywidget loads (gradstep.export.bundle).

import { render as renderTrace } from "./embed.js";

let cssText = null;

async function styleSheet() {
  if (cssText === null) {
    const css = await (await fetch(new URL("./style.css", import.meta.url))).text();
    // Page-level rules become rules of the shadow host.
    cssText = `${css.replaceAll(":root", ":host")}
.gs-widget { background: var(--bg); color: var(--ink); font: 14px/1.45 var(--sans); padding: 8px; }`;
  }
  const style = document.createElement("style");
  style.textContent = cssText;
  return style;
}

async function readTrace(model) {
  const trace = model.get("trace");
  if (typeof trace === "string" && trace) return JSON.parse(trace);
  if (trace && typeof trace === "object") return trace;
  const url = model.get("trace_url");
  if (url) {
    const res = await fetch(url);
    if (!res.ok) throw new Error(`could not load the trace from ${url}: HTTP ${res.status}`);
    return res.json();
  }
  throw new Error('the widget has no "trace" (or "trace_url") to show');
}

function showError(box, e) {
  const p = document.createElement("p");
  p.className = "gs-export-failed";
  p.setAttribute("role", "alert");
  p.textContent = `gradstep could not show this trace: ${e && e.message ? e.message : e}`;
  box.replaceChildren(p);
}

async function render({ model, el }) {
  const host = document.createElement("div");
  host.className = "gradstep-widget-host";
  el.append(host);
  const root = host.attachShadow({ mode: "open" });
  const box = document.createElement("div");
  box.className = "gs-widget";
  root.append(await styleSheet(), box);
  let viewer = null;
  let drawing = Promise.resolve();

  const draw = () => {
    drawing = drawing.then(async () => {
      try {
        const trace = await readTrace(model);
        const view = document.createElement("div");
        box.replaceChildren(view);
        viewer = await renderTrace({ trace, el: view, step: Number(model.get("step")) || 0, theme: model.get("theme") || "auto", styles: false });
      } catch (e) {
        viewer = null;
        showError(box, e);
      }
    });
    return drawing;
  };
  const onStep = () => {
    drawing = drawing.then(() => viewer && viewer.setStep(Number(model.get("step")) || 0));
  };
  model.on("change:trace", draw);
  model.on("change:trace_url", draw);
  model.on("change:theme", draw);
  model.on("change:step", onStep);
  await draw();
  return () => {
    model.off?.("change:trace", draw);
    model.off?.("change:trace_url", draw);
    model.off?.("change:theme", draw);
    model.off?.("change:step", onStep);
    if (viewer && viewer.destroy) viewer.destroy();
    host.remove();
  };
}

export default { render };
