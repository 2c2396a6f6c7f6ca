// What the code printed, under the step buttons: the step's own output (Step.stdout, printed since
// the previous step) and, at the last step, what it printed after it. On a phone the Output panel is
// screens below the step, and an embed may have no panels: here it is beside the buttons that step
// through the run, its last lines shown, a button for all of them. (Where the Output panel sits
// beside the graph, on a wide page, the stylesheet leaves this out.)

import { h } from "./dom.js";
import { setText } from "./panels.js";

export const SHOWN_LINES = 3; // lines shown before "all N lines" is asked for

/** The lines of a printed text (a last newline ends a line, it does not start one). */
function linesOf(text) {
  const lines = text.split("\n");
  if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
  return lines;
}

/**
 * What the strip shows at step `index`: null when nothing was printed there, else
 * { parts: [{ key, label, text, lines }], lines } where `text` is a part's whole output and
 * `lines` its line count; `lines` (top level) their sum.
 */
export function stepOutputView(model, index) {
  const step = model ? model.step(index) : null;
  if (!step) return null;
  const parts = [];
  if (step.stdout) parts.push({ key: "step", label: index > 0 ? "printed since the previous step" : "printed before this step", text: step.stdout });
  const n = model.steps.length;
  if (index === n - 1 && model.trace.stdout) {
    const rest = model.trace.stdout.slice(model.steps.reduce((a, s) => a + s.stdout.length, 0));
    if (rest) parts.push({ key: "rest", label: "printed after the last step", text: rest });
  }
  if (!parts.length) return null;
  for (const p of parts) p.lines = linesOf(p.text).length;
  return { parts, lines: parts.reduce((a, p) => a + p.lines, 0) };
}

/** The last `count` lines of `text` (all of it when it has no more). */
export function lastLines(text, count) {
  const lines = linesOf(text);
  return lines.slice(Math.max(0, lines.length - count)).join("\n");
}

/** The strip in `el` (built once): update(view) with a stepOutputView or null (hidden). Like the
 * panels, its DOM is a function of the view (and of whether all lines were asked for). */
export function createStepOutput(el) {
  el.classList.add("gs-step-output");
  el.setAttribute("role", "region");
  el.setAttribute("aria-label", "Printed at this step");
  const body = h("div", { class: "gs-step-output-parts" });
  const more = h("button", { type: "button", class: "gs-link gs-step-output-more" });
  el.append(body, more);
  let all = false; // all lines asked for: kept from step to step until asked back
  let view = null;
  more.addEventListener("click", () => {
    all = !all;
    render();
  });

  function render() {
    const cut = Boolean(view) && view.parts.some((p) => p.lines > SHOWN_LINES);
    el.hidden = !view;
    el.classList.toggle("gs-step-output-all", all && cut);
    body.replaceChildren(...(view ? view.parts : []).map((p) => h("div", { class: "gs-step-output-part", "data-part": p.key },
      h("span", { class: "gs-step-output-label" }, p.label, p.lines > SHOWN_LINES && !all ? ` (last ${SHOWN_LINES} of ${p.lines} lines)` : ""),
      h("pre", { class: "gs-step-output-text", text: all ? p.text.replace(/\n$/, "") : lastLines(p.text, SHOWN_LINES) }),
    )));
    more.hidden = !cut;
    setText(more, !cut ? "" : all ? "fewer lines" : `all ${view.lines} lines`);
    more.setAttribute("aria-expanded", String(all && cut));
  }
  render();

  return {
    update(next) {
      view = next;
      render();
    },
  };
}
