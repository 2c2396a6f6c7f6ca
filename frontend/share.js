// Permalinks in the app: the Share button puts the code (compressed) and the current step in the
// URL (/#code=<c>&step=N) and offers the link and an <iframe> to copy; opening such a link runs
// that code and goes to that step. For an exercise (code with `# predict:` comments, or the mode on)
// the dialog offers the exercise option: the link and the iframe then carry &predict=code.

import { EMBED_HEIGHT, decodeCode, encodeCode, iframeSnippet, resizeScript } from "./permalink.js";
import { stepTitle } from "./model.js";
import { traceStatus } from "./testing.js";
import { commentQuestions, parseOption } from "./exercise-spec.js";

const h = (tag, attrs = {}, ...kids) => {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  el.append(...kids);
  return el;
};

/** The step a link asks for: a whole number ≥ 0 (the viewer clamps it to the run's steps). */
function stepOf(params) {
  const n = Number(params.get("step"));
  return Number.isInteger(n) && n > 0 ? n : 0;
}

/**
 * Open the permalink in location.hash, if any: put its code in the editor, run it, go to its step.
 * Returns false when the URL carries no code (the app then loads its default snippet).
 * Later changes of the fragment (another link pasted into the address bar) are opened the same way.
 */
let watching = false;

export async function loadPermalink({ editor, viewer, run, setStatus, setExercise = null }) {
  if (!watching) {
    // A link pasted into the address bar of an open app changes only the fragment: no reload.
    watching = true;
    window.addEventListener("hashchange", () => loadPermalink({ editor, viewer, run, setStatus, setExercise }));
  }
  const params = new URLSearchParams(location.hash.slice(1));
  if (!params.has("code")) return false;
  let code;
  try {
    code = await decodeCode(params.get("code"));
  } catch (e) {
    setStatus("error", `This link's code cannot be opened: ${e.message}`);
    traceStatus("link-error");
    return true;
  }
  const current = document.getElementById("gs-picker-current");
  if (current) current.textContent = "Shared code";
  // an example's explanation no longer describes what runs
  document.getElementById("gs-snippet-info")?.replaceChildren();
  editor.setCode(code);
  // predict=code / predict=0: the link says whether its code opens as an exercise (Share's option)
  if (setExercise && params.has("predict")) setExercise(parseOption(params.get("predict") || "code").on);
  await run();
  if (viewer.model) viewer.setStep(stepOf(params));
  return true;
}

/** The Share button: link + embed snippet in a dialog, the link also put in the address bar.
 * exercise (exercise.js): whether the mode is on, for the dialog's exercise option. */
export function installShare({ button, editor, viewer, exercise = null }) {
  if (!button) return null;
  const link = h("input", { type: "text", readonly: "", id: "gs-share-link", "aria-label": "Link to this code and step" });
  const embed = h("textarea", { readonly: "", id: "gs-share-embed", rows: "5", "aria-label": "HTML to embed this stepper", "aria-describedby": "gs-share-embed-note" });
  const embedNote = h("p", { class: "gs-share-note", id: "gs-share-embed-note" },
    `The <script> line after the frame keeps it as high as its content (the frame tells the page its height). `
    + `Without it the frame is ${EMBED_HEIGHT} px high and may scroll inside on a narrow page.`);
  const note = h("p", { class: "gs-share-note" });
  const exerciseBox = h("input", { type: "checkbox", id: "gs-share-exercise", "aria-describedby": "gs-share-exercise-note" });
  const exerciseRow = h("div", { class: "gs-share-exercise" },
    h("label", { for: "gs-share-exercise" }, exerciseBox, " Exercise: the learner predicts each call before it is shown"),
    h("p", { class: "gs-share-note", id: "gs-share-exercise-note" },
      "Adds &predict=code to the link and the frame: the questions of the code's # predict: comments (without any, a default set at every call)."));
  exerciseBox.addEventListener("change", () => fill());
  const copyBtn = (field, label) =>
    h("button", {
      type: "button",
      class: "gs-btn",
      onclick: async (ev) => {
        field.select();
        try {
          await navigator.clipboard.writeText(field.value);
          ev.target.textContent = "Copied";
        } catch {
          document.execCommand("copy"); // clipboard API refused (no permission): the selection still copies
          ev.target.textContent = "Copied";
        }
        setTimeout(() => (ev.target.textContent = label), 1500);
      },
    }, label);
  const dialog = h("dialog", { class: "gs-share-dialog", id: "gs-share-dialog", "aria-labelledby": "gs-share-title" },
    h("h2", { id: "gs-share-title" }, "Share this run"),
    note,
    exerciseRow,
    h("label", { for: "gs-share-link" }, "Link (opens this code at this step)"),
    h("div", { class: "gs-share-row" }, link, copyBtn(link, "Copy link")),
    h("label", { for: "gs-share-embed" }, "Embed in a course page"),
    h("div", { class: "gs-share-row" }, embed, copyBtn(embed, "Copy HTML")),
    embedNote,
    h("div", { class: "gs-share-actions" }, h("button", { type: "button", class: "gs-btn", onclick: () => dialog.close() }, "Close")),
  );
  document.body.append(dialog);

  let shared = null; // {c, step, asks}: what the dialog shows links to
  function fill() {
    if (!shared) return;
    const { c, step, asks } = shared;
    const on = asks && exerciseBox.checked;
    // the app opens code with # predict: comments as an exercise: a link without the option says predict=0
    const predict = on ? "&predict=code" : asks ? "&predict=0" : "";
    const url = `${location.origin}/#code=${c}&step=${step}${predict}`;
    history.replaceState(null, "", url);
    link.value = url;
    const id = `gradstep-${c.slice(-8).replace(/[^A-Za-z0-9_-]/g, "")}-${step}`;
    embed.value = `${iframeSnippet(`${location.origin}/embed#code=${c}&step=${step}${on ? "&predict=code" : ""}`, { id })}\n${resizeScript(id)}`;
  }

  async function share() {
    const code = editor.getCode();
    const ran = viewer.model ? viewer.model.trace.code : null;
    // The step belongs to the last run: a link to edited code starts at its first step.
    const step = ran === code ? viewer.step : 0;
    const c = await encodeCode(code);
    const modeOn = Boolean(exercise && exercise.plan.on && ran === code);
    const asks = modeOn || commentQuestions(code).byLine.size > 0;
    exerciseRow.hidden = !asks;
    exerciseBox.checked = modeOn;
    shared = { c, step, asks };
    fill();
    // One numbering for people: the step as the counter shows it ("3 / 7") and its title; the
    // link's step= counts from 0, as the embed's parameters and messages do (docs/embed.md).
    const s = ran === code && viewer.model ? viewer.model.steps[step] : null;
    note.textContent = s
      ? `Whoever opens it runs this code and lands on the step shown now, ${step + 1} / ${viewer.model.steps.length}: ${stepTitle(s)}. (In the link it is step=${step}: links count steps from 0.)`
      : "The code was edited since the last run: the link runs it from its first step.";
    if (!dialog.open) dialog.showModal();
    link.select();
  }
  button.addEventListener("click", () => share().catch((e) => alert(`Could not make a link: ${e.message}`)));
  return { share, dialog };
}
