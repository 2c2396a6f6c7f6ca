// Embeds and static exports: draw a trace anywhere, no server needed.
//
//   import { render } from "/static/embed.js";
//   const viewer = await render({ trace, el: document.querySelector("#demo"), step: 0, theme: "auto" });
//   viewer.setStep(3); viewer.next(); viewer.play();
//
// The same viewer as the app (stepper, graph, inspector, tensors, saved-bytes
// chart, output), with the trace's own code shown read-only beside it, and the
// run's diagnoses with their fixes: "Apply fix" opens the side-by-side view of
// the fix's run, which `runFix` gives (a run shipped with a static export, or
// one the server makes).
//
// The layout follows the width the embed is given, not the window's (a course
// page's content column, a notebook cell): narrow, the narration, the graph and
// the step controls come first, one under the other, and the code folds away.

import { createEditor } from "./editor.js";
import { createViewer } from "./viewer.js";
import { createDiagnoses } from "./diagnoses.js";
import { createCompare } from "./compare.js";
import { fixLineMap } from "./align.js";
import { rowsOf } from "./columns.js";
import { h } from "./dom.js";
import { createExercise } from "./exercise.js";

export const NARROW = 720; // px of the embed's own width: below it one column, the code folded
export const PHONE = 480; // below it a shorter graph

function ensureStyles() {
  const href = new URL("./style.css", import.meta.url).href;
  if ([...document.querySelectorAll('link[rel="stylesheet"]')].some((l) => l.href.split("?")[0] === href)) return;
  const link = document.createElement("link");
  link.rel = "stylesheet";
  link.href = href;
  document.head.append(link);
}

/** The exercise's events, by default: to the page that frames this one, and nowhere else. */
function postToParent(msg) {
  if (window.parent !== window) window.parent.postMessage(msg, "*");
}

/** The layout classes for a width: "gs-embed-narrow" and "gs-embed-phone" (pure, for tests). */
export function widthClasses(width) {
  return { "gs-embed-narrow": width > 0 && width < NARROW, "gs-embed-phone": width > 0 && width < PHONE };
}

/**
 * Render `trace` (a parsed trace, docs/trace-format.md) into `el`.
 * theme: "light" | "dark" | "auto" (follows prefers-color-scheme).
 * code: show the snippet beside the graph (default true); narrow, it folds (open it by its "Code" bar).
 * styles: false when the host already provides style.css (static exports, shadow roots).
 * editable: the code can be edited; onRun(): called by Ctrl/⌘+Enter in it (the /embed page's Run).
 * onStep(i): called when the user or a message moves to another step.
 * diagnoses: show the run's diagnoses and their fixes (default true).
 * runFix(code): a promise of the fix's trace (null: not available), for "Apply fix"; without it the
 *   fixes show without the button.
 * pageKeys: the stepper is the page (opened on its own, not framed): a key on the page's body goes to
 *   it before it is clicked, and the page does not scroll on End, → or space instead. A framed
 *   stepper never takes keys from the page around it.
 * predict: the exercise mode (exercise.js): a spec ("x.grad, freed, error"), true or "code" (the
 *   snippet's `# predict:` comments, else a default set at every call); absent/false: off.
 * post(msg): where the exercise's `gradstep:answer`/`gradstep:exercise` events go; by default, framed,
 *   to window.parent (the framing page) and nowhere else. Each is also a `gs-answer` event on `el`.
 * Returns the viewer: setStep(i), next(), prev(), play(), stop(), step, editor, compare, destroy().
 */
