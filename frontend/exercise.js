// The exercise mode ("predict, then see"): before a backward()/autograd.grad() step with questions
// is shown, a card asks the learner to predict it; "Check" shows their answer beside torch's, then
// the step (its narration is the explanation); "Try again" asks again, "Continue" goes on.
//
// The questions, their truth and the checking are exercise-spec.js (pure). Here: the card, the
// node picking in the graph, the badge ("2 of 3 right"), and the events. The viewer asks `gate`
// before every move: a move onto or past a step whose questions are not answered stops on the step
// before it, with the card open (the card always comes first; "Skip" reveals the step and counts
// its questions as not answered). Each answer goes to `post` (the /embed page: its messenger, to
// the framing page only) and, as a `gs-answer` DOM event, to the element holding the card.

import { h } from "./dom.js";
import { fmtGrad, gradValues } from "./model.js";
import { fmtNumber, fmtValues } from "./printing.js";
import {
  commentQuestions, ERROR_CHOICES, TOLERANCE_TEXT, asksNorm, checkError, checkFreed, checkGrad, freedCandidates, nodeLabel, parseGradAnswer,
  planExercise, summarize, truthOf,
} from "./exercise-spec.js";

export const EVENT_VERSION = 1;

const jsonNumber = (v) => (typeof v === "number" && !Number.isFinite(v) ? (Number.isNaN(v) ? "nan" : v > 0 ? "inf" : "-inf") : v);
const jsonValues = (v) => (Array.isArray(v) ? v.map(jsonValues) : jsonNumber(v));

/**
 * createExercise(host, { predict, code, post, toggle }) → exercise
 * host: where the card and badge go (the top of the graph column). code: the editor (the call's
 * line is marked while asking). post(msg): where events go. toggle: a switch to turn it off (and on),
 * shown where the code has `# predict:` comments; onToggle(on): it was switched.
 * exercise.attach(viewer) after the viewer exists; the viewer's options take exercise.onTrace and
 * exercise.gate.
 */
