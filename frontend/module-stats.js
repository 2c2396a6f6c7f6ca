// Per-module facts at a step: what a collapsed module's box says and what the gradient-flow
// chart plots. One pass over the step, for every module at once (a 96-layer model has ~1,000
// modules; asking per box would walk the nodes once per box). Pure: no DOM.
import { modulePath } from "./model.js";

const FLOAT_DTYPES = new Set(["float16", "bfloat16", "float32", "float64", "complex64", "complex128"]);

/** A .grad record whose norm is missing because a value is nan or inf (the trace writes `norm: null` then). */
export function gradNonFinite(grad) {
  if (!grad || grad.norm !== null) return false;
  const dtype = String(grad.dtype ?? "").replace(/^torch\./, "");
  return FLOAT_DTYPES.has(dtype);
}

function emptyStats(group) {
  return {
    group, // the module path
    nodes: group.size, // nodes of the whole run drawn in it (its submodules' too)
    alive: 0,
    executed: 0,
    failed: 0,
    freed: 0,
    savedHeld: 0, // bytes the module's alive, unfreed nodes hold
    savedFreed: 0, // bytes its freed nodes released
    leaves: 0, // leaves drawn in it in the whole run (0: its parameters, if any, live elsewhere)
    params: 0, // leaves drawn in it with a .grad at this step
    gradSq: 0,
    nonfinite: 0, // those whose .grad holds a nan or an inf
  };
}

/**
 * Map module path → stats at step `index` (null step: nothing alive). `gradNorm` is the L2 norm
 * over the .grad of the leaves drawn in the module (its parameters, those of its submodules too),
 * null when none has a finite one.
 */
export function moduleStats(model, index) {
  let byStep = cache.get(model);
  if (!byStep) cache.set(model, (byStep = new Map()));
  if (byStep.has(index)) return byStep.get(index);
  const out = new Map();
  for (const g of model.groups.values()) out.set(g.id, emptyStats(g));
  for (const node of model.nodes) {
    if (node.isLeaf && node.group) for (const path of modulePath(node.group)) out.get(path).leaves++;
  }
  const step = index >= 0 ? model.step(index) : null;
  if (step) {
    for (const [id, s] of step.state) {
      const node = model.nodes[id];
      if (!node.group) continue;
      for (const path of modulePath(node.group)) {
        const m = out.get(path);
        m.alive++;
        if (s.executed) m.executed++;
        if (s.failed) m.failed++;
        if (s.freed) {
          m.freed++;
          m.savedFreed += node.savedBytes;
        } else m.savedHeld += node.savedBytes;
      }
    }
    for (const t of step.tensors) {
      if (t.node === null || !t.grad || !model.nodes[t.node]) continue;
      const group = model.nodes[t.node].group;
      if (!group) continue;
      const bad = gradNonFinite(t.grad);
      for (const path of modulePath(group)) {
        const m = out.get(path);
        m.params++;
        if (bad) m.nonfinite++;
        else if (typeof t.grad.norm === "number") m.gradSq += t.grad.norm * t.grad.norm;
      }
    }
  }
  for (const m of out.values()) {
    const finite = m.params - m.nonfinite;
    m.gradNorm = finite > 0 ? Math.sqrt(m.gradSq) : null;
    delete m.gradSq;
  }
  byStep.set(index, out);
  return out;
}

const cache = new WeakMap(); // model → Map(step index → Map(module path → stats))