export async function render({ trace, el, step = 0, theme = "auto", code = true, panels = true, styles = true,
  editable = false, onRun = null, onStep = null, diagnoses: showDiagnoses = true, runFix = null, pageKeys = false, predict = null, post = null }) {
  if (!el) throw new Error("render: `el` is required");
  if (styles) ensureStyles();
  el.replaceChildren();
  el.classList.add("gs-embed");
  el.classList.toggle("gs-embed-no-code", !code);
  el.classList.remove("gs-embed-comparing");
  if (theme === "light" || theme === "dark") el.dataset.theme = theme;
  else delete el.dataset.theme;
  const codeEl = h("div", { class: "gs-editor gs-embed-code" });
  // Without `code` the code is folded, not gone: whoever sees a run can always read the code behind it.
  const codeBox = h("details", { class: "gs-embed-codebox", open: code },
    h("summary", { class: "gs-embed-code-summary" }, code ? "Code" : "The code behind this"), codeEl);
  const stepperEl = h("div", { class: "gs-embed-stepper" });
  const graphEl = h("div", { class: "gs-embed-graph" });
  const right = h("div", { class: "gs-embed-right" }, graphEl);
  const diagEl = h("section", { class: "gs-embed-diagnoses" });
  const compareEl = h("section", { class: "gs-embed-compare", "aria-label": "The run and the fixed run side by side" });
  const panelsEl = h("div");
  const bottom = h("div", { class: "gs-embed-bottom" }, panelsEl);
  el.append(...[codeBox, right, stepperEl, diagEl, compareEl, panels ? bottom : null].filter(Boolean));

  // the layout follows the embed's own width; the code folds when it becomes narrow (unless edited here)
  let narrow = null;
  const fitWidth = (width) => {
    for (const [cls, on] of Object.entries(widthClasses(width))) el.classList.toggle(cls, on);
    const now = width > 0 && width < NARROW;
    if (now !== narrow) {
      narrow = now;
      if (code) codeBox.open = !now || editable;
    }
  };
  fitWidth(el.getBoundingClientRect().width);
  const sizer = typeof ResizeObserver === "function" ? new ResizeObserver(([e]) => fitWidth(e.contentRect.width)) : null;
  if (sizer) sizer.observe(el);

  let viewer = null;
  const editor = createEditor(codeEl, {
    doc: trace.code || "", readOnly: !code || !editable, onRun, onHoverLine: (line) => viewer && viewer.hoverLine(line), label: "Snippet code",
  });
  const exercise = createExercise(h("div"), { predict, code: editor, post: post || postToParent });
  viewer = createViewer(el, {
    code: editor, onStep, slots: { stepper: stepperEl, graph: graphEl, panels: panelsEl }, onTrace: exercise.onTrace, gate: exercise.gate, shows: exercise.shows,
  });
  graphEl.prepend(exercise.el); // the card above the narration and the graph
  exercise.attach(viewer);
  viewer.editor = editor;
  viewer.exercise = exercise;

  // ---------------------------------------------------------------- diagnoses and Apply fix
  let shown = rowsOf(trace); // the trace the single view shows (the diagnoses are its), as rows: compare.js reads those
  let before = null; // {trace, code, fixed}: what Apply fix left (for "Back") and the fix's run (for "Keep")
  const diag = createDiagnoses(diagEl, {
    onApply: runFix ? (d, fix) => applyFix(d, fix) : null,
    onLine: (line) => {
      if (!editor) return;
      codeBox.open = true;
      editor.revealLine(line);
    },
  });
  const compare = createCompare(compareEl, { code: editor, onExit: (choice) => leaveCompare(choice) });
  viewer.compare = compare;

  // the exercise asks before a call is shown: a diagnosis (and its Apply fix) waits for its questions
  exercise.watch(() => {
    if (!compare.active && !before) showDiagnosesOf(shown);
  });
  function showDiagnosesOf(t) {
    if (!showDiagnoses) return;
    diag.show(t, { held: !exercise.done });
    if (!runFix) for (const b of diagEl.querySelectorAll(".gs-apply-fix")) b.remove();
    if (editor) editor.setMarks({ diagnoses: diag.editorMarks(), changed: [] });
  }

  function fixFailed(d, fix, text) {
    const i = (shown.diagnoses || []).indexOf(d);
    const item = diagEl.querySelector(`.gs-fix[data-fix="${i}.${d.fixes.indexOf(fix)}"]`);
    if (!item) return;
    let note = item.querySelector(".gs-fix-unavailable");
    if (!note) item.append((note = h("p", { class: "gs-fix-unavailable gs-muted", role: "status" })));
    note.textContent = text;
  }

  async function applyFix(d, fix) {
    diag.setBusy(true);
    try {
      let fixed = null;
      try {
        fixed = await runFix(fix.code);
        if (fixed) fixed = rowsOf(fixed);
      } catch (e) {
        fixFailed(d, fix, `The fixed run could not be shown: ${e && e.message ? e.message : e}`);
        return;
      }
      if (!fixed) {
        fixFailed(d, fix, "The fixed run is not part of this page.");
        return;
      }
      before = { trace: shown, code: editor ? editor.getCode() : shown.code, fixed };
      viewer.stop();
      const map = fixLineMap(shown.code || "", fix);
      if (editor) {
        editor.setCode(fix.code);
        const changed = fix.code.split("\n").map((text, i) => [i + 1, text.trim()])
          .filter(([n, text]) => text && (map.changed.has(n) || !map.bToA.has(n))).map(([n]) => n);
        editor.setMarks({ diagnoses: [], changed });
      }
      el.classList.add("gs-embed-comparing");
      await compare.open({ original: shown, fixed, title: fix.title, map });
      compareEl.scrollIntoView({ block: "nearest" });
      el.dispatchEvent(new CustomEvent("gs-fix-shown", { detail: { fix } }));
    } finally {
      diag.setBusy(false);
    }
  }

  /** "original": back to the run the page opened with; "fixed": the fix's run in the single view. */
  async function leaveCompare(choice) {
    el.classList.remove("gs-embed-comparing");
    const back = before;
    before = null;
    if (!back) return;
    if (choice === "original") {
      if (editor) editor.setCode(back.code);
      await viewer.setTrace(back.trace);
    } else {
      await viewer.setTrace(back.fixed);
    }
    el.focus({ preventScroll: true });
  }
  // a new trace (the /embed page's Run): its own diagnoses, the single view
  const setTrace = viewer.setTrace;
  viewer.setTrace = async (next, opts) => {
    if (compare.active) compare.close();
    el.classList.remove("gs-embed-comparing");
    before = null;
    shown = rowsOf(next);
    await setTrace(next, opts);
    showDiagnosesOf(shown);
  };

  const onPageKey = (ev) => {
    if (ev.target !== document.body && ev.target !== document.documentElement) return;
    (compare.active ? compare : viewer).handleKey(ev);
  };
  if (pageKeys) document.addEventListener("keydown", onPageKey);

  const destroy = viewer.destroy;
  viewer.destroy = () => {
    if (sizer) sizer.disconnect();
    document.removeEventListener("keydown", onPageKey);
    compare.close();
    destroy();
  };

  el.tabIndex = el.tabIndex >= 0 ? el.tabIndex : 0; // ←/→, Home/End, space once focused
  el.setAttribute("aria-label", el.getAttribute("aria-label") || "gradstep: autograd steps");
  await viewer.setTrace(trace, { step });
  exercise.settled();
  return viewer;
}