export function createExercise(host, { predict = null, code = null, post = () => {}, toggle = false, onToggle = null } = {}) {
  host.classList.add("gs-exercise");
  host.hidden = true;
  let option = predict;
  let viewer = null;
  let model = null;
  let plan = { on: false, questions: [], errors: [] };
  let byStep = new Map(); // step → [question]
  const revealed = new Set(); // steps shown: answered or skipped
  const results = new Map(); // question id → {answer, correct, firstCorrect, attempt, skipped}
  let asking = null; // the step whose card is open (questions or results)
  let showing = "questions"; // or "results"
  let picked = new Set(); // node ids chosen for the freed question
  let drafts = new Map(); // question id → what the learner entered, kept for "Try again"
  let ready = false; // the first paint is done: opening a card may move the focus
  const watchers = []; // called when what may be shown changes (a step revealed, asked again, a new plan)

  const switchBox = h("input", { type: "checkbox", class: "gs-ex-switch", checked: true });
  const switchRow = h("label", { class: "gs-ex-toggle" }, switchBox, " Exercise: predict each call before it is shown");
  switchBox.addEventListener("change", () => {
    if (onToggle) onToggle(switchBox.checked);
  });
  const errorsEl = h("div", { class: "gs-ex-errors", role: "alert" });
  const badge = h("p", { class: "gs-ex-badge", role: "status" });
  const card = h("section", { class: "gs-ex-card", tabindex: "-1", "aria-labelledby": "" });
  host.append(toggle ? switchRow : "", errorsEl, badge, card);
  card.hidden = true;
  let uid = 0;
  const newId = (p) => `gs-ex-${p}-${++uid}`;

  // ---------------------------------------------------------------- plan

  function replan() {
    closeCard();
    revealed.clear();
    results.clear();
    drafts = new Map();
    plan = model ? planExercise(model, option) : { on: false, questions: [], errors: [] };
    byStep = new Map();
    for (const q of plan.questions) {
      if (!byStep.has(q.step)) byStep.set(q.step, []);
      byStep.get(q.step).push(q);
    }
    // the switch shows where the snippet carries its exercise (# predict: comments)
    switchRow.hidden = !(toggle && model && commentQuestions(model.trace.code).byLine.size > 0);
    host.hidden = !plan.on && switchRow.hidden;
    errorsEl.replaceChildren(...plan.errors.map((e) => h("p", { class: "gs-ex-error" }, e)));
    errorsEl.hidden = !plan.errors.length;
    markTimeline();
    renderBadge();
    for (const fn of watchers) fn(); // (the viewer draws the new trace's steps after this)
  }

  /** The first call step whose questions are not answered yet (Infinity: none): from it on, the
   * page shows nothing of how the run goes on (an error, the freed bytes, the diagnoses). */
  function concealFrom() {
    if (!plan.on || !model) return Infinity;
    let q = Infinity;
    for (const s of byStep.keys()) if (!revealed.has(s) && s < q) q = s;
    return q;
  }

  function changed() {
    if (viewer && model) viewer.concealChanged();
    markTimeline();
    for (const fn of watchers) fn();
  }

  function markTimeline() {
    if (!viewer) return;
    queueMicrotask(() => {
      for (const li of viewer.el.querySelectorAll(".gs-tl-step[data-index]")) {
        // its "?" says a question waits there: gone once it is answered or skipped
        const step = Number(li.dataset.index);
        li.classList.toggle("gs-tl-asks", byStep.has(step) && !revealed.has(step));
      }
    });
  }

  // ---------------------------------------------------------------- the gate

  function gate(from, to) {
    if (!plan.on || !model) return to;
    let q = null;
    for (const s of byStep.keys()) if (s > from && s <= to && s > 0 && !revealed.has(s) && (q === null || s < q)) q = s;
    if (q === null) {
      if (asking !== null && to !== asking && to !== asking - 1) closeCard();
      if (to === model.steps.length - 1) queueMicrotask(renderBadge);
      return to;
    }
    queueMicrotask(() => openCard(q, ready));
    return q - 1;
  }

  // ---------------------------------------------------------------- the card

  function codeLine(line) {
    const text = (model.trace.code || "").split("\n")[line - 1];
    return text ? text.replace(/#\s*predict\s*:.*$/i, "").trim() : "";
  }

  function closeCard() {
    asking = null;
    card.hidden = true;
    card.replaceChildren();
    setPicking(false);
  }

  function setPicking(on) {
    if (viewer) viewer.picking = on ? (id) => togglePick(id) : null;
    if (!on) picked = new Set();
    paintPicks();
  }

  function paintPicks() {
    if (!viewer) return;
    for (const n of viewer.el.querySelectorAll("[data-node-id][data-picked]")) {
      n.removeAttribute("data-picked");
      n.removeAttribute("aria-pressed");
    }
    const candidates = asking !== null && showing === "questions" && viewer.picking ? new Set(freedCandidates(model, asking)) : new Set();
    for (const n of viewer.el.querySelectorAll("[data-node-id]")) {
      const id = Number(n.dataset.nodeId);
      if (!candidates.has(id)) continue;
      n.setAttribute("data-picked", picked.has(id) ? "true" : "false");
      n.setAttribute("aria-pressed", picked.has(id) ? "true" : "false");
    }
    for (const box of card.querySelectorAll("input[data-pick]")) box.checked = picked.has(Number(box.dataset.pick));
  }

  function togglePick(id) {
    const hint = card.querySelector(".gs-ex-pick-status");
    if (!freedCandidates(model, asking).includes(id)) {
      if (hint) hint.textContent = `${nodeLabel(model, id)} holds no saved tensors this call could free.`;
      return;
    }
    if (picked.has(id)) picked.delete(id);
    else picked.add(id);
    if (hint) hint.textContent = `${nodeLabel(model, id)} ${picked.has(id) ? "chosen" : "no longer chosen"}: ${picked.size} node${picked.size === 1 ? "" : "s"} chosen.`;
    paintPicks();
  }

  function openCard(step, focus = true) {
    if (asking === step && showing === "questions" && !card.hidden) {
      if (focus) card.focus({ preventScroll: true }); // asked again (a key on the card): keep what was typed
      return;
    }
    asking = step;
    showing = "questions";
    const qs = byStep.get(step);
    const s = model.steps[step];
    const titleId = newId("title");
    card.setAttribute("aria-labelledby", titleId);
    const hasFreed = qs.some((q) => q.kind === "freed");
    picked = new Set(drafts.get(`${step}:freed`) || []);
    const form = h("form", { class: "gs-ex-form", novalidate: true });
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      check(step, form);
    });
    for (const q of qs) form.append(questionField(q));
    const formError = h("p", { class: "gs-ex-form-error", role: "alert" });
    form.append(formError,
      h("div", { class: "gs-ex-actions" },
        h("button", { type: "submit", class: "gs-btn gs-ex-check" }, "Check"),
        h("button", { type: "button", class: "gs-btn gs-ex-skip", title: "Show the step without answering: its questions count as not answered", onclick: () => skip(step) }, "Skip (not answered)"),
      ));
    const call = codeLine(s.line);
    card.replaceChildren(
      h("h2", { class: "gs-ex-title", id: titleId }, `Predict: step ${step + 1}, line ${s.line ?? "?"}`),
      call ? h("pre", { class: "gs-ex-code" }, call) : "",
      h("p", { class: "gs-ex-lead" }, "This call has not run yet: the graph shows the step before it. Predict what it does, then Check."),
      form,
    );
    card.hidden = false;
    setPicking(hasFreed);
    if (code && s.line) code.showStep({ current: s.line, linked: [], errors: [] }, s.line);
    if (focus) {
      card.scrollIntoView({ block: "nearest" });
      card.focus({ preventScroll: true });
    }
  }

  function questionField(q) {
    const id = newId("q");
    const hintId = newId("hint");
    const draft = drafts.get(q.id);
    if (q.kind === "grad") {
      const truth = truthOf(model, q);
      const norm = asksNorm(truth);
      const before = model.step(q.step - 1)?.tensors.find((t) => t.name === q.tensor);
      const input = h("input", { type: "text", id, class: "gs-ex-input", "data-question": q.id, autocomplete: "off", spellcheck: "false", "aria-describedby": hintId, value: draft ?? "" });
      return h("div", { class: "gs-ex-q", "data-kind": "grad" },
        h("label", { for: id, class: "gs-ex-label" }, norm ? `‖${q.tensor}.grad‖ after this call (its L2 norm: ${truth.numel} elements are too many to type)` : `${q.tensor}.grad after this call`),
        input,
        h("p", { class: "gs-ex-hint", id: hintId },
          `${norm ? "One number" : "A number, a list ([1, 2]; nested for 2-D)"} or None; ${TOLERANCE_TEXT}.`,
          before ? ` Before the call it is ${fmtGrad(before.grad)}` : ""),
      );
    }
    if (q.kind === "freed") {
      const candidates = freedCandidates(model, q.step);
      const statusId = newId("pick");
      return h("fieldset", { class: "gs-ex-q", "data-kind": "freed" },
        h("legend", { class: "gs-ex-label" }, "Which nodes' saved tensors will this call free?"),
        h("p", { class: "gs-ex-hint" }, candidates.length
          ? "Choose them in the graph (click, or Enter/Space on a focused node) or tick them here; none ticked means it frees nothing."
          : "No node holds saved tensors before this call; leave it empty if it frees nothing."),
        h("ul", { class: "gs-ex-picks" }, candidates.map((nid) => {
          const box = h("input", { type: "checkbox", id: `${id}-${nid}`, "data-pick": nid, checked: picked.has(nid) });
          box.addEventListener("change", () => {
            if (box.checked) picked.add(nid);
            else picked.delete(nid);
            paintPicks();
          });
          const n = model.nodes[nid];
          return h("li", {}, box, h("label", { for: `${id}-${nid}` }, `${nodeLabel(model, nid)}${n.line ? ` (line ${n.line})` : ""}`));
        })),
        h("p", { class: "gs-ex-pick-status gs-muted", id: statusId, "aria-live": "polite" }),
      );
    }
    const name = newId("err");
    const options = [{ key: "none", label: "It runs without an error" }, ...ERROR_CHOICES.map((c) => ({ key: c.key, label: `It fails: ${c.label}` }))];
    return h("fieldset", { class: "gs-ex-q", "data-kind": "error" },
      h("legend", { class: "gs-ex-label" }, "Will this call fail, and with which error?"),
      h("ul", { class: "gs-ex-choices" }, options.map((o) => h("li", {},
        h("input", { type: "radio", name, id: `${name}-${o.key}`, value: o.key, "data-question": q.id, checked: draft === o.key }),
        h("label", { for: `${name}-${o.key}` }, o.label),
      ))),
    );
  }

  // ---------------------------------------------------------------- checking

  function readAnswers(step, form) {
    const out = [];
    const problems = [];
    for (const q of byStep.get(step)) {
      if (q.kind === "grad") {
        const input = form.querySelector(`input[data-question="${CSS.escape(q.id)}"]`);
        drafts.set(q.id, input.value);
        const parsed = parseGradAnswer(input.value);
        input.toggleAttribute("aria-invalid", Boolean(parsed.error));
        if (parsed.error) problems.push([input, `${q.tensor}.grad: ${parsed.error}`]);
        else out.push([q, parsed.value]);
      } else if (q.kind === "freed") {
        drafts.set(`${step}:freed`, [...picked]);
        out.push([q, [...picked].sort((a, b) => a - b)]);
      } else {
        const chosen = form.querySelector(`input[data-question="${CSS.escape(q.id)}"]:checked`);
        if (!chosen) {
          problems.push([form.querySelector(`input[data-question="${CSS.escape(q.id)}"]`), "Will it fail? Choose one answer."]);
          continue;
        }
        drafts.set(q.id, chosen.value);
        out.push([q, chosen.value === "none" ? { fails: false, choice: null } : { fails: true, choice: chosen.value }]);
      }
    }
    return { answers: out, problems };
  }

  function check(step, form) {
    const { answers, problems } = readAnswers(step, form);
    const formError = form.querySelector(".gs-ex-form-error");
    if (problems.length) {
      formError.textContent = problems.map((p) => p[1]).join(" ");
      problems[0][0].focus();
      return;
    }
    formError.textContent = "";
    const rows = [];
    for (const [q, answer] of answers) {
      const truth = truthOf(model, q);
      const verdict = q.kind === "grad" ? checkGrad(answer, truth) : q.kind === "freed" ? checkFreed(answer, truth) : checkError(answer, truth);
      const prev = results.get(q.id);
      const attempt = prev && !prev.skipped ? prev.attempt + 1 : 1;
      results.set(q.id, { answer, correct: verdict.correct, firstCorrect: prev && !prev.skipped ? prev.firstCorrect : verdict.correct, attempt, skipped: false });
      rows.push({ q, answer, truth, verdict });
      send(q, answer, truth, verdict.correct, attempt);
    }
    sendSummary();
    reveal(step, rows);
  }

  function skip(step) {
    for (const q of byStep.get(step)) {
      if (results.has(q.id) && !results.get(q.id).skipped) continue; // answered before a Try again
      results.set(q.id, { skipped: true, attempt: 0, correct: false, firstCorrect: false });
      send(q, null, truthOf(model, q), false, 0, true);
    }
    sendSummary();
    reveal(step, null);
  }

  function reveal(step, rows) {
    revealed.add(step);
    setPicking(false);
    if (viewer.step === step - 1) viewer.next();
    else viewer.setStep(step);
    changed();
    renderBadge();
    if (!rows) {
      closeCard();
      return;
    }
    showing = "results";
    asking = step;
    const s = model.steps[step];
    const titleId = newId("title");
    card.setAttribute("aria-labelledby", titleId);
    const right = rows.filter((r) => r.verdict.correct).length;
    card.replaceChildren(
      h("h2", { class: "gs-ex-title", id: titleId }, `Step ${step + 1}: ${right} of ${rows.length} right`),
      h("table", { class: "gs-ex-results" },
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Question"), h("th", { scope: "col" }, "You"), h("th", { scope: "col" }, "torch"), h("th", { scope: "col" }, ""))),
        h("tbody", {}, rows.map((r) => h("tr", { class: r.verdict.correct ? "gs-ex-right" : "gs-ex-wrong", "data-kind": r.q.kind, "data-correct": String(r.verdict.correct) },
          h("th", { scope: "row" }, questionText(r.q)),
          h("td", {}, answerText(r.q, r.answer)),
          h("td", {}, truthText(r.q, r.truth)),
          h("td", { class: "gs-ex-verdict" }, r.verdict.correct ? "✓ right" : "✗ wrong", r.verdict.why ? h("span", { class: "gs-ex-why" }, ` ${r.verdict.why}`) : ""),
        ))),
      ),
      h("p", { class: "gs-ex-explain" }, s.explanation ? "Why: the step is shown now, and its narration below the card explains what the call did." : "The step is shown now."),
      h("div", { class: "gs-ex-actions" },
        h("button", { type: "button", class: "gs-btn gs-ex-retry", onclick: () => tryAgain(step) }, "Try again"),
        h("button", { type: "button", class: "gs-btn gs-ex-continue", onclick: () => continueOn() }, "Continue"),
      ),
    );
    card.hidden = false;
    card.scrollIntoView({ block: "nearest" });
    card.focus({ preventScroll: true });
  }

  function tryAgain(step) {
    revealed.delete(step);
    closeCard();
    viewer.setStep(step - 1);
    changed();
    openCard(step, true);
  }

  function continueOn() {
    closeCard();
    const next = viewer.el.querySelector(".gs-next");
    if (next && !next.disabled) next.focus();
    else viewer.el.focus({ preventScroll: true });
  }

  // ---------------------------------------------------------------- texts

  function questionText(q) {
    if (q.kind === "grad") return `${q.tensor}.grad`;
    return q.kind === "freed" ? "freed" : "fails?";
  }

  function answerText(q, a) {
    if (q.kind === "grad") return a === null ? "None" : typeof a === "number" ? fmtNumber(a) : fmtValues(a);
    if (q.kind === "freed") return a.length ? a.map((id) => nodeLabel(model, id)).join(", ") : "nothing";
    if (!a.fails) return "runs";
    return ERROR_CHOICES.find((c) => c.key === a.choice)?.label ?? "fails";
  }

  function truthText(q, t) {
    if (q.kind === "grad") {
      if (t === null) return "None";
      if (asksNorm(t)) return `‖${fmtNumber(t.norm)}‖`;
      const g = model.step(q.step).tensors.find((x) => x.name === q.tensor)?.grad;
      return g ? gradValues(g) : fmtValues(t.values);
    }
    if (q.kind === "freed") return t.length ? t.map((id) => nodeLabel(model, id)).join(", ") : "nothing";
    return t.fails ? `${t.error}: ${t.message}` : "runs";
  }

  function renderBadge() {
    if (!plan.on || !plan.questions.length) {
      badge.hidden = true;
      return;
    }
    badge.hidden = false;
    const sum = summarize(plan.questions, results);
    const atEnd = viewer && model && viewer.step === model.steps.length - 1;
    const left = sum.total - sum.answered - sum.skipped;
    badge.textContent = `${atEnd && !left ? "Exercise done" : "Exercise"}: ${sum.correct} of ${sum.total} right on the first try`
      + `${sum.skipped ? `, ${sum.skipped} not answered` : ""}${left ? `, ${left} to go` : ""}.`;
    badge.dataset.correct = String(sum.correct);
    badge.dataset.total = String(sum.total);
  }

  // ---------------------------------------------------------------- events

  function send(q, answer, truth, correct, attempt, skipped = false) {
    const question = { kind: q.kind, ...(q.tensor ? { tensor: q.tensor } : {}), ...(q.kind === "grad" && asksNorm(truth) ? { norm: true } : {}) };
    const wire = (kind, v, isTruth) => {
      if (v === null || v === undefined) return null;
      if (kind === "grad") return isTruth ? (asksNorm(v) ? v.norm : jsonValues(v.values)) : jsonValues(v);
      if (kind === "freed") return v.map((id) => ({ id, label: nodeLabel(model, id) }));
      const type = v.fails ? (isTruth ? v.error : ERROR_CHOICES.find((c) => c.key === v.choice)?.type ?? null) : null;
      return { fails: v.fails, error: type, choice: v.choice ?? null };
    };
    const msg = {
      type: "gradstep:answer", version: EVENT_VERSION, step: q.step, line: q.line, question,
      answer: wire(q.kind, answer, false), truth: wire(q.kind, truth, true), correct, attempt, ...(skipped ? { skipped: true } : {}),
    };
    emit(msg);
  }

  function sendSummary() {
    const { answered, correct, skipped, total } = summarize(plan.questions, results);
    emit({ type: "gradstep:exercise", version: EVENT_VERSION, answered, correct, skipped, total });
  }

  function emit(msg) {
    try {
      post(msg);
    } catch (e) {
      console.error("gradstep: an exercise event could not be posted", e);
    }
    host.dispatchEvent(new CustomEvent("gs-answer", { detail: msg, bubbles: true }));
  }

  return {
    el: host,
    attach(v) {
      viewer = v;
      markTimeline();
    },
    onTrace(m) {
      model = m;
      replan();
    },
    gate,
    /** Whether what step `i` did may be shown (its questions, and those of every call before it, are answered or skipped). */
    shows: (i) => i < concealFrom(),
    /** Whether every question is answered or skipped (or there are none). */
    get done() {
      return concealFrom() === Infinity;
    },
    /** fn() runs when what may be shown changes. */
    watch(fn) {
      watchers.push(fn);
    },
    /** The first paint is done: from now on a card that opens takes the focus. */
    settled() {
      ready = true;
      markTimeline();
      renderBadge();
    },
    /** The option the next trace is planned with (no redraw). */
    configure(p) {
      option = p;
      switchBox.checked = Boolean(p);
    },
    /** Another option (the app's switch): asks again from the first step. */
    setOption(p) {
      option = p;
      switchBox.checked = Boolean(p);
      replan();
      if (viewer && model) {
        viewer.concealChanged();
        viewer.setStep(0);
      }
    },
    get plan() {
      return plan;
    },
    get summary() {
      return summarize(plan.questions, results);
    },
  };
}
