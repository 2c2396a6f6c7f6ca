// The page: editor + example picker + Run, wired to the viewer. Requests go through api.js, the
// status line is run-status.js, and what tests read from the page is written by testing.js.
import { createEditor } from "./editor.js";
import { createViewer } from "./viewer.js";
import { installShare, loadPermalink } from "./share.js";
import { createDiagnoses } from "./diagnoses.js";
import { createCompare } from "./compare.js";
import { fixLineMap } from "./align.js";
import { createApi } from "./api.js";
import { createRunStatus } from "./run-status.js";
import { createExamples, isStillExample } from "./examples.js";
import { installThemeButton } from "./theme.js";
import { exposeApp, runFinished, runTiming, traceStatus } from "./testing.js";
import { createExercise } from "./exercise.js";
import { commentQuestions } from "./exercise-spec.js";

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
const api = createApi(config.api || "");
installThemeButton($("#gs-theme"));

// ------------------------------------------------------------------ editor + viewer
const status = createRunStatus($("#gs-run-status"), { showNotes: () => viewer.showNotes() });
const runBtn = $("#gs-run");
let lastRunCode = null;
let pickedCode = null; // the code of the example last picked
const examples = createExamples(
  { picker: $("#gs-picker"), list: $("#gs-picker-list"), current: $("#gs-picker-current"), info: $("#gs-snippet-info") },
  { api, onChoose: (name) => pick(name) },
);

const editor = createEditor($("#gs-editor"), {
  doc: "",
  onRun: () => run(),
  onHoverLine: (line) => (compare.active ? compare.hoverLine(line) : viewer.hoverLine(line)),
  onChange: (codeNow) => {
    document.body.classList.toggle("gs-edited", codeNow !== lastRunCode);
    // the example's explanation is about its own code: say so once the code differs
    // (a shared link empties the card: no example is showing then)
    document.body.classList.toggle("gs-example-edited", examples.showing && pickedCode !== null && codeNow !== pickedCode);
  },
});

// The exercise mode: on for code that carries its questions (`# predict:` comments), with a switch
// to turn it off (and on again); the page is not framed, so its answers stay in it.
let exerciseWanted = true;
const exercise = createExercise(document.createElement("div"), {
  code: editor,
  toggle: true,
  onToggle: (on) => {
    exerciseWanted = on;
    exercise.setOption(on ? "code" : null);
  },
});
const viewer = createViewer($("#gs-viewer"), {
  code: editor,
  slots: { stepper: $("#gs-stepper"), graph: $("#gs-graph"), panels: $("#gs-panels") },
  onTrace: (m) => {
    exercise.configure(exerciseWanted && commentQuestions(m.trace.code).byLine.size > 0 ? "code" : null);
    exercise.onTrace(m);
  },
  gate: exercise.gate,
  shows: exercise.shows,
});
$("#gs-graph").prepend(exercise.el);
exercise.attach(viewer);
// diagnoses of the last run, and the side-by-side view "Apply fix" opens
let currentTrace = null;
const diagnoses = createDiagnoses($("#gs-diagnoses"), {
  onApply: (d, fix) => applyFix(fix),
  onLine: (line) => {
    editor.revealLine(line);
    editor.focus();
  },
});
const compare = createCompare($("#gs-compare"), { code: editor, onExit: (choice) => leaveCompare(choice) });
let beforeFix = null; // {code, trace}: the student's own code and run, while a fix is shown

/** Leave the side-by-side view: "original" brings back the student's code and run, "fixed" keeps the fix. */
async function leaveCompare(choice = "fixed") {
  document.body.classList.remove("gs-comparing");
  const back = beforeFix;
  beforeFix = null;
  if (choice === "original" && back) {
    editor.setCode(back.code);
    lastRunCode = back.code;
    document.body.classList.remove("gs-edited");
    currentTrace = back.trace;
    await viewer.setTrace(back.trace);
    status.set("ok", "Your code again, with its run from before the fix.");
    diagnoses.show(back.trace, { held: !exercise.done });
    editor.setMarks({ diagnoses: diagnoses.editorMarks(), changed: [] });
    return;
  }
  // the single view shows the last run (the fixed code): give it back the editor's marks
  if (viewer.model) viewer.setStep(viewer.step);
  viewer.fit();
}

