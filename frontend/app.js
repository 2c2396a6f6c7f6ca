// The page: editor + snippet picker + Run, wired to the viewer.
import { createEditor } from "./editor.js";
import { createViewer } from "./viewer.js";
import { limitName } from "./model.js";
import { installShare, loadPermalink } from "./share.js";
import { createDiagnoses } from "./diagnoses.js";
import { createCompare } from "./compare.js";
import { h } from "./dom.js";

const $ = (sel) => document.querySelector(sel);

function readJSON(id) {
  const el = document.getElementById(id);
  try {
    return el ? JSON.parse(el.textContent) : null;
  } catch {
    return null;
  }
}

const config = readJSON("gs-config") || {};
const api = config.api || "";
let snippets = readJSON("gs-snippets") || [];

// ------------------------------------------------------------------ theme
const root = document.documentElement;
const savedTheme = localStorage.getItem("gradstep-theme");
if (savedTheme) root.dataset.theme = savedTheme;
const themeBtn = $("#gs-theme");
function currentTheme() {
  return root.dataset.theme || (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
}
function syncThemeButton() {
  const t = currentTheme();
  themeBtn.textContent = t === "dark" ? "☀ Light" : "☾ Dark";
  themeBtn.setAttribute("aria-label", `Switch to ${t === "dark" ? "light" : "dark"} theme`);
}
themeBtn.addEventListener("click", () => {
  root.dataset.theme = currentTheme() === "dark" ? "light" : "dark";
  localStorage.setItem("gradstep-theme", root.dataset.theme);
  syncThemeButton();
});
syncThemeButton();

// ------------------------------------------------------------------ editor + viewer
const status = $("#gs-run-status");
const runBtn = $("#gs-run");
let lastRunCode = null;
let pickedCode = null; // the code of the example last picked

const editor = createEditor($("#gs-editor"), {
  doc: "",
  onRun: () => run(),
  onHoverLine: (line) => (compare.active ? compare.hoverLine(line) : viewer.hoverLine(line)),
  onChange: (codeNow) => {
    document.body.classList.toggle("gs-edited", codeNow !== lastRunCode);
    // the example's explanation is about its own code: say so once the code differs
    // (a shared link empties the card: no example is showing then)
    const shown = pickedCode !== null && document.getElementById("gs-snippet-info").childElementCount > 0;
    document.body.classList.toggle("gs-example-edited", shown && codeNow !== pickedCode);
  },
});

const viewer = createViewer($("#gs-viewer"), {
  code: editor,
  slots: { stepper: $("#gs-stepper"), graph: $("#gs-graph"), panels: $("#gs-panels") },
});
// diagnoses of the last run, and the side-by-side view "Apply fix" opens
let currentTrace = null;
const diagnoses = createDiagnoses($("#gs-diagnoses"), {
  onApply: (d, fix) => applyFix(fix),
  onLine: (line) => {
    editor.revealLine(line);
    editor.focus();
  },
});
const compare = createCompare($("#gs-compare"), { code: editor, onExit: () => leaveCompare() });

function leaveCompare() {
  document.body.classList.remove("gs-comparing");
  // the single view shows the last run (the fixed code): give it back the editor's marks
  if (viewer.model) viewer.setStep(viewer.step);
  viewer.fit();
}

async function applyFix(fix) {
  const original = currentTrace;
  diagnoses.setBusy(true);
  try {
    editor.setCode(fix.code);
    const fixed = await run();
    if (!fixed || !original) return;
    document.body.classList.add("gs-comparing");
    await compare.open({ original, fixed, title: fix.title });
  } finally {
    diagnoses.setBusy(false);
  }
}

window.gradstep = { viewer, editor, run, pick, compare, applyFix };

// keyboard: ←/→, Home/End, space anywhere outside the editor and form fields
document.addEventListener("keydown", (ev) => {
  if ((ev.ctrlKey || ev.metaKey) && ev.key === "Enter") {
    ev.preventDefault();
    run();
    return;
  }
  const t = ev.target;
  if (t.closest && (t.closest(".cm-editor") || t.closest("#gs-viewer") || t.closest(".gs-picker"))) return;
  if (/^(INPUT|SELECT|TEXTAREA)$/.test(t.tagName)) return;
  if (t.tagName === "BUTTON" && (ev.key === " " || ev.key === "Enter")) return;
  if (compare.active) compare.handleKey(ev);
  else viewer.handleKey(ev);
});

// ------------------------------------------------------------------ run
let inFlight = null;
let runSeq = 0;

function setStatus(kind, text, extra) {
  status.className = `gs-run-status gs-status-${kind}`;
  status.replaceChildren(...[
    kind === "running" && h("div", { class: "gs-progress", role: "progressbar", "aria-label": "Running the snippet" }),
    h("span", { text }),
    extra,
  ].filter(Boolean));
}

/** Run the editor's code; resolves to its trace (undefined when the request failed or was replaced). */
async function run() {
  const code = editor.getCode();
  if (compare.active) {
    compare.close();
    leaveCompare();
  }
  if (inFlight) inFlight.abort();
  const ctrl = new AbortController();
  inFlight = ctrl;
  const seq = ++runSeq;
  const t0 = performance.now();
  document.body.classList.add("gs-running");
  runBtn.disabled = false;
  runBtn.setAttribute("aria-busy", "true");
  setStatus("running", "Running in the sandbox…");
  const tick = setInterval(() => {
    if (seq === runSeq) setStatus("running", `Running in the sandbox… ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  }, 200);
  try {
    const res = await fetch(`${api}/api/trace`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ code }),
      signal: ctrl.signal,
    });
    if (!res.ok) {
      let message = `${res.status} ${res.statusText}`;
      try {
        message = (await res.json()).error || message;
      } catch {}
      const retry = res.headers.get("retry-after");
      throw new Error(`${message}${retry ? ` (retry in ${retry} s)` : ""}`);
    }
    const trace = await res.json();
    if (seq !== runSeq) return;
    const arrived = performance.now();
    lastRunCode = code;
    document.body.classList.remove("gs-edited");
    await viewer.setTrace(trace);
    const rendered = performance.now();
    window.gradstepTiming = { request: arrived - t0, render: rendered - arrived, total: rendered - t0, nodes: (trace.nodes || []).length };
    // painted: the frame after the DOM was built has been drawn
    requestAnimationFrame(() => setTimeout(() => {
      const painted = performance.now();
      Object.assign(window.gradstepTiming, { painted: painted - arrived, clickToPaint: painted - t0 });
      document.body.dataset.painted = String(seq);
    }, 0));
    document.body.dataset.traceStatus = trace.status;
    reportStatus(trace, rendered - t0);
    currentTrace = trace;
    diagnoses.show(trace);
    editor.setMarks({ diagnoses: diagnoses.editorMarks() });
    return trace;
  } catch (e) {
    if (e.name === "AbortError") return;
    setStatus("error", `Could not run: ${e.message}`);
    document.body.dataset.traceStatus = "request-error";
  } finally {
    clearInterval(tick);
    if (seq === runSeq) {
      document.body.classList.remove("gs-running");
      runBtn.removeAttribute("aria-busy");
      inFlight = null;
      document.body.dataset.runs = String(seq);
    }
  }
}

function reportStatus(trace, ms) {
  const steps = (trace.steps || []).length;
  const took = `${(ms / 1000).toFixed(2)} s`;
  if (trace.status === "ok") setStatus("ok", `Ran in ${took} · ${steps} step${steps === 1 ? "" : "s"} · ${(trace.nodes || []).length} nodes`);
  else if (trace.status === "error") {
    const e = trace.error || {};
    setStatus("error", `${e.type || "Error"}${e.line ? ` at line ${e.line}` : ""}: ${e.message || ""}`);
  } else if (trace.status === "timeout") setStatus("error", `Stopped: the run hit the time limit. ${trace.error ? trace.error.message : ""}`);
  else if (trace.status === "limit") setStatus("error", `Stopped: the run hit the ${limitName(trace.limit)} limit. ${trace.error ? trace.error.message : ""}`);
  else setStatus("error", `The run crashed. ${trace.error ? trace.error.message : ""}`);
}

runBtn.addEventListener("click", () => run());
$("#gs-snippet-info").addEventListener("click", (ev) => {
  const el = ev.currentTarget;
  el.classList.toggle("gs-open");
  el.title = el.classList.contains("gs-open") ? "" : "Click to show the whole explanation";
});

// ------------------------------------------------------------------ snippets
const picker = $("#gs-picker");
const pickerList = $("#gs-picker-list");
const info = $("#gs-snippet-info");

function renderPicker() {
  pickerList.replaceChildren();
  for (const s of snippets) {
    const onclick = () => {
      picker.open = false;
      pick(s.name);
    };
    pickerList.append(h("li", {},
      h("button", { type: "button", class: "gs-pick", "data-snippet": s.name, onclick },
        h("strong", { text: s.title }),
        s.fails && h("em", { class: "gs-fails", text: "fails on purpose" }),
        h("span", { text: s.summary }))));
  }
}

async function pick(name, { autorun = true } = {}) {
  let s = snippets.find((x) => x.name === name);
  if (!s) return;
  if (!s.code) {
    const res = await fetch(`${api}/api/snippets/${encodeURIComponent(name)}`);
    s = Object.assign(s, await res.json());
  }
  pickedCode = s.code;
  editor.setCode(s.code);
  info.replaceChildren(...[
    h("p", { class: "gs-info-edited", text: "You changed this example's code: the explanation below is about the original." }),
    h("h1", { text: s.title }),
    s.summary && h("p", { text: s.summary }),
    s.watch && h("p", { class: "gs-watch" }, h("strong", { text: "Watch: " }), s.watch),
  ].filter(Boolean));
  info.classList.remove("gs-open");
  info.title = "Click to show the whole explanation";
  $("#gs-picker-current").textContent = s.title;
  for (const b of pickerList.querySelectorAll("button")) b.setAttribute("aria-current", b.dataset.snippet === name ? "true" : "false");
  const url = new URL(location.href);
  url.searchParams.set("snippet", name);
  url.hash = ""; // a permalink's code gives way to the snippet's
  history.replaceState(null, "", url);
  if (autorun) await run();
}

async function start() {
  if (!snippets.length) {
    try {
      snippets = await (await fetch(`${api}/api/snippets`)).json();
    } catch {
      snippets = [];
    }
  }
  renderPicker();
  if (await loadPermalink({ editor, viewer, run, setStatus })) return;
  const wanted = new URL(location.href).searchParams.get("snippet");
  const first = snippets.find((s) => s.name === wanted) || snippets.find((s) => s.name === config.default) || snippets[0];
  if (first) await pick(first.name);
  else setStatus("idle", "Write a snippet and press Run (Ctrl/⌘+Enter).");
}

document.addEventListener("click", (ev) => {
  if (picker.open && !picker.contains(ev.target)) picker.open = false;
});
picker.addEventListener("keydown", (ev) => {
  if (ev.key === "Escape") {
    picker.open = false;
    picker.querySelector("summary").focus();
  }
});

installShare({ button: $("#gs-share"), editor, viewer });
start();
