// Plain-language sentences about a step, computed from the trace (never guessed):
// what a line built, what a call ran, freed and accumulated, and why a call failed.
// Since trace version 2 the server narrates every step (`step.explanation`, shown by
// narration.js); these sentences are for traces without it (version 1: older exports).

import { fmtBytes, fmtGrad, callFlags } from "./model.js";

function nodeName(model, id) {
  const n = model.nodes[id];
  return n.isLeaf ? `AccumulateGrad (${n.tensor || "leaf"})` : n.op;
}

/** The step that first showed node `id` freed, at or before step `upto`. */
function freedBy(model, id, upto) {
  for (let i = 0; i <= upto; i++) {
    const s = model.step(i);
    const st = s && s.state.get(id);
    if (st && st.freed) return s;
  }
  return null;
}

function callText(step) {
  const api = step.api || (step.kind === "grad" ? "torch.autograd.grad" : "backward");
  const flags = callFlags(step);
  return `${api}(${flags.join(", ")})`;
}

/** { tone, title, lines[] } for step i. tone: info | call | error */
export function explainStep(model, i) {
  const step = model.step(i);
  if (!step) return null;
  const prev = i > 0 ? model.step(i - 1) : null;
  const out = { tone: "info", title: "", lines: [] };
  const where = step.line !== null ? `Line ${step.line}` : "A line";
  if (step.kind === "forward") {
    const made = [...step.state.values()].filter((s) => s.isNew).map((s) => s.id);
    out.title = `${where} built ${made.length} node${made.length === 1 ? "" : "s"}${step.repeat > 1 ? ` (${step.repeat} executions folded)` : ""}`;
    const names = made.slice(0, 6).map((id) => nodeName(model, id));
    if (names.length) out.lines.push(`${names.join(", ")}${made.length > 6 ? ", …" : ""}.`);
    if (step.dropped.length) out.lines.push(`${step.dropped.length} node${step.dropped.length === 1 ? "" : "s"} no longer reachable from any variable (dropped).`);
    const stale = [...step.state.values()].filter((s) => s.stale && model.staleSince.get(s.id) === i);
    for (const s of stale.slice(0, 3)) {
      const n = model.nodes[s.id];
      const which = s.staleSaved.length ? s.staleSaved.join(", ") : "a saved tensor";
      out.lines.push(`This line modified in place the ${which} that ${n.op} saved: it is now stale (hatched), and a backward reaching ${n.op} will fail.`);
    }
    if (prev && prev.savedBytes !== step.savedBytes) out.lines.push(`Saved tensors now hold ${fmtBytes(step.savedBytes)}.`);
    return out;
  }
  out.tone = step.error ? "error" : "call";
  const ran = step.order.filter((id) => step.state.get(id).executed);
  out.title = `${where}: ${callText(step)}${step.error ? " failed" : ""}`;
  if (step.error) {
    // torch's own words come last: the editor shows them at the line too
    out.message = `${step.error.type}: ${step.error.message}`;
    if (step.failed !== null) {
      const st = step.state.get(step.failed);
      const n = model.nodes[step.failed];
      let why = "";
      if (st.freed) {
        const by = freedBy(model, step.failed, i - 1);
        why = by
          ? ` Its saved tensors were freed by the ${by.kind === "grad" ? "autograd.grad" : "backward"} call at line ${by.line} (step ${by.index + 1}), which ran without retain_graph=True.`
          : " Its saved tensors were already freed.";
      } else if (st.stale) {
        const since = model.staleSince.get(step.failed);
        const line = since !== undefined ? model.steps[since].line : null;
        const which = st.staleSaved.length ? st.staleSaved.join(", ") : "a saved tensor";
        why = ` ${which} was modified in place${line ? ` at line ${line}` : ""} after ${n.op} saved it.`;
      }
      out.lines.push(`The engine stopped at ${nodeName(model, step.failed)}${n.line ? ` (line ${n.line})` : ""}.${why}`);
      if (st.freed) {
        const by = freedBy(model, step.failed, i - 1);
        out.fix = by
          ? `Fix: pass retain_graph=True to the call at line ${by.line} if you really need to go through this graph again, or recompute the forward pass before this call.`
          : "Fix: recompute the forward pass, or keep the graph with retain_graph=True on the earlier call.";
      } else if (st.stale) {
        out.fix = "Fix: use an out-of-place operation (y = y * 2 instead of y.mul_(2)), or clone the tensor before changing it.";
      }
      out.lines.push(ran.length
        ? `It had already run ${ran.length} node${ran.length === 1 ? "" : "s"} before that: a failed backward is not all-or-nothing.`
        : "No node ran before it.");
    } else if (!step.order.length) {
      out.lines.push("The call failed before the engine started: no node ran.");
    } else {
      out.lines.push(`Every node in the plan ran (${ran.length}); the error came after the engine.`);
    }
  } else {
    out.lines.push(`The engine ran ${ran.length} node${ran.length === 1 ? "" : "s"}, in the order numbered on the graph.`);
  }
  const freedNow = ran.filter((id) => step.state.get(id).freed && !(prev && prev.state.get(id) && prev.state.get(id).freed));
  if (freedNow.length) {
    out.lines.push(`retain_graph=False: ${freedNow.length} node${freedNow.length === 1 ? "" : "s"} released ${freedNow.length === 1 ? "its" : "their"} saved tensors (dashed chips); a second backward through them fails.`);
  } else if (step.retainGraph && ran.some((id) => model.nodes[id].savedTensors.length)) {
    out.lines.push("retain_graph=True: saved tensors were kept (solid chips, “retained”).");
  }
  if (prev) {
    const written = [];
    const accumulated = [];
    const changes = model.gradChanges(i);
    for (const t of step.tensors) {
      const c = changes.get(t.name);
      if (c) (c.old ? accumulated : written).push(t);
    }
    const list = (ts) => {
      const shown = ts.slice(0, 4).map((t) => `${t.name}.grad = ${fmtGrad(t.grad)}`).join("; ");
      return ts.length > 4 ? `${shown}; and ${ts.length - 4} more (see Tensors)` : shown;
    };
    if (written.length) out.lines.push(`Written (was None): ${list(written)}.`);
    if (accumulated.length) out.lines.push(`Accumulated (old + new): ${list(accumulated)}.`);
    if (step.error && !written.length && !accumulated.length) {
      const kept = step.tensors.filter((t) => t.grad);
      out.lines.push(kept.length
        ? `No .grad changed: ${list(kept)} kept from before.`
        : "No .grad changed.");
    }
  }
  if (step.createGraph) {
    const built = [...step.state.values()].filter((s) => s.isNew && model.nodes[s.id].gradGraph).length;
    if (built) out.lines.push(`create_graph=True built ${built} node${built === 1 ? "" : "s"} of the gradient's own graph (purple).`);
  }
  if (step.returned) out.lines.push(`Returned: ${step.returned.map((g) => fmtGrad(g)).join(", ")}.`);
  return out;
}
