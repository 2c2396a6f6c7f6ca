// The view model: a pure function of the trace (and, for a step, its index).
//
// Nothing here touches the DOM, so the same code serves the app, embeds, static
// exports and `node --test`. The trace format is docs/trace-format.md: fields at
// their default may be absent, so every read below applies the default.
//
//   buildModel(trace)            node table, module tree, union graph, per-line index
//   model.step(i)                the state of every node at step i, flow edges, grads
//   diffSteps(model, from, to)   what changed (for animation)
//   visibleGraph(model, expanded) the graph with collapsed modules folded into boxes

import { rowsOf } from "./columns.js";
import { sameGrad } from "./grad-equality.js";
import { fmtNumber, fmtValues } from "./printing.js";
import { updateTitle } from "./updates.js";

export const LEAF_OP = "AccumulateGrad";

// ---------------------------------------------------------------- formatting

// Numbers print as torch prints them (printing.js, the twin of gradstep/printing.py).
export { fmtNumber, fmtValues } from "./printing.js";

/** A sandbox limit in words: "cpu" → "CPU time" (the trace's `limit` field). */
export function limitName(limit) {
  const names = { cpu: "CPU time", wall: "wall-clock time", memory: "memory", output: "output size" };
  return names[limit] || limit || "resource";
}

/** A run's own words (an exception's message: torch's, Python's or the code's) in quotation marks,
 * at most `max` characters: never said in gradstep's voice (NOTE [the server's voice] in
 * server/gradstep/voice.py; the server quotes them the same way, printing.quoted). */
export function quote(words, max = 300) {
  const line = String(words ?? "").replace(/\s+/g, " ").trim();
  return `“${line.length > max ? `${line.slice(0, max)}…` : line}”`;
}

/** An exception as a run raised it: its class, then its message quoted ("RuntimeError: “…”"). */
export function raisedText(error, max = 300) {
  if (!error) return "";
  return error.message ? `${error.type}: ${quote(error.message, max)}` : error.type;
}

/** A crashed run's own report (TraceError.reported) as a quote after the server's words, or "". The
 * run's process can write anything there: it is never said in gradstep's voice. */
export function reportedText(error, max = 300) {
  const said = error && error.reported;
  if (!said) return "";
  return ` Reported by the code: ${quote(said, max)}`;
}

/** Why a run is the code's word, not gradstep's (Trace.reaches: the server's look at the code), or "". */
export function reachSentence(reaches) {
  if (!reaches || !reaches.length) return "";
  const where = reaches.slice(0, 3).map((r) => `line ${r.line}: ${r.what}`).join("; ");
  return `This code leaves what gradstep can vouch for (${where}${reaches.length > 3 ? "; …" : ""}), so it could `
    + "make its run report anything: the steps and values here are what its process reported (gradstep "
    + "wrote the sentences from them, but cannot vouch for them), and no fixes are checked for it.";
}

export function fmtShape(shape) {
  return shape && shape.length ? shape.join("×") : "scalar";
}

