// Update steps (an optimizer call: zero_grad, an optimizer's step, gradient clipping, a scheduler's
// step), as the timeline and the tensors panel say them. Pure: `node --test` checks it.

import { fmtNumber } from "./printing.js";

/** The word of an update step on its timeline chip. */
export function updateWord(step) {
  const op = step.update ? step.update.op : null;
  return { zero_grad: "zero_grad", step: "step", clip_grad_norm: "clip_grad", clip_grad_value: "clip_grad", lr_step: "lr" }[op] ?? "update";
}

/** A step's title part for an update: "SGD.step()", "clip_grad_norm_(max_norm=1.)". */
export function updateTitle(step) {
  const u = step.update;
  if (!u) return "update";
  const of = u.of_class ?? null;
  switch (u.op) {
    case "zero_grad": return `${of ? `${of}.` : ""}zero_grad(${u.set_to_none === false ? "set_to_none=False" : ""})`;
    case "step": return `${of ? `${of}.` : "optimizer."}step()`;
    case "clip_grad_norm": return `clip_grad_norm_(max_norm=${fmtNumber(u.max_norm)})`;
    case "clip_grad_value": return `clip_grad_value_(clip_value=${fmtNumber(u.clip_value)})`;
    case "lr_step": return `${of ? `${of}.` : "scheduler."}step()`;
    default: return "update";
  }
}

/** What an update step did to one parameter, for its row in the tensors panel ("" when nothing). */
export function paramChange(p) {
  if (p.grad === "set_to_none") return ".grad → None";
  if (p.grad === "zeroed") return ".grad zeroed";
  if (p.grad === "clipped") return `.grad clipped ‖${fmtNumber(p.grad_norm_before)}‖ → ‖${fmtNumber(p.grad_norm_after)}‖`;
  if (p.updated) return `updated by ‖${fmtNumber(p.delta_norm)}‖`;
  if (p.delta_norm === 0) return "not updated";
  return "";
}

/** name → what the update step `step` did to it (parameters it changed only). */
export function paramChanges(step) {
  const out = new Map();
  for (const p of (step && step.update && step.update.params) || []) {
    const what = paramChange(p);
    if (what && !out.has(p.name)) out.set(p.name, what);
  }
  return out;
}

/** Does the iteration of step `i` start at it (a timeline label "iteration k" goes there)? */
export function startsIteration(steps, i) {
  const it = steps[i].iteration ?? null;
  return it !== null && (i === 0 || (steps[i - 1].iteration ?? null) !== it);
}