async function applyFix(fix) {
  const original = currentTrace;
  const originalCode = editor.getCode();
  diagnoses.setBusy(true);
  try {
    editor.setCode(fix.code);
    const fixed = await run();
    if (!fixed || !original) return;
    beforeFix = { code: originalCode, trace: original };
    // the lines the fix changed or added, marked in the editor (until the code is edited)
    const map = fixLineMap(original.code, fix);
    const changed = fix.code.split("\n").map((text, i) => [i + 1, text.trim()])
      .filter(([n, text]) => text && (map.changed.has(n) || !map.bToA.has(n))).map(([n]) => n);
    editor.setMarks({ changed });
    document.body.classList.add("gs-comparing");
    await compare.open({ original, fixed, title: fix.title, map });
  } finally {
    diagnoses.setBusy(false);
  }
}

// The exercise asks before a call is shown: until its questions are answered (or skipped), the
// diagnoses (and their Apply fix) and the status line say nothing of how the run goes.
let finished = null; // {trace, ms}: the run the status line tells
function showOutcome() {
  if (!currentTrace || compare.active) return;
  diagnoses.show(currentTrace, { held: !exercise.done });
  editor.setMarks({ diagnoses: diagnoses.editorMarks() });
  if (finished && finished.trace === currentTrace) status.finished(finished.trace, finished.ms, !exercise.done);
}
exercise.watch(showOutcome);

exposeApp({ viewer, editor, run, pick, compare, applyFix, exercise });

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

/** Run the editor's code; resolves to its trace (undefined when the request failed or was replaced). */
/** Code run that is no longer the example (pasted, rewritten) is "Your code": no example's card. */
function forgetExampleIfGone(code) {
  if (pickedCode === null || !examples.showing || code === pickedCode || isStillExample(code, pickedCode)) return;
  examples.showOwn();
  pickedCode = null;
  document.body.classList.remove("gs-example-edited");
  const url = new URL(location.href);
  url.searchParams.delete("snippet");
  history.replaceState(null, "", url);
}

async function run() {
  const code = editor.getCode();
  forgetExampleIfGone(code);
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
  status.running();
  const tick = setInterval(() => {
    if (seq === runSeq) status.running((performance.now() - t0) / 1000);
  }, 200);
  try {
    const trace = await api.trace(code, { signal: ctrl.signal });
    if (seq !== runSeq) return;
    const arrived = performance.now();
    lastRunCode = code;
    document.body.classList.remove("gs-edited");
    currentTrace = trace; // (before its exercise is planned: showOutcome reads it)
    finished = null;
    await viewer.setTrace(trace);
    exercise.settled();
    const rendered = performance.now();
    runTiming(seq, { t0, arrived, rendered, nodes: (trace.nodes || []).length });
    traceStatus(trace.status);
    finished = { trace, ms: rendered - t0 };
    showOutcome();
    return trace;
  } catch (e) {
    if (e.name === "AbortError") return;
    status.set("error", `Could not run: ${e.message}`);
    traceStatus("request-error");
  } finally {
    clearInterval(tick);
    if (seq === runSeq) {
      document.body.classList.remove("gs-running");
      runBtn.removeAttribute("aria-busy");
      inFlight = null;
      runFinished(seq);
    }
  }
}

runBtn.addEventListener("click", () => run());

// ------------------------------------------------------------------ examples

async function pick(name, { autorun = true } = {}) {
  const s = await examples.get(name);
  if (!s) return;
  pickedCode = s.code;
  editor.setCode(s.code);
  examples.show(s);
  const url = new URL(location.href);
  url.searchParams.set("snippet", name);
  url.hash = ""; // a permalink's code gives way to the snippet's
  history.replaceState(null, "", url);
  if (autorun) await run();
}

async function start() {
  await examples.load(readJSON("gs-snippets") || []);
  if (await loadPermalink({ editor, viewer, run, setStatus: status.set, setExercise: (on) => (exerciseWanted = on) })) return;
  const wanted = new URL(location.href).searchParams.get("snippet");
  const all = examples.all;
  const first = all.find((s) => s.name === wanted) || all.find((s) => s.name === config.default) || all[0];
  if (first) await pick(first.name);
  else status.set("idle", "Write a snippet and press Run (Ctrl/⌘+Enter).");
}

installShare({ button: $("#gs-share"), editor, viewer, exercise });
start();
