// The stepper as an anywidget module, for Jupyter (anywidget), marimo (mo.ui.anywidget), MyST /
// Jupyter Book ({anywidget} directive) and any host following the anywidget front-end contract:
//
//   export default { render({ model, el }) }
//
// model keys: "trace" (a trace object or its JSON text), or "trace_url" (fetched; for MyST pages
// next to a `gradstep export --format json` file), "step" (from 0, clamped), "theme"
// ("light" | "dark" | "auto"), "fixes" (optional: the trace of each fix's run by the fix's code, for
// Apply fix), "predict" (the exercise mode: "" off, "code" the snippet's `# predict:` comments, or a
// spec such as "x.grad, freed"). Changing "step" moves the stepper; changing "trace", "theme" or
// "predict" redraws.
// Stepping in the page sets "step" back (two-way), where the host can save changes.
// "auto" follows the host's own theme where it says one (JupyterLab's data-jp-theme-light, VS
// Code's body classes, a "dark" class or data-theme on <html>/<body> as marimo and MyST set),
// else the system's; it follows the host when its theme changes.
// The view lives in its own shadow root with style.css scoped to it, so the notebook's or book's
// styles and ours never touch. gradstep.notebook inlines this module and everything it imports
// into one string (gradstep.export.bundle) that its small loader module gets from the kernel.

import { render as renderTrace } from "./embed.js";

let cssText = null;

/** style.css for a shadow root: page-level rules become rules of the shadow host. A compound
 * `:root:not(X)` must become the functional `:host(:not(X))` (`:host:not(X)` never matches). */
export function shadowCss(css) {
  return css.replace(/:root((?::not\([^()]*\))+)/g, ":host($1)").replaceAll(":root", ":host");
}

/** The host page's own theme, "light" | "dark", or null where it says none. */
export function hostTheme(doc = document) {
  const body = doc.body;
  const html = doc.documentElement;
  if (body && body.dataset.jpThemeLight === "true") return "light"; // JupyterLab, Notebook 7
  if (body && body.dataset.jpThemeLight === "false") return "dark";
  if (body && body.classList.contains("vscode-dark")) return "dark"; // VS Code
  if (body && (body.classList.contains("vscode-light") || body.classList.contains("vscode-high-contrast-light"))) return "light";
  if (body && body.classList.contains("vscode-high-contrast")) return "dark";
  for (const node of [html, body]) {
    if (!node) continue;
    const t = node.dataset.theme || node.dataset.colorScheme || node.dataset.mode;
    if (t === "dark" || t === "light") return t; // marimo, pydata-sphinx-theme, furo
    if (node.classList.contains("dark") || node.classList.contains("dark-theme")) return "dark"; // marimo, MyST
  }
  return null;
}

/** The theme to draw: "light"/"dark" as asked, "auto" as the host's or else the system's. */
export function resolveTheme(theme, doc = document) {
  if (theme === "light" || theme === "dark") return theme;
  const host = hostTheme(doc);
  if (host) return host;
  const mq = typeof matchMedia === "function" ? matchMedia("(prefers-color-scheme: dark)") : null;
  return mq && mq.matches ? "dark" : "light";
}

// Hosts whose model lacks a method throw from it (MyST's off and save_changes): a view must not.
function quietly(f) {
  try {
    const r = f();
    if (r && typeof r.catch === "function") r.catch(() => {});
  } catch {
    // the host does not implement it
  }
}

async function styleSheet() {
  if (cssText === null) {
    const css = await (await fetch(new URL("./style.css", import.meta.url))).text();
    cssText = `${shadowCss(css)}
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
  const asked = () => model.get("theme") || "auto";

  // The theme on the box and on the view (the stylesheet reads [data-theme] on either).
  const applyTheme = () => {
    const t = resolveTheme(asked());
    box.dataset.theme = t;
    const view = box.firstElementChild;
    if (view && view.classList.contains("gs-embed")) view.dataset.theme = t;
  };
  // A click in the page moves the model too, so Python's widget.step follows.
  const onViewStep = (i) => {
    if (Number(model.get("step")) === i) return;
    quietly(() => model.set("step", i));
    quietly(() => model.save_changes());
  };

  const draw = () => {
    drawing = drawing.then(async () => {
      try {
        const trace = await readTrace(model);
        const view = document.createElement("div");
        box.replaceChildren(view);
        if (viewer && viewer.destroy) viewer.destroy();
        // "fixes": the run of each fix offered, by its code (made when the trace was), for Apply fix
        const runs = model.get("fixes");
        const runFix = async (code) => (runs && typeof runs === "object" && Object.hasOwn(runs, code) ? runs[code] : null);
        const predict = model.get("predict");
        viewer = await renderTrace({
          trace, el: view, step: Number(model.get("step")) || 0, theme: resolveTheme(asked()), styles: false, onStep: onViewStep, runFix,
          predict: typeof predict === "string" && predict.trim() ? predict : null,
        });
        applyTheme();
      } catch (e) {
        viewer = null;
        showError(box, e);
      }
    });
    return drawing;
  };
  const onStep = () => {
    drawing = drawing.then(() => {
      const i = Number(model.get("step")) || 0;
      if (viewer && viewer.step !== i) viewer.setStep(i);
    });
  };
  const onTheme = () => {
    drawing = drawing.then(applyTheme);
  };
  model.on("change:trace", draw);
  model.on("change:trace_url", draw);
  model.on("change:theme", onTheme);
  model.on("change:predict", draw);
  model.on("change:step", onStep);
  // "auto" follows the host's theme and the system's as they change.
  const watcher = new MutationObserver(() => asked() === "auto" && applyTheme());
  const watched = { attributes: true, attributeFilter: ["class", "data-theme", "data-jp-theme-light", "data-color-scheme", "data-mode"] };
  watcher.observe(document.documentElement, watched);
  if (document.body) watcher.observe(document.body, watched);
  const mq = typeof matchMedia === "function" ? matchMedia("(prefers-color-scheme: dark)") : null;
  const onSystem = () => asked() === "auto" && applyTheme();
  if (mq && mq.addEventListener) mq.addEventListener("change", onSystem);
  applyTheme();
  await draw();
  return () => {
    watcher.disconnect();
    if (mq && mq.removeEventListener) mq.removeEventListener("change", onSystem);
    quietly(() => model.off("change:trace", draw));
    quietly(() => model.off("change:trace_url", draw));
    quietly(() => model.off("change:theme", onTheme));
    quietly(() => model.off("change:predict", draw));
    quietly(() => model.off("change:step", onStep));
    if (viewer && viewer.destroy) viewer.destroy();
    host.remove();
  };
}

export default { render };
