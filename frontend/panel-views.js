// What each side panel shows at a step, as plain data: a pure function of (model, step index, and
// for the inspector the selected node). No DOM here, so `node --test` checks it; frontend/panels.js
// draws it, keyed by the ids these views carry (tensor name, fact label, saved slot name).

import { fmtBytes, fmtGrad, fmtNumber, fmtShape, gradValues, nodeStatus, quote } from "./model.js";
import { paramChanges } from "./updates.js";

/** Stable keys for items that may repeat a name: "x", then "x#2", "x#3"… */
function keyed(items, nameOf) {
  const seen = new Map();
  return items.map((it) => {
    const name = nameOf(it);
    const k = (seen.get(name) ?? 0) + 1;
    seen.set(name, k);
    return { key: k === 1 ? name : `${name}#${k}`, ...it };
  });
}

/**
 * The tensors panel at step `index`: one row per named tensor (the first `limit` of them),
 * whether its .grad was written or accumulated by this step. null: no step to show.
 */
export function tensorsView(model, index, limit = Infinity) {
  const step = model ? model.step(index) : null;
  if (!step) return null;
  const changes = model.gradChanges(index);
  const updated = paramChanges(step); // an update step: what it did to each parameter
  const shown = step.tensors.slice(0, limit);
  const rows = keyed(
    shown.map((t) => {
      const c = changes.get(t.name);
      const u = updated.get(t.name);
      if (u) return { name: t.name, node: t.node, shape: fmtShape(t.shape), kind: t.isLeaf ? "leaf" : "—", grad: fmtGrad(t.grad), what: u, whatKind: "update" };
      return {
        name: t.name,
        node: t.node,
        shape: fmtShape(t.shape),
        kind: t.isLeaf ? (t.unnamed ? "old leaf" : "leaf") : t.retainsGrad ? "retain_grad" : "—",
        grad: fmtGrad(t.grad),
        what: c ? (c.old ? "accumulated" : "written") : "",
      };
    }),
    (r) => r.name,
  );
  return { rows, total: step.tensors.length };
}

function gradView(name, grad) {
  if (!grad) return { name, none: true };
  return {
    name,
    none: false,
    meta: ` ${fmtShape(grad.shape)} ${grad.dtype}${grad.has_grad_fn ? " · has grad_fn" : ""}`,
    values: grad.values !== null && grad.values !== undefined ? gradValues(grad) : "(values not recorded: more than 64 elements)",
    norm: `norm ${grad.norm === null || grad.norm === undefined ? "—" : fmtNumber(grad.norm)}`,
  };
}

/**
 * The inspector of node `id` at step `index`: its facts, its saved slots and their state now, and
 * the .grad of the tensors it stands for. null when no node (of this trace) is selected.
 */
export function inspectorView(model, index, id) {
  if (!model || id === null || id === undefined || !model.nodes[id]) return null;
  const n = model.nodes[id];
  const step = model.step(index);
  const st = nodeStatus(model, step, n.id);
  const facts = [];
  const fact = (label, value) => facts.push({ key: label, label, value });
  fact("op", n.op);
  fact("node id", String(n.id));
  if (st.alive && st.vars.length) fact(n.isLeaf ? "tensor" : "grad_fn of", st.vars.join(", "));
  else if (n.tensor) fact("tensor", n.tensor);
  fact("line", n.line !== null ? String(n.line) : "—");
  if (n.savedTensors.length) fact("saved bytes", `${fmtBytes(n.savedBytes)} (each storage counted once)`);
  fact("module", n.module || (n.group ? `${n.group} (by name)` : "—"));
  fact("created at", `step ${n.step + 1}`);
  fact("state now", !st.alive ? (st.dropped ? "dropped (no variable reaches it)" : "not created yet / gone") :
    [st.failed ? "failed here" : st.executed ? `ran (#${st.order})` : "did not run this step", st.freed ? "freed" : null,
      st.stale ? "stale" : null, st.retained ? "retained" : null].filter(Boolean).join(", "));
  if (n.gradGraph) fact("graph", "built by create_graph=True (a gradient's graph)");
  // the tracer's reason quotes an exception: the run's words, quoted
  if (n.unreadable) fact("not read", quote(n.unreadable));
  for (const s of n.saved) if (s.unreadable) fact(`${s.name} not read`, quote(s.unreadable));
  const staleNames = new Set(st.staleSaved || []);
  const saved = keyed(
    n.saved.map((s) => {
      const held = !st.alive ? "—" : st.freed ? "freed" : st.stale && (staleNames.size === 0 || staleNames.has(s.name)) ? "stale" : st.retained ? "retained" : "held";
      const state = s.kind === "value" ? (s.unreadable ? "not read" : `value ${JSON.stringify(s.value)}`) :
        s.packed && held !== "—" ? `${held} (packed: ${s.packed})` : held;
      return {
        name: s.name,
        cells: [s.name, s.kind, s.shape ? fmtShape(s.shape) : "—", s.dtype || "—", s.bytes !== null ? fmtBytes(s.bytes) : "—", s.of || "—", state],
        state: state.split(" ")[0],
      };
    }),
    (r) => r.name,
  );
  const tensors = (step && st.alive && step.gradsOf.get(n.id)) || [];
  return {
    id: n.id,
    title: n.isLeaf ? `leaf ${(st.alive && st.vars[0]) || n.tensor || ""}` : n.op,
    facts,
    saved,
    savedNone: n.saved.length ? null : n.isLeaf ? "AccumulateGrad saves nothing: nothing to free." : "Nothing saved: nothing to free.",
    // the Gradient section: shown for a leaf (even without a grad) and for a node holding tensors
    grads: tensors.length || n.isLeaf ? keyed(tensors.map((t) => gradView(t.name, t.grad)), (g) => g.name) : null,
  };
}

/** The output panel at step `index` (index ignored without steps: the whole run's output then). */
export function outputView(model, index) {
  if (!model) return null;
  const step = model.step(index);
  const n = model.steps.length;
  const out = step ? step.stdout : model.trace.stdout;
  const warns = step ? step.warnings : model.trace.warnings;
  let rest = "";
  if ((index === n - 1 || !n) && model.trace.stdout) {
    rest = model.trace.stdout.slice(model.steps.reduce((a, s) => a + s.stdout.length, 0));
  }
  return {
    note: step ? (index > 0 ? "printed since the previous step" : "printed before this step") : null,
    stdout: out || "(nothing)",
    empty: !out,
    warnings: keyed(
      warns.map((w) => ({ head: `${w.category}${w.line ? ` (line ${w.line})` : ""}: `, message: w.message })),
      (w) => `${w.head}${w.message}`,
    ),
    rest,
  };
}

/** The label under the saved-bytes chart at step `index`. */
export function chartLabel(model, index, peak) {
  const step = model ? model.steps[index] : null;
  return step ? `now ${fmtBytes(step.savedBytes)} · peak ${fmtBytes(peak)}` : "";
}
