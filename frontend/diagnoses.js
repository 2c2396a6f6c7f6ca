// The diagnoses of a run (trace version 2): known autograd mistakes the run
// shows — severity, line, message — each with fixes the server ran and checked
// before offering them, in the order offered (a fix that keeps what the code
// means before one that only makes it run), each with what its run computed
// (Fix.outcome). "Apply fix" hands the fix to the page (app.js), which
// runs it and opens the side-by-side view.

import { codeLines, fixLineMap } from "./align.js";
import { h } from "./dom.js";

/** Text with markdown `code` spans as <code> (the diagnoses' texts use them); nothing else parsed. */
export function inlineCode(text) {
  const parts = String(text ?? "").split(/`([^`\n]+)`/);
  return parts.map((p, i) => (i % 2 ? h("code", { class: "gs-narr-code", text: p }) : p)).filter((p) => p !== "");
}

/**
 * The lines a fix changes, for a short preview: [{sign: "-"|"+", line, text}]
 * in the order of the fixed code; lines removed before a kept line come before
 * what the fix added there (a rewrite reads old, then new).
 */
export function changedLines(before, fix) {
  const a = codeLines(before);
  const b = codeLines(fix.code);
  const m = fixLineMap(before, fix);
  const out = [];
  let ia = 1;
  const removeUpTo = (end) => {
    for (; ia < end; ia++) out.push({ sign: "-", line: ia, text: a[ia - 1] });
  };
  let nextKept = 0; // the first fixed line after ib that comes from the original (0: not looked for yet)
  for (let ib = 1; ib <= b.length; ib++) {
    const from = m.bToA.get(ib);
    if (from === undefined) {
      if (nextKept <= ib) for (nextKept = ib + 1; nextKept <= b.length && !m.bToA.has(nextKept);) nextKept++;
      removeUpTo(nextKept <= b.length ? m.bToA.get(nextKept) : a.length + 1);
      out.push({ sign: "+", line: ib, text: b[ib - 1] });
      continue;
    }
    removeUpTo(from);
    if (m.changed.has(ib)) out.push({ sign: "-", line: from, text: a[from - 1] }, { sign: "+", line: ib, text: b[ib - 1] });
    ia = Math.max(ia, from + 1);
  }
  removeUpTo(a.length + 1);
  return out.filter((x) => x.text.trim() !== "" || x.sign === "+");
}

/**
 * createDiagnoses(el, { onApply(diagnosis, fix), onLine(line) }) → { show(trace), editorMarks() }
 */
export function createDiagnoses(el, options = {}) {
  el.classList.add("gs-diagnoses");
  el.setAttribute("aria-label", "Problems found in this run");
  el.hidden = true;
  let current = [];
  let busy = false;

  function setBusy(on) {
    busy = on;
    for (const b of el.querySelectorAll(".gs-apply-fix")) b.disabled = on;
  }

  const api = {
    /** Show the diagnoses of a trace (none: the panel hides). `held`: not yet (the exercise's
     * questions come first: a diagnosis says how a call goes), shown as none, with no Apply fix. */
    show(trace, { held = false } = {}) {
      current = (!held && trace && trace.diagnoses) || [];
      el.replaceChildren();
      el.hidden = current.length === 0;
      if (!current.length) return;
      const code = (trace && trace.code) || "";
      current.forEach((d, i) => {
        const sev = d.severity === "error" ? "error" : "warning";
        const head = h("div", { class: "gs-diag-head" },
          h("span", { class: `gs-diag-sev gs-diag-sev-${sev}` }, sev === "error" ? "Error" : "Warning"),
          d.line !== null && d.line !== undefined
            ? h("button", { type: "button", class: "gs-link gs-diag-line", title: "Show the line in the editor", onclick: () => options.onLine && options.onLine(d.line) }, `line ${d.line}`)
            : null);
        const fixes = (d.fixes || []).map((f, j) => {
          const diff = changedLines(code, f);
          return h("li", { class: "gs-fix", "data-fix": `${i}.${j}` },
            h("strong", { class: "gs-fix-title" }, ...inlineCode(f.title)),
            h("p", { class: "gs-fix-explanation" }, ...inlineCode(f.explanation)),
            f.outcome ? h("p", { class: "gs-fix-outcome" }, h("span", { class: "gs-fix-outcome-head" }, "What the fixed run computes (measured)"), ...inlineCode(f.outcome)) : null,
            diff.length ? h("details", { class: "gs-fix-diff" }, h("summary", {}, "What changes"),
              h("pre", {}, ...diff.map((x) => h("span", { class: `gs-fix-${x.sign === "+" ? "add" : "del"}` }, `${x.sign} ${x.text}\n`)))) : null,
            h("button", { type: "button", class: "gs-btn gs-apply-fix", disabled: busy, "aria-label": `Apply fix: ${String(f.title).replace(/`/g, "")}`,
              onclick: () => options.onApply && options.onApply(d, f) }, "Apply fix"));
        });
        el.append(h("article", { class: `gs-diag gs-diag-${sev}`, "data-kind": d.kind, "data-severity": sev, "data-line": d.line ?? "" },
          head,
          h("p", { class: "gs-diag-message" }, ...inlineCode(d.message)),
          fixes.length ? h("ul", { class: "gs-fixes", "aria-label": "Fixes, each checked by running it" }, fixes)
            : h("p", { class: "gs-muted gs-diag-nofix" }, "No fix could be verified automatically.")));
      });
    },
    /** Lines to mark in the editor: [{line, severity}]. */
    editorMarks() {
      return current.filter((d) => d.line !== null && d.line !== undefined).map((d) => ({ line: d.line, severity: d.severity === "error" ? "error" : "warning" }));
    },
    setBusy,
  };
  return api;
}
