// What a step shows on each item and edge of the graph, as a string (its signature). An item's DOM
// is a function of its signature, so stepping touches only the items whose signature differs from
// what they show. Computed from the model alone (no DOM), once per step and visible graph.

import { fmtGrad, groupStatus, nodeStatus } from "./model.js";
import { moduleStats } from "./module-stats.js";

/**
 * A cache of stepSignatures for one graph view: signatures(model, vis, step) →
 * {items: Map(item key → sig), groups: Map(item key → groupStatus), modules: moduleStats, edges: Map(edge key → sig),
 *  flowKeys: Map(edge key → engine order of the gradient flowing along it)}.
 * model.step(i) objects are cached by the model, so a step keeps its signatures while its vis does.
 */
export function signatureCache() {
  const cache = new WeakMap(); // step → signatures
  return (model, vis, step) => {
    let s = cache.get(step);
    if (s && s.vis === vis) return s;
    s = stepSignatures(model, vis, step);
    cache.set(step, s);
    return s;
  };
}

export function stepSignatures(model, vis, step) {
  // a collapsed module's status walks all its members: kept for its paint
  // and every module's facts at the step, in one pass (a collapsed module's box shows its own)
  const s = { vis, items: new Map(), groups: new Map(), modules: moduleStats(model, step.index), edges: new Map(), flowKeys: new Map() };
  const changes = model.gradChanges(step.index);
  const dropped = new Set(step.dropped);
  for (const d of vis.items.values()) {
    if (d.kind === "group") {
      const gs = groupStatus(model, step, d.members);
      s.groups.set(d.key, gs);
      s.items.set(d.key, groupSig(gs, s.modules.get(d.group)));
    } else s.items.set(d.key, nodeSig(model, step, d.id, changes, dropped));
  }
  // the step's graph is the `next` of its alive nodes; gradient flowed along step.flow
  for (const f of step.flow) {
    const raw = `${vis.rep[f.to]}>${vis.rep[f.from]}`;
    const key = vis.alias?.get(raw) ?? raw; // an edge drawn in a bundle (model.js bundleEdges)
    if (!s.flowKeys.has(key) || s.flowKeys.get(key) > f.order) s.flowKeys.set(key, f.order);
  }
  for (const d of vis.edges.values()) s.edges.set(d.key, edgeSig(edgeStatus(model, step, d, s.flowKeys)));
  return s;
}

/** An edge at a step: alive (both ends exist), gradient flowing along it, new at this step. */
export function edgeStatus(model, step, d, flowKeys) {
  const alive = step ? d.pairs.some(([a, b]) => step.state.has(a) && step.state.has(b)) : false;
  const isNew = alive && step && d.pairs.some(([, b]) => model.nodes[b].step === step.index);
  return { alive, flow: flowKeys.has(d.key), isNew: Boolean(isNew) };
}

export function edgeSig(e) {
  return `${e.alive}${e.flow}${e.isNew}`;
}

function nodeSig(model, step, id, changes, dropped) {
  const n = model.nodes[id];
  const st = step.state.has(id) ? nodeStatus(model, step, id) : { alive: false, dropped: dropped.has(id) };
  const tensors = (st.alive && step.gradsOf.get(id)) || [];
  const acc = n.isLeaf && tensors[0] ? changes.get(tensors[0].name) : null;
  const badge = statusBadge(model, step, n, st);
  return [
    st.alive, st.dropped, st.isNew, st.executed, st.failed, st.freed, st.stale, st.retained, st.order,
    st.alive ? st.vars.join(",") : "", (st.staleSaved || []).join(","), badge ? badge.text : "",
    tensors.map((t) => `${t.name}=${fmtGrad(t.grad)}${t.grad && t.grad.has_grad_fn ? "*" : ""}`).join("|"),
    acc ? `${fmtGrad(acc.old)}>${fmtGrad(acc.total)}` : "", step.isCall ? 1 : 0,
  ].join(";");
}

function groupSig(s, m) {
  return `${s.alive};${s.executed};${s.failed};${s.withTensors};${s.freed};${s.stale};${s.isNew};${m.savedHeld};${m.savedFreed};${m.params};${m.gradNorm};${m.nonfinite}`;
}

/** The badge above a node: dropped / failed / stale / freed / retained / create_graph, or null. */
export function statusBadge(model, step, n, st) {
  if (!st.alive) return st.dropped ? { cls: "gs-b-dropped", text: "dropped" } : null;
  if (st.failed) return { cls: "gs-b-failed", text: st.freed ? "✕ failed: freed" : st.stale ? "✕ failed: stale" : "✕ failed here" };
  if (st.stale) {
    const since = model.staleSince.get(n.id);
    const line = since !== undefined ? model.steps[since].line : null;
    return { cls: "gs-b-stale", text: line ? `! stale: modified at line ${line}` : "! stale" };
  }
  if (st.freed) return { cls: "gs-b-freed", text: "freed" };
  if (st.retained) return { cls: "gs-b-retained", text: "retained" };
  if (n.gradGraph) return { cls: "gs-b-gradgraph", text: "create_graph" };
  return null;
}
