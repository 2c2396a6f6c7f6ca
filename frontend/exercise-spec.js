// The exercise ("predict, then see") as data: the spec's grammar, the `# predict:` comments of a
// snippet, the questions of a run, their truth in the trace, and the checking of an answer. Pure
// (no DOM): exercise.js draws it, tests/frontend/exercise-spec.test.mjs holds it to its rules.
//
//   spec     := item ("," item)*            "x.grad, freed, error"
//   item     := question ["@" LINE]          "w.grad@12": only the calls on line 12
//   question := NAME ".grad" | "freed" | "error"
//
// The option (`predict=` of an embed, render's `predict`) is a spec, or "code" / "1" / true: only
// the questions the snippet's `# predict:` comments ask, or, when it has none, a default set at
// every call. The comments' questions are always asked when the mode is on; the option's are added.

import { diffSteps, LEAF_OP } from "./model.js";
import { leaves } from "./printing.js";

export const KINDS = ["grad", "freed", "error"];
export const MAX_SPEC = 500; // characters of a spec: more is not a question list
export const DEFAULT_GRADS = 3; // the default set asks for at most this many leaves' .grad
// A .grad answer is right within REL_TOL of torch's value or ABS_TOL (the trace keeps 4
// significant digits of each value, i.e. within 5e-4 relative: 3 significant digits are enough).
export const REL_TOL = 1e-3;
export const ABS_TOL = 1e-6;
export const TOLERANCE_TEXT = "right within 0.1% (relative) or 1e-6 (absolute): 3 significant digits are enough";

// The errors a learner chooses from: those the curated snippets raise, each recognised by its
// message, and "another error" for the rest.
export const ERROR_CHOICES = [
  { key: "backward-twice", type: "RuntimeError", label: "RuntimeError: Trying to backward through the graph a second time", match: /backward through the graph a second time/i },
  { key: "no-grad-fn", type: "RuntimeError", label: "RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn", match: /does not require grad and does not have a grad_fn/i },
  { key: "not-scalar", type: "RuntimeError", label: "RuntimeError: grad can be implicitly created only for scalar outputs", match: /implicitly created only for (real )?scalar outputs/i },
  { key: "inplace", type: "RuntimeError", label: "RuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation", match: /modified by an inplace operation/i },
  { key: "other", type: null, label: "Another error", match: null },
];

/** The choice an error of the trace ({type, message}) is, or null for no error. */
export function errorChoiceOf(error) {
  if (!error) return null;
  const found = ERROR_CHOICES.find((c) => c.match && c.match.test(error.message || ""));
  return found ? found.key : "other";
}

// ---------------------------------------------------------------- the grammar

const NAME = /^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*(?:\[[^\]\s]{1,40}\])*$/; // w, model.0.weight, ps[0]

/** One item's text → {kind, tensor?, line} or {error}. */
function parseItem(text, { allowLine }) {
  let body = text.trim();
  let line = null;
  const at = body.lastIndexOf("@");
  if (at >= 0) {
    const where = body.slice(at + 1).trim();
    body = body.slice(0, at).trim();
    if (!allowLine) return { error: `“${text.trim()}”: a # predict: comment asks at its own line; leave out “@${where}”.` };
    if (!/^\d+$/.test(where) || Number(where) < 1) return { error: `“${text.trim()}”: after @ comes a line number (“x.grad@12”).` };
    line = Number(where);
  }
  if (body === "freed" || body === "error") return { kind: body, line };
  if (body.endsWith(".grad")) {
    const tensor = body.slice(0, -".grad".length).trim();
    if (NAME.test(tensor)) return { kind: "grad", tensor, line };
  }
  return { error: `“${text.trim().slice(0, 60)}” is not a question: write NAME.grad (a tensor's .grad after the call), freed (which nodes it frees) or error (whether it fails).` };
}

/**
 * A spec string → {items, errors}: items [{kind, tensor?, line}] in order, duplicates dropped;
 * errors are sentences. `allowLine`: "@LINE" is allowed (the option's spec, not a comment's).
 */
export function parseSpec(text, { allowLine = true } = {}) {
  const items = [];
  const errors = [];
  if (typeof text !== "string") return { items, errors: ["The exercise spec must be text, e.g. “x.grad, freed, error”."] };
  if (text.length > MAX_SPEC) return { items, errors: [`The exercise spec is too long (${text.length} characters; at most ${MAX_SPEC}).`] };
  if (/[\n\r]/.test(text)) return { items, errors: ["The exercise spec is one line: questions separated by commas."] };
  const parts = text.split(",");
  if (!text.trim()) return { items, errors: ["The exercise spec is empty: write e.g. “x.grad, freed, error”."] };
  const seen = new Set();
  for (const part of parts) {
    if (!part.trim()) {
      errors.push(`An empty question in “${text.slice(0, 80)}”: questions are separated by single commas.`);
      continue;
    }
    const it = parseItem(part, { allowLine });
    if (it.error) {
      errors.push(it.error);
      continue;
    }
    const key = `${it.kind}:${it.tensor ?? ""}@${it.line ?? ""}`;
    if (seen.has(key)) continue;
    seen.add(key);
    items.push(it);
  }
  return { items, errors };
}