/** Bytes as the narration writes them (gradstep.narrate.fmt_bytes): 512 B, 1.5 KB, 3.0 MB. */
export function fmtBytes(n) {
  if (n === null || n === undefined) return "?";
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / (1024 * 1024)).toFixed(1)} MB`;
}

function numel(shape) {
  return (shape || []).reduce((a, b) => a * b, 1);
}

/** A gradient's values as torch prints them, in the modes the trace recorded (`format`). */
export function gradValues(grad) {
  return fmtValues(grad.values, grad.dtype, grad.format ?? null);
}

/**
 * The short text of a gradient shown on its node: the values when the tensor has
 * at most 6 elements, else its norm and shape; "None" when there is no grad.
 */
export function fmtGrad(grad) {
  if (!grad) return "None";
  const values = grad.values ?? null;
  if (values !== null && numel(grad.shape) <= 6) return gradValues(grad);
  if (grad.norm === null || grad.norm === undefined) return `${fmtShape(grad.shape)} ${grad.dtype}`;
  return `‖${fmtNumber(grad.norm)}‖ ${fmtShape(grad.shape)}`;
}

/** Elementwise a - b over nested lists (null when shapes differ or values are absent). */
export function subValues(a, b) {
  if (a === null || a === undefined || b === null || b === undefined) return null;
  if (Array.isArray(a) !== Array.isArray(b)) return null;
  if (!Array.isArray(a)) return a - b;
  if (a.length !== b.length) return null;
  const out = [];
  for (let i = 0; i < a.length; i++) {
    const d = subValues(a[i], b[i]);
    if (d === null) return null;
    out.push(d);
  }
  return out;
}

/** The row a leaf shows when its .grad accumulated: "= old + delta" (delta = new - old). */
export function accText(old, total) {
  const tv = total.values ?? null;
  const ov = old.values ?? null;
  const d = tv !== null && ov !== null ? subValues(tv, ov) : null;
  // the difference of two recorded tensors: printed in the modes torch would pick for it
  const delta = d !== null && numel(total.shape) <= 6 ? fmtValues(d, total.dtype) : `… (‖${fmtNumber(total.norm)}‖ now)`;
  return `= ${fmtGrad(old)} + ${delta}`;
}

/** "Tensor.backward(retain_graph=True)" style flags of a call step. */
export function callFlags(step) {
  const flags = [];
  if (step.retainGraph) flags.push("retain_graph=True");
  if (step.createGraph) flags.push("create_graph=True");
  if (step.inputs && step.inputs.length) flags.push(`inputs=[${step.inputs.join(", ")}]`);
  if (step.gradient) flags.push(step.kind === "grad" ? "grad_outputs=…" : "gradient=…");
  return flags;
}

export function stepTitle(step) {
  const where = step.where ?? (step.line !== null ? `line ${step.line}` : "no line");
  if (step.kind === "error") return `${where} · ${step.error ? step.error.type : "error"} ✕ the run ended here`;
  if (step.kind === "forward") {
    return step.repeat > 1 ? `${where} · forward ×${step.repeat}` : `${where} · forward`;
  }
  if (step.kind === "update") return `${where} · ${updateTitle(step)}${step.error ? " ✕ failed" : ""}`;
  const api = step.api || (step.kind === "grad" ? "torch.autograd.grad" : "backward");
  const flags = callFlags(step);
  return `${where} · ${api}(${flags.join(", ")})${step.error ? " ✕ failed" : ""}`;
}

// ---------------------------------------------------------------- node table

// Recordings of the user's own code (gradstep.record(), added within trace version 3) name lines
// across files: `file` indexes `files`, and `code` is files[0]'s source. `line` here is a line of
// `code` only (what the code panel highlights); a line in another file is in `fileLine`/`where`.
function located(raw, files) {
  const file = raw.file ?? null;
  const line = raw.line ?? null;
  if (file === null) return { line, file, fileLine: line, where: null };
  const path = files[file]?.path ?? "?";
  return { line: file === 0 ? line : null, file, fileLine: line, where: line !== null ? `${path}:${line}` : path };
}

function nodeInfo(raw, files) {
  const op = raw.op;
  const saved = (raw.saved ?? []).map((s) => ({
    name: s.name,
    kind: s.kind,
    shape: s.shape ?? null,
    dtype: s.dtype ?? null,
    bytes: s.bytes ?? null,
    value: s.value ?? null,
    of: s.of ?? null,
    packed: s.packed ?? null, // kept by a saved-tensor pack hook (checkpointing, save_on_cpu)
    unreadable: s.unreadable ?? null,
  }));
  return {
    id: raw.id,
    op,
    isLeaf: op === LEAF_OP,
    seq: raw.seq ?? null,
    ...located(raw, files),
    module: raw.module ?? null,
    next: raw.next ?? [],
    saved,
    savedTensors: saved.filter((s) => s.kind !== "value"),
    savedValues: saved.filter((s) => s.kind === "value"),
    tensor: raw.tensor ?? null,
    // bytes its saved tensors hold, each storage once (added within version 4; older: the slots' sum)
    savedBytes: raw.saved_bytes ?? saved.reduce((a, s) => a + (s.kind !== "value" && s.bytes ? s.bytes : 0), 0),
    group: raw.module ?? null, // the module box it is drawn in (see buildModel)
    gradGraph: raw.grad_graph ?? false,
    step: raw.step ?? 0,
    iteration: raw.iteration ?? null, // of the snippet's loop (added within version 4)
    unreadable: raw.unreadable ?? null,
  };
}

function stepInfo(raw, i, files) {
  return {
    index: raw.index ?? i,
    kind: raw.kind,
    ...located(raw, files),
    ranFiles: raw.ran_files ?? [],
    repeat: raw.repeat ?? 1,
    // added within version 4: the outermost loop's iteration, and an optimizer call's update
    iteration: raw.iteration ?? null,
    update: raw.update ?? null,
    api: raw.api ?? null,
    retainGraph: raw.retain_graph ?? null,
    createGraph: raw.create_graph ?? null,
    inputs: raw.inputs ?? null,
    gradient: raw.gradient ?? null,
    error: raw.error ?? null,
    returned: raw.returned ?? null,
    savedBytes: raw.saved_bytes ?? 0,
    stdout: raw.stdout ?? "",
    warnings: raw.warnings ?? [],
    added: raw.edges ?? [],
    // trace version 2: narration of the step, with spans naming nodes / tensors
    explanation: raw.explanation ?? "",
    links: raw.links ?? [],
    // added within version 3: nodes where a nan/inf gradient first appeared in this call
    nonfinite: raw.nonfinite ?? [],
  };
}

// A loop that built fewer nodes than this is drawn as it is (a lesson's three iterations of a
// small model): its iterations' graphs are mostly freed, and empty boxes would crowd it.
const LOOP_NODES = 48;

/**
 * The iterations of the snippet's loops, from the nodes' `iteration`: nodes in the order they
 * were built (sequence number); a loop ends where a node built outside it comes, or the
 * count starts again. Each loop: {id, label, iterations: [{id, iteration, label, flat, nodes}]}.
 * A loop that ran once, or built few nodes, is not grouped. Ids start with "@", which no module
 * path does: "@1" for the first loop, "@1.7" for its 7th iteration (laid out in order, in rows).
 * An iteration whose nodes all come from one module call (an unrolled RNN cell) holds them
 * itself ("cell · t=7"); else they sit in its modules' boxes.
 */
function iterationGroups(nodes) {
  const built = nodes.filter((n) => n.seq !== null).sort((a, b) => a.seq - b.seq);
  const runs = [];
  let run = null;
  let last = 0;
  for (const n of built) {
    if (n.iteration === null) {
      run = null;
      continue;
    }
    if (run === null || n.iteration < last) runs.push((run = new Map()));
    if (!run.has(n.iteration)) run.set(n.iteration, []);
    run.get(n.iteration).push(n);
    last = n.iteration;
  }
  const loops = [];
  for (const run of runs) {
    if (run.size < 2 || [...run.values()].reduce((a, m) => a + m.length, 0) < LOOP_NODES) continue;
    const k = loops.length + 1;
    const iterations = [...run].map(([iteration, members]) => {
      members.sort((a, b) => a.id - b.id);
      const module = members[0].module;
      const flat = module !== null && members.every((n) => n.module === module);
      return {
        id: `@${k}.${iteration}`,
        iteration,
        label: flat ? `${module} · t=${iteration}` : `iteration ${iteration}`,
        flat,
        nodes: members,
      };
    });
    loops.push({ id: `@${k}`, label: `loop · ${run.size} iterations`, iterations });
  }
  return loops;
}

/**
 * Ancestor module paths of "a.b.c": ["a", "a.b", "a.b.c"] (of any group id alike). Frozen and
 * shared: every step asks it of every node (module-stats.js), so each path is split once.
 */
export function modulePath(module) {
  if (!module) return NO_PATH;
  let out = pathCache.get(module);
  if (!out) {
    const parts = module.split(".");
    out = Object.freeze(parts.map((_, i) => parts.slice(0, i + 1).join(".")));
    if (pathCache.size > 50_000) pathCache.clear();
    pathCache.set(module, out);
  }
  return out;
}

const NO_PATH = Object.freeze([]); // an empty list, shared
const pathCache = new Map(); // module path → its ancestors

/**
 * The trace → the model every view reads. Cheap for 2000 nodes (one pass over
 * the table, step states built on demand and cached). Any version: a version-4
 * trace's columns are read as rows first (columns.js), here because every viewer
 * (app, embed, widget, exported page) builds its model from what it was given.
 */
export function buildModel(input) {
  const raw = rowsOf(input);
  const trace = {
    version: raw.version ?? 1,
    status: raw.status,
    error: raw.error ?? null,
    limit: raw.limit ?? null,
    stdout: raw.stdout ?? "",
    code: raw.code ?? "",
    torch: raw.torch ?? "",
    warnings: raw.warnings ?? [],
    truncated: raw.truncated ?? [],
    notes: raw.notes ?? [],
    diagnoses: raw.diagnoses ?? [], // trace version 2
    reaches: raw.reaches ?? [], // added within version 4
    files: (raw.files ?? []).map((f) => ({ path: f.path, code: f.code ?? null })), // added within version 3
  };
  const nodes = (raw.nodes ?? []).map((n) => nodeInfo(n, trace.files));
  const rawSteps = raw.steps ?? [];
  const steps = rawSteps.map((s, i) => stepInfo(s, i, trace.files));

  // Nodes each line created, and the line of each node.
  const byLine = new Map();
  for (const n of nodes) {
    if (n.line === null) continue;
    if (!byLine.has(n.line)) byLine.set(n.line, []);
    byLine.get(n.line).push(n.id);
  }

  // Union graph, forward direction (input → consumer), one entry per (a, b) pair.
  const edges = [];
  const seen = new Set();
  for (const n of nodes) {
    for (const c of n.next) {
      const key = `${c}>${n.id}`;
      if (seen.has(key)) continue;
      seen.add(key);
      edges.push({ key, from: c, to: n.id });
    }
  }

  // Module tree: every prefix of every module path is a group. A loop's iterations are
  // groups too (iterationGroups), in a group for the loop: a node built in one is drawn in
  // that iteration's box, in its module's box nested there; the ids nest with "." as module
  // paths do, so modulePath gives any group's ancestors.
  const groups = new Map();
  const ensureGroup = (path) => {
    if (groups.has(path)) return groups.get(path);
    const dot = path.lastIndexOf(".");
    const parent = dot < 0 ? null : path.slice(0, dot);
    const g = {
      id: path, name: dot < 0 ? path : path.slice(dot + 1), parent, depth: 0, groups: [], nodes: [], size: 0,
      kind: "module", module: path, label: null,
    };
    groups.set(path, g);
    if (parent !== null) {
      const p = ensureGroup(parent);
      p.groups.push(path);
      g.depth = p.depth + 1;
    }
    return g;
  };
  const rootGroups = [];
  const rootNodes = [];
  const modules = new Set();
  for (const n of nodes) for (const p of modulePath(n.module)) modules.add(p);
  const loops = iterationGroups(nodes);
  for (const loop of loops) {
    Object.assign(ensureGroup(loop.id), { kind: "loop", module: null, label: loop.label });
    for (const it of loop.iterations) {
      Object.assign(ensureGroup(it.id), { kind: "iteration", module: null, label: it.label, iteration: it.iteration });
      for (const n of it.nodes) {
        n.group = it.flat || !n.module ? it.id : `${it.id}.${n.module}`;
        const g = ensureGroup(n.group);
        if (g.kind === "module") g.module = n.module;
        for (let p = groups.get(g.parent); p && p.kind === "module"; p = groups.get(p.parent)) {
          p.module = p.id.slice(it.id.length + 1);
        }
      }
    }
  }
  for (const n of nodes) if (n.module && n.iteration === null) ensureGroup(n.module);
  // A parameter's AccumulateGrad carries no module (it is found, not created, in
  // a module call); it belongs with its module: the deepest module its name starts with.
  // Their modules are made in forward order (`modules`), not in the order backward made the leaves.
  const homes = new Map();
  for (const n of nodes) {
    if (n.isLeaf && !n.module && n.tensor && n.tensor.includes(".")) {
      const found = modulePath(n.tensor).filter((p) => modules.has(p)).pop();
      if (found) homes.set(n, found);
    }
  }
  const homed = new Set(homes.values());
  for (const p of modules) if (homed.has(p)) ensureGroup(p);
  for (const [n, p] of homes) n.group = p;
  for (const n of nodes) {
    if (!n.group) {
      rootNodes.push(n.id);
      continue;
    }
    const g = groups.get(n.group);
    g.nodes.push(n.id);
    for (const p of modulePath(n.group)) groups.get(p).size++;
  }
  for (const g of groups.values()) if (g.parent === null) rootGroups.push(g.id);

  // First step at which each node shows stale: the line that modified it in place
  // is the line of that step (or, for a forward step folded from a loop, its last line).
  const staleSince = new Map();
  // Bytes of saved tensors per step come with the trace; the grads per step too.
  const cache = new Map();
  const model = {
    trace,
    nodes,
    steps,
    edges,
    byLine,
    groups,
    rootGroups,
    rootNodes,
    staleSince,
    maxGradRows: new Map(), // node id → most grad rows it shows at any step
    gradWidth: new Map(), // node id → longest grad text at any step
    varsWidth: new Map(), // node id → longest "a, b" of its vars at any step
    accWidth: new Map(), // leaf id → longest "= old + delta" row at any step
    step(i) {
      if (i < 0 || i >= steps.length) return null;
      if (!cache.has(i)) cache.set(i, readStep(model, rawSteps[i], steps[i]));
      return cache.get(i);
    },
    /** Grads that changed at step i (written or accumulated): name → {old, total}. */
    gradChanges(i) {
      const key = `g${i}`;
      if (!cache.has(key)) cache.set(key, gradChanges(model, i));
      return cache.get(key);
    },
  };
  // One pass over the steps for what must be known about all of them at once
  // (stable sizes, first stale step). Cheap: no per-step objects are kept.
  let before = new Map(); // tensor name → grad at the previous step
  const lastAlive = loops.length ? new Int32Array(nodes.length).fill(-1) : null; // node id → its last step alive
  for (let i = 0; i < rawSteps.length; i++) {
    const rs = rawSteps[i];
    // the "= old + delta" row of a leaf whose grad accumulated at this step
    const now = new Map();
    for (const t of rs.tensors ?? []) {
      const g = t.grad ?? null;
      now.set(t.name, g);
      const old = before.get(t.name) ?? null;
      const node = t.node ?? null;
      if (node === null || !g || !old || sameGrad(old, g) || !model.nodes[node]) continue;
      const w = accText(old, g).length;
      if (w > (model.accWidth.get(node) ?? 0)) model.accWidth.set(node, w);
    }
    before = now;
    for (const s of rs.nodes ?? []) {
      if (lastAlive && !s.dropped && s.id >= 0 && s.id < lastAlive.length) lastAlive[s.id] = i;
      if (s.stale && !staleSince.has(s.id)) staleSince.set(s.id, i);
      if (s.vars && s.vars.length) {
        const w = s.vars.join(", ").length;
        if (w > (model.varsWidth.get(s.id) ?? 0)) model.varsWidth.set(s.id, w);
      }
    }
    const rows = new Map();
    for (const t of rs.tensors ?? []) {
      const node = t.node ?? null;
      if (node === null || !model.nodes[node]) continue;
      rows.set(node, (rows.get(node) ?? 0) + 1);
      // the row reads "grad <values>" on a leaf, "<name>.grad <values>" on an op node
      const label = t.isLeaf || model.nodes[node]?.isLeaf ? 5 : Math.min(t.name.length, 12) + 6;
      const w = label + fmtGrad(t.grad ?? null).length;
      if (w > (model.gradWidth.get(node) ?? 0)) model.gradWidth.set(node, w);
    }
    for (const [node, count] of rows) {
      if (count > (model.maxGradRows.get(node) ?? 0)) model.maxGradRows.set(node, count);
    }
  }
  // The steps at which each iteration has a node alive, [first, last]: its box shows only then, so
  // iterations never alive together may share a place (NOTE [iterations share a place] in layout.js).
  for (const loop of loops) {
    for (const it of loop.iterations) {
      let first = Infinity;
      let last = -1;
      for (const n of it.nodes) {
        first = Math.min(first, n.step);
        last = Math.max(last, lastAlive[n.id]);
      }
      if (first !== Infinity) groups.get(it.id).span = [first, Math.max(first, last)];
    }
  }
  return model;
}

// ---------------------------------------------------------------- one step

function readStep(model, raw, info) {
  const state = new Map();
  const dropped = [];
  for (const s of raw.nodes ?? []) {
    const node = model.nodes[s.id];
    if (!node) continue;
    if (s.dropped) {
      dropped.push(s.id);
      continue;
    }
    state.set(s.id, {
      id: s.id,
      freed: s.freed ?? false,
      stale: s.stale ?? false,
      staleSaved: s.stale_saved ?? NO_PATH, // shared empties: a step of a big model has thousands of nodes
      executed: s.executed ?? false,
      failed: s.failed ?? false,
      order: s.order ?? null,
      vars: s.vars ?? (node.isLeaf && node.tensor ? [node.tensor] : NO_PATH),
      isNew: node.step === info.index,
    });
  }
  // Where gradient flowed: edges [a, b] of the step's graph (a's next) with a
  // executed and b reached (has an order), in a's execution order.
  const ran = [...state.values()].filter((s) => s.order !== null);
  ran.sort((a, b) => a.order - b.order || (a.failed ? 1 : 0) - (b.failed ? 1 : 0));
  const flow = [];
  for (const s of ran) {
    if (!s.executed) continue;
    const seen = new Set();
    for (const c of model.nodes[s.id].next) {
      const cs = state.get(c);
      if (!cs || cs.order === null || seen.has(c)) continue;
      seen.add(c);
      flow.push({ from: s.id, to: c, order: s.order });
    }
  }
  const tensors = (raw.tensors ?? []).map((t) => ({
    name: t.name,
    shape: t.shape ?? [],
    dtype: t.dtype ?? "",
    requiresGrad: t.requires_grad ?? false,
    isLeaf: t.is_leaf ?? false,
    retainsGrad: t.retains_grad ?? false,
    node: t.node ?? null,
    grad: t.grad ?? null,
    // no name reaches it now (added within version 4): `name` is its label, e.g. "w (line 2)"
    unnamed: t.unnamed ?? false,
    was: t.was ?? null,
  }));
  const gradsOf = new Map(); // node id → [tensor]
  for (const t of tensors) {
    if (t.node === null) continue;
    if (!gradsOf.has(t.node)) gradsOf.set(t.node, []);
    gradsOf.get(t.node).push(t);
  }
  const failed = ran.find((s) => s.failed) ?? null;
  return {
    ...info,
    state,
    alive: state,
    dropped,
    order: ran.map((s) => s.id),
    flow,
    failed: failed ? failed.id : null,
    tensors,
    gradsOf,
    isCall: info.kind === "backward" || info.kind === "grad", // an engine call (not an update step)
  };
}

/**
 * tensor → its .grad in `tensors` (an earlier step's): by name, and for a leaf whose name changed
 * (a rebound name's old leaf, listed unnamed under a label) by its AccumulateGrad node, the same
 * node while the leaf lives.
 */
export function gradsBefore(tensors) {
  const byName = new Map(tensors.map((t) => [t.name, t.grad]));
  const byLeaf = new Map(tensors.filter((t) => t.isLeaf && t.node !== null).map((t) => [t.node, t.grad]));
  return (t) => (byName.has(t.name) ? byName.get(t.name) : t.isLeaf && t.node !== null ? byLeaf.get(t.node) : null) ?? null;
}

function gradChanges(model, i) {
  const out = new Map();
  const step = model.step(i);
  const prev = i > 0 ? model.step(i - 1) : null;
  const before = gradsBefore(prev ? prev.tensors : []);
  for (const t of step.tensors) {
    const old = before(t);
    if (t.grad && !sameGrad(old, t.grad)) out.set(t.name, { old, total: t.grad });
  }
  return out;
}

/**
 * The state of a node at a step: "absent" when not alive (not yet created, or gone). Pure: the
 * graph, its hooks and the inspector each ask for every node of a step, so the last few steps'
 * answers are kept (shared objects; callers only read them).
 */
export function nodeStatus(model, step, id) {
  if (!step) return computeStatus(model, step, id);
  let known = statusCache.find((c) => c.step === step && c.model === model);
  if (!known) {
    known = { model, step, byId: new Map() };
    statusCache.unshift(known);
    statusCache.length = Math.min(statusCache.length, 4);
  }
  let st = known.byId.get(id);
  if (st === undefined) known.byId.set(id, (st = computeStatus(model, step, id)));
  return st;
}

const statusCache = []; // [{model, step, byId}], most recent first

function computeStatus(model, step, id) {
  const s = step ? step.state.get(id) : null;
  if (!s) return { alive: false, dropped: step ? step.dropped.includes(id) : false };
  const node = model.nodes[id];
  const hasTensors = node.savedTensors.length > 0;
  // Retained: the call ran through the node and kept its saved tensors.
  const retained = step.isCall && s.executed && !s.freed && hasTensors && step.retainGraph === true;
  return { alive: true, ...s, hasTensors, retained };
}

// ---------------------------------------------------------------- diffs

/**
 * What changes from step `from` to step `to` (from may be -1: nothing before).
 * Stepping backwards is a jump: nothing to animate beyond the new state.
 */
export function diffSteps(model, from, to) {
  // pure in (model, from, to): computed once per pair (Play and stepping repeat the same pairs)
  let cache = diffCache.get(model);
  if (!cache) diffCache.set(model, (cache = new Map()));
  const key = `${from}>${to}`;
  if (!cache.has(key)) cache.set(key, computeDiff(model, from, to));
  return cache.get(key);
}

const diffCache = new WeakMap(); // model → Map("from>to" → diff)

function computeDiff(model, from, to) {
  const a = from >= 0 ? model.step(from) : null;
  const b = model.step(to);
  const out = { added: [], removed: [], freed: [], stale: [], grads: [], flow: [], forward: to === from + 1 };
  if (!b) return out;
  for (const id of b.state.keys()) if (!a || !a.state.has(id)) out.added.push(id);
  if (a) for (const id of a.state.keys()) if (!b.state.has(id)) out.removed.push(id);
  for (const [id, s] of b.state) {
    const p = a ? a.state.get(id) : null;
    if (s.freed && !(p && p.freed)) out.freed.push(id);
    if (s.stale && !(p && p.stale)) out.stale.push(id);
  }
  // one step on: the grads that changed are the step's own grad changes (compared once, cached)
  const changed = to === from + 1 ? model.gradChanges(to) : null;
  const before = changed ? null : gradsBefore(a ? a.tensors : []);
  for (const t of b.tensors) {
    const c = changed ? changed.get(t.name) : null;
    const old = changed ? (c ? c.old : null) : before(t);
    if (changed ? !c : !t.grad || sameGrad(old, t.grad)) continue;
    out.grads.push({
      name: t.name,
      node: t.node,
      old,
      total: t.grad,
      // accumulated: there was a grad, and this step added to it (a call)
      accumulated: old !== null && b.isCall,
      delta: old !== null ? subValues(t.grad.values ?? null, old.values ?? null) : null,
    });
  }
  if (out.forward && b.isCall) out.flow = b.flow;
  return out;
}

/** Bytes held by saved tensors at each step (for the chart). */
export function savedBytesSeries(model) {
  return model.steps.map((s) => s.savedBytes);
}

// ---------------------------------------------------------------- collapse

/**
 * Which modules start expanded: whole levels of the module tree are opened, top
 * down, while the number of visible items stays within `budget`. A module with a
 * single child module and no nodes of its own opens with its parent (chains
 * like model → model.layers are not worth a click).
 *
 * A model bigger than `budget` nodes opens at a summary: modules with fewer
 * than three submodules stay boxes (their nodes are the detail), and levels open while at
 * most `summary` items show: a transformer's blocks, a ResNet's stages, each a
 * box with its facts, legible at once; a click opens one.
 */
export function initialExpanded(model, budget = 120, summary = 64) {
  const big = model.nodes.length > budget;
  const limit = big ? Math.min(budget, summary) : budget;
  const expanded = new Set();
  let level = [...model.rootGroups];
  let visible = model.rootNodes.length + level.length;
  while (level.length) {
    // in a summary, a module opens when it holds several submodules (a stage of two blocks is one box)
    const opens = (g) => g.groups.length >= 3 || (g.groups.length === 1 && g.nodes.length === 0);
    const open = big ? level.filter((id) => opens(model.groups.get(id))) : level;
    if (!open.length) break;
    const next = [];
    let added = 0;
    for (const id of open) {
      const g = model.groups.get(id);
      added += g.nodes.length + g.groups.length - 1;
      next.push(...g.groups);
    }
    const chain = open.length === level.length && level.every((id) => {
      const g = model.groups.get(id);
      return g.groups.length === 1 && g.nodes.length === 0;
    });
    // a loop's iterations are set in rows (layout.js gridBoxes): up to `budget` of them stay legible
    const loop = open.some((id) => model.groups.get(id).kind === "loop");
    if (visible + added > (loop ? budget : limit) && !chain) break;
    for (const id of open) expanded.add(id);
    visible += added;
    level = next;
  }
  return expanded;
}

/**
 * The groups a graph opens with: `expanded` (initialExpanded's choice) with every loop
 * iteration closed when the graph is bigger than `budget` nodes: a loop shows one box per
 * iteration, as a model shows one box per block, and opening one costs what it holds.
 */
export function openedAtStart(model, expanded, budget = 120) {
  if (model.nodes.length <= budget) return expanded;
  return new Set([...expanded].filter((id) => !modulePath(id).some((p) => model.groups.get(p)?.kind === "iteration")));
}

/** The expanded modules that show: expanded, and so are all their ancestors. */
export function effectiveExpanded(model, expanded) {
  const out = new Set();
  for (const id of expanded) {
    if (model.groups.has(id) && ancestry(model, id).every((p) => expanded.has(p))) out.add(id);
  }
  return out;
}

/** A group's ancestors and itself, outermost first (modulePath, kept on the group). */
function ancestry(model, id) {
  const g = model.groups.get(id);
  if (!g) return modulePath(id);
  if (!g.path) g.path = modulePath(id);
  return g.path;
}

/** The visible item that stands for node `id`: itself, or its outermost collapsed module. */
export function representative(model, expanded, id) {
  const node = model.nodes[id];
  if (!node.group) return `n:${id}`;
  for (const path of ancestry(model, node.group)) {
    if (!expanded.has(path)) return `g:${path}`;
  }
  return `n:${id}`;
}

/**
 * The graph with collapsed modules folded: items (nodes and collapsed module
 * boxes), the expanded modules (drawn as frames around their content), and the
 * edges between items, each remembering the node edges it stands for.
 */
export function visibleGraph(model, expanded) {
  const rep = new Array(model.nodes.length);
  const items = new Map();
  for (const n of model.nodes) {
    const r = representative(model, expanded, n.id);
    rep[n.id] = r;
    if (!items.has(r)) {
      if (r.startsWith("n:")) {
        items.set(r, { key: r, kind: "node", id: n.id, parent: n.group });
      } else {
        const g = model.groups.get(r.slice(2));
        items.set(r, { key: r, kind: "group", group: g.id, parent: g.parent, members: [] });
      }
    }
    if (r.startsWith("g:")) items.get(r).members.push(n.id);
  }
  const edges = new Map();
  for (const e of model.edges) {
    const a = rep[e.from];
    const b = rep[e.to];
    if (a === b) continue;
    const key = `${a}>${b}`;
    if (!edges.has(key)) edges.set(key, { key, from: a, to: b, pairs: [] });
    edges.get(key).pairs.push([e.from, e.to]);
  }
  const open = effectiveExpanded(model, expanded);
  const alias = bundleEdges(model, open, items, edges);
  const frames = [...open].map((id) => model.groups.get(id));
  return { rep, items, edges, frames, alias };
}

/** Edges from (or to) one item to more than this many items of one expanded group are drawn as one. */
export const BUNDLE_OVER = 6;

/**
 * One item feeding many items of an expanded group it is not in (a module's shared weights
 * feed each of a loop's 100 iterations) is one edge to that group's frame ("f:<group>"),
 * {bundle: group, count: items reached, pairs: all node pairs}; so is the other way round.
 * The group is the one the items sit in directly: an iteration opened inside the loop keeps
 * its few edges. Replaces the edges in `edges`; returns item edge key → drawn edge key.
 */
function bundleEdges(model, open, items, edges) {
  const alias = new Map();
  const containerOf = (key) => {
    const item = items.get(key);
    return item.kind === "node" ? model.nodes[item.id].group : item.parent;
  };
  const inside = (key, group) => ancestry(model, containerOf(key) ?? "").includes(group);
  for (const side of ["to", "from"]) {
    const other = side === "to" ? "from" : "to";
    const sets = new Map();
    for (const e of edges.values()) {
      if (e.bundle) continue;
      const group = containerOf(e[side]);
      if (!group || !open.has(group) || inside(e[other], group)) continue;
      const k = `${e[other]}|${group}`;
      if (!sets.has(k)) sets.set(k, []);
      sets.get(k).push(e);
    }
    for (const list of sets.values()) {
      if (list.length <= BUNDLE_OVER) continue;
      const group = containerOf(list[0][side]);
      const end = list[0][other];
      const from = side === "to" ? end : `f:${group}`;
      const to = side === "to" ? `f:${group}` : end;
      const key = `${from}>${to}`;
      const bundled = { key, from, to, pairs: [], bundle: group, count: list.length, outward: side === "from" };
      for (const e of list) {
        edges.delete(e.key);
        alias.set(e.key, key);
        bundled.pairs.push(...e.pairs);
      }
      edges.set(key, bundled);
    }
  }
  return alias;
}

/** Aggregate state of a collapsed module at a step (counts over its alive members). */
export function groupStatus(model, step, members) {
  const out = { alive: 0, freed: 0, stale: 0, executed: 0, failed: 0, withTensors: 0, firstOrder: null, isNew: 0 };
  if (!step) return out;
  for (const id of members) {
    const s = step.state.get(id);
    if (!s) continue;
    out.alive++;
    if (s.freed) out.freed++;
    if (s.stale) out.stale++;
    if (s.executed) out.executed++;
    if (s.failed) out.failed++;
    if (s.isNew) out.isNew++;
    if (model.nodes[id].savedTensors.length) out.withTensors++;
    if (s.order !== null && (out.firstOrder === null || s.order < out.firstOrder)) out.firstOrder = s.order;
  }
  return out;
}
