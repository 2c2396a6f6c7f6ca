// The line under the editor that says what the last run did: running (with a progress bar), how
// long it took and what it built, or why it stopped.

import { limitName, quote, reportedText } from "./model.js";
import { h } from "./dom.js";

/** What a finished run's trace says, as [kind, text] ("ok" or "error"); `ms` from click to render.
 * `held`: the exercise has questions to ask: a run that fails in a call reads like one that does not. */
export function runSummary(trace, ms, { held = false } = {}) {
  const steps = (trace.steps || []).length;
  const took = `${(ms / 1000).toFixed(2)} s`;
  if (held && (trace.status === "ok" || trace.status === "error")) {
    return ["ok", `Ran in ${took} · ${steps} step${steps === 1 ? "" : "s"} · ${(trace.nodes || []).length} nodes · exercise on`];
  }
  const more = trace.error ? trace.error.message : "";
  const reported = (trace.reaches || []).length ? " · reported by the code" : "";
  if (trace.status === "ok") return ["ok", `Ran in ${took} · ${steps} step${steps === 1 ? "" : "s"} · ${(trace.nodes || []).length} nodes${reported}`];
  if (trace.status === "error") {
    const e = trace.error || {};
    // the exception's own words, quoted: torch's or Python's, never gradstep's
    return ["error", `${e.type || "Error"}${e.line ? ` at line ${e.line}` : ""}${e.message ? `: ${quote(e.message)}` : ""}`];
  }
  if (trace.status === "timeout") return ["error", `Stopped: the run hit the time limit. ${more}`];
  if (trace.status === "limit" && steps) {
    // what it recorded is on the page; the message above the graph says which limit and what to do
    const line = trace.error && trace.error.line ? ` at line ${trace.error.line}` : "";
    const name = limitName(trace.limit);
    return ["error", `${name[0].toUpperCase()}${name.slice(1)} limit${line} · ${steps} step${steps === 1 ? "" : "s"} kept`];
  }
  if (trace.status === "limit") return ["error", `Stopped: the run hit the ${limitName(trace.limit)} limit. ${more}`];
  return ["error", `The run crashed. ${more}${reportedText(trace.error)}`];
}

/** The status line in `el`: set(kind, text, extra) with kind idle / running / ok / error. A finished
 * run's notes (what ran otherwise here) get a button that shows them (`showNotes`): they follow the
 * step's narration in its box, below what a phone shows of it. */
export function createRunStatus(el, { showNotes = null } = {}) {
  const set = (kind, text, extra) => {
    el.className = `gs-run-status gs-status-${kind}`;
    el.replaceChildren(...[
      kind === "running" && h("div", { class: "gs-progress", role: "progressbar", "aria-label": "Running the snippet" }),
      h("span", { text }),
      extra,
    ].filter(Boolean));
  };
  return {
    set,
    /** A run in progress, `seconds` after its click. */
    running: (seconds = null) => set("running", `Running in the sandbox…${seconds === null ? "" : ` ${seconds.toFixed(1)} s`}`),
    finished: (trace, ms, held = false) => {
      const n = (trace.notes || []).length;
      const notes = n > 0 && showNotes
        ? h("button", { type: "button", class: "gs-link gs-notes-link", text: `${n} note${n === 1 ? "" : "s"}`, onclick: showNotes })
        : null;
      set(...runSummary(trace, ms, { held }), notes);
    },
  };
}