/**
 * The exercise option → {on, code, items, errors}. `predict`: absent/false/""/"0" (off), true,
 * "1", "true" or "code" (the comments only, or the default set), or a spec.
 */
export function parseOption(predict) {
  if (predict === undefined || predict === null || predict === false) return { on: false, code: false, items: [], errors: [] };
  if (predict === true) return { on: true, code: true, items: [], errors: [] };
  if (typeof predict !== "string") return { on: false, code: false, items: [], errors: ["The exercise option `predict` must be text (a spec such as “x.grad, freed”) or true."] };
  const text = predict.trim();
  if (text === "" || text === "0" || text.toLowerCase() === "false") return { on: false, code: false, items: [], errors: [] };
  if (["1", "true", "code", "yes"].includes(text.toLowerCase())) return { on: true, code: true, items: [], errors: [] };
  const { items, errors } = parseSpec(text);
  return { on: true, code: false, items, errors: errors.map((e) => `predict=: ${e}`) };
}

// ---------------------------------------------------------------- the snippet's comments

/**
 * The `# predict: SPEC` comments of `code` → {byLine: Map(line → items), errors}. A comment after
 * code asks at its own line; a comment on a line of its own asks at the next line of code.
 */
export function commentQuestions(code) {
  const byLine = new Map();
  const errors = [];
  const lines = String(code || "").split("\n");
  let pending = null; // {from, items}: a comment on its own line, for the next code line
  lines.forEach((text, i) => {
    const n = i + 1;
    const m = /#\s*predict\s*:(.*)$/i.exec(text);
    const before = m ? text.slice(0, m.index) : text;
    // a "#" inside a string before it would not start a comment: only a quote-free prefix counts
    const isComment = m && !/["']/.test(before);
    if (isComment) {
      const { items, errors: errs } = parseSpec(m[1], { allowLine: false });
      for (const e of errs) errors.push(`Line ${n}: ${e}`);
      if (!before.trim()) {
        if (items.length) pending = { from: n, items: [...(pending ? pending.items : []), ...items] };
        return;
      }
      if (items.length) byLine.set(n, [...(pending ? pending.items : []), ...items]);
      pending = null;
      return;
    }
    const code_ = text.replace(/#.*$/, "").trim();
    if (!code_) return;
    if (pending) {
      byLine.set(n, pending.items);
      pending = null;
    }
  });
  if (pending) errors.push(`Line ${pending.from}: a # predict: comment with no code after it.`);
  return { byLine, errors };
}

// ---------------------------------------------------------------- the questions of a run

const isCallStep = (s) => s.kind === "backward" || s.kind === "grad";

/** Tensor names the run ever has (any step). */
function tensorNames(model) {
  const names = new Set();
  for (let i = 0; i < model.steps.length; i++) for (const t of model.step(i).tensors) names.add(t.name);
  return names;
}

/** The default questions at a call step: error, freed, and the .grad of up to 3 named leaves. */
function defaultItems(model, i) {
  const leavesHere = model.step(i).tensors.filter((t) => t.isLeaf && t.requiresGrad && !t.unnamed).slice(0, DEFAULT_GRADS);
  return [{ kind: "error" }, { kind: "freed" }, ...leavesHere.map((t) => ({ kind: "grad", tensor: t.name }))];
}

/**
 * The questions of a run: model (model.js buildModel) and the option (`predict`) →
 * {on, questions, errors}. questions: [{id, step, line, kind, tensor?}] in step order, the
 * questions of a step in the order written (comments first); errors: sentences for the page.
 */
export function planExercise(model, predict) {
  const opt = parseOption(predict);
  const out = { on: opt.on, questions: [], errors: [...opt.errors] };
  if (!opt.on) return out;
  const comments = commentQuestions(model.trace.code);
  out.errors.push(...comments.errors);
  const calls = model.steps.map((s, i) => [s, i]).filter(([s]) => isCallStep(s));
  const callLines = new Set(calls.map(([s]) => s.line));
  for (const line of comments.byLine.keys()) {
    if (!callLines.has(line)) out.errors.push(`Line ${line}: its # predict: comment asks at a line where no backward() or autograd.grad() call ran.`);
  }
  const names = tensorNames(model);
  const known = (it, where) => {
    if (it.kind !== "grad" || names.has(it.tensor)) return true;
    const some = [...names].slice(0, 6).join(", ");
    out.errors.push(`${where}asks for ${it.tensor}.grad, but the run has no tensor named “${it.tensor}”${some ? ` (its tensors: ${some})` : ""}.`);
    return false;
  };
  for (const it of opt.items) {
    if (it.line !== null && !callLines.has(it.line)) out.errors.push(`predict=: no backward() or autograd.grad() call ran on line ${it.line} (asked by “${it.kind === "grad" ? `${it.tensor}.grad` : it.kind}@${it.line}”).`);
  }
  const useDefault = opt.code && comments.byLine.size === 0;
  for (const [s, i] of calls) {
    const items = [];
    const add = (it) => {
      if (!items.some((x) => x.kind === it.kind && x.tensor === it.tensor)) items.push(it);
    };
    for (const it of comments.byLine.get(s.line) || []) if (known(it, `Line ${s.line}'s # predict: comment `)) add(it);
    for (const it of opt.items) if ((it.line === null || it.line === s.line) && known(it, "predict= ")) add(it);
    if (useDefault) for (const it of defaultItems(model, i)) add(it);
    for (const it of items) {
      out.questions.push({ id: `${i}:${it.kind}${it.tensor ? `:${it.tensor}` : ""}`, step: i, line: s.line, kind: it.kind, ...(it.tensor ? { tensor: it.tensor } : {}) });
    }
  }
  out.errors = [...new Set(out.errors)];
  return out;
}

// ---------------------------------------------------------------- the truth

/** A node's label for people: its op (a leaf: "AccumulateGrad of w"). */
export function nodeLabel(model, id) {
  const n = model.nodes[id];
  if (!n) return String(id);
  return n.op === LEAF_OP && n.tensor ? `AccumulateGrad (${n.tensor})` : n.op;
}

/** The nodes a freed question offers: alive before the call with saved tensors not yet freed (and
 * any the call frees, so the right answer can always be given). */
export function freedCandidates(model, stepIndex) {
  const before = stepIndex > 0 ? model.step(stepIndex - 1) : null;
  const ids = new Set(stepIndex > 0 ? diffSteps(model, stepIndex - 1, stepIndex).freed : []);
  if (before) {
    for (const [id, s] of before.state) if (!s.freed && model.nodes[id] && model.nodes[id].savedTensors.length) ids.add(id);
  }
  return [...ids].sort((a, b) => a - b);
}

/**
 * What torch did for a question: grad → {values} | {norm, numel} | null (None); freed → sorted
 * node ids; error → {fails, error (type), choice, message}.
 */
export function truthOf(model, q) {
  const step = model.step(q.step);
  if (q.kind === "freed") return diffSteps(model, q.step - 1, q.step).freed.slice().sort((a, b) => a - b);
  if (q.kind === "error") {
    const e = step.error;
    return { fails: Boolean(e), error: e ? e.type : null, choice: errorChoiceOf(e), message: e ? e.message : null };
  }
  const t = step.tensors.find((x) => x.name === q.tensor);
  const g = t ? t.grad : null;
  if (!g) return null;
  const count = (g.shape || []).reduce((a, b) => a * b, 1);
  const complex = typeof g.dtype === "string" && g.dtype.startsWith("complex");
  if (g.values === null || g.values === undefined || complex) return { norm: g.norm ?? null, numel: count, shape: g.shape || [] };
  return { values: g.values, shape: g.shape || [] };
}

/** Does a .grad question ask for the norm (torch's tensor too big, or complex, to type)? */
export const asksNorm = (truth) => Boolean(truth) && !("values" in truth);

// ---------------------------------------------------------------- the learner's answers

/**
 * A typed .grad answer → {value} | {error}: value is null (None), a number, or nested lists of
 * numbers. Accepts what torch prints: "tensor([1., 2.])", "448.", "nan", "-inf".
 */
export function parseGradAnswer(text) {
  const help = "Write a number (2.5), a list ([1, 2], nested for 2-D: [[1, 2], [3, 4]]) or None.";
  let s = String(text ?? "").trim();
  if (!s) return { error: `No answer yet. ${help}` };
  if (/^none$/i.test(s)) return { value: null };
  const wrapped = /^tensor\((.*)\)$/is.exec(s);
  if (wrapped) s = wrapped[1].replace(/,\s*(requires_grad|grad_fn|dtype|device)\s*=.*$/s, "").trim();
  const tokens = s.match(/\[|\]|,|[+-]?(?:inf|nan)|[+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?|\S/gi) || [];
  let at = 0;
  const bad = () => {
    throw new Error(`“${String(text).trim().slice(0, 40)}” is not a number or a list of numbers. ${help}`);
  };
  const value = () => {
    const t = tokens[at++];
    if (t === undefined) bad();
    if (t === "[") {
      const list = [];
      if (tokens[at] === "]") bad();
      for (;;) {
        list.push(value());
        const sep = tokens[at++];
        if (sep === "]") break;
        if (sep !== ",") bad();
        if (tokens[at] === "]") {
          at++;
          break; // a trailing comma, as Python allows
        }
      }
      return list;
    }
    if (/^[+-]?nan$/i.test(t)) return NaN;
    if (/^[+-]?inf$/i.test(t)) return t.startsWith("-") ? -Infinity : Infinity;
    const n = Number(t);
    if (!Number.isFinite(n) || !/\d/.test(t)) bad();
    return n;
  };
  try {
    const v = value();
    if (at !== tokens.length) bad();
    if (Array.isArray(v) && !sameDepth(v)) throw new Error(`The rows of “${String(text).trim().slice(0, 40)}” differ in shape. ${help}`);
    return { value: v };
  } catch (e) {
    return { error: e.message };
  }
}

function shapeOf(v) {
  return Array.isArray(v) ? [v.length, ...(v.length ? shapeOf(v[0]) : [])] : [];
}

function sameDepth(v) {
  if (!Array.isArray(v)) return true;
  const first = JSON.stringify(shapeOf(v[0]));
  return v.every((x) => JSON.stringify(shapeOf(x)) === first && sameDepth(x));
}

const asNumber = (v) => (v === "nan" ? NaN : v === "inf" ? Infinity : v === "-inf" ? -Infinity : v);

/** One number against torch's, within the tolerance (nan is nan, inf is inf). */
export function closeTo(answer, truth) {
  const t = asNumber(truth);
  if (typeof answer !== "number" || typeof t !== "number") return false;
  if (Number.isNaN(t) || Number.isNaN(answer)) return Number.isNaN(t) && Number.isNaN(answer);
  if (!Number.isFinite(t) || !Number.isFinite(answer)) return t === answer;
  return Math.abs(answer - t) <= Math.max(ABS_TOL, REL_TOL * Math.abs(t));
}

/**
 * A .grad answer (parseGradAnswer's value) against the truth (truthOf) → {correct, why}. A bare
 * number answers a one-element tensor of any shape; otherwise the shapes must be the same.
 */
export function checkGrad(answer, truth) {
  if (truth === null) return answer === null ? { correct: true, why: "" } : { correct: false, why: "torch left .grad None." };
  if (answer === null) return { correct: false, why: "torch's .grad is a tensor, not None." };
  if (asksNorm(truth)) {
    if (Array.isArray(answer)) return { correct: false, why: "This question asks for the norm: one number." };
    return { correct: closeTo(answer, truth.norm), why: "" };
  }
  const want = leaves(truth.values);
  const got = Array.isArray(answer) ? leaves(answer) : [answer];
  if (!Array.isArray(answer) && want.length === 1) return { correct: closeTo(answer, want[0]), why: "" };
  const wantShape = JSON.stringify(truth.shape);
  if (JSON.stringify(shapeOf(answer)) !== wantShape) {
    return { correct: false, why: `torch's .grad has shape [${truth.shape.join(", ")}]; the answer has shape [${shapeOf(answer).join(", ")}].` };
  }
  return { correct: got.every((v, i) => closeTo(v, want[i])), why: "" };
}

/** Chosen node ids against the freed ones: right when they are the same set. */
export function checkFreed(chosen, truth) {
  const a = [...new Set(chosen)].sort((x, y) => x - y);
  return { correct: a.length === truth.length && a.every((v, i) => v === truth[i]), why: "" };
}

/** {fails, choice} against the truth: right when both say it fails with the same error, or both that it does not. */
export function checkError(answer, truth) {
  if (!answer || typeof answer.fails !== "boolean") return { correct: false, why: "No answer." };
  if (answer.fails !== truth.fails) return { correct: false, why: "" };
  if (!truth.fails) return { correct: true, why: "" };
  return { correct: answer.choice === truth.choice, why: answer.choice === truth.choice ? "" : "It fails, with another error." };
}

/** The summary the badge shows and the `gradstep:exercise` event carries. */
export function summarize(questions, results) {
  let answered = 0;
  let correct = 0;
  let skipped = 0;
  for (const q of questions) {
    const r = results.get(q.id);
    if (!r) continue;
    if (r.skipped) skipped++;
    else {
      answered++;
      if (r.firstCorrect) correct++;
    }
  }
  return { answered, correct, skipped, total: questions.length };
}
