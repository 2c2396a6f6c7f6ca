// Lining up two runs of (almost) the same snippet — the original and a fixed
// version — so the side-by-side view can step them in lockstep and say what
// differs. Pure functions of the two traces: no DOM, tested with node --test.
//
// The rule (docs: frontend/README.md, "Side by side"):
//   1. Lines: the fix's line map, computed by the server and shipped with the
//      fix (Fix.source_lines; the rule is diagnose/source.py line_sources):
//      each line of the fix comes from a line of the original or was added.
//   2. Calls: the k-th backward()/autograd.grad() call of one run is aligned
//      with the k-th call of the other, whatever their lines.
//   3. Forward steps: between call k-1 and call k (and after the last call),
//      the forward steps of the two runs are aligned by line: the longest common
//      subsequence of their lines, the original's lines read through the line
//      map. A step with no partner gets a row of its own; the other run then
//      keeps showing its previous step ("held").
//   4. Nodes: a node of one run matches the node of the other with the same op
//      created on the same (mapped) line, the k-th such node with the k-th;
//      a leaf (AccumulateGrad) matches the leaf of the same tensor name.
//   5. Differences at a row, between the steps the two runs show there: matched
//      nodes alive in both whose freed / stale / failed state differs; tensors
//      (by name) whose .grad differs; a node alive in one run whose match is
//      not alive in the other ("only"); an error in one step and not the other.

import { rowsOf } from "./columns.js";
import { ACROSS_RUNS, sameGrad } from "./grad-equality.js";

// ---------------------------------------------------------------- lines

function lcsPairs(a, b, eq) {
  // classic O(n·m) table; snippets are at most 64 KB, steps at most 500
  const n = a.length;
  const m = b.length;
  const w = m + 1;
  const t = new Uint32Array((n + 1) * w);
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      t[i * w + j] = eq(a[i], b[j]) ? t[(i + 1) * w + j + 1] + 1 : Math.max(t[(i + 1) * w + j], t[i * w + j + 1]);
    }
  }
  const pairs = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (eq(a[i], b[j])) {
      pairs.push([i, j]);
      i++;
      j++;
    } else if (t[(i + 1) * w + j] >= t[i * w + j + 1]) i++;
    else j++;
  }
  return pairs;
}

/** A code's lines as the server counts them (Python's splitlines: no empty line after a final newline). */
export function codeLines(code) {
  const lines = (code || "").split(/\r\n|\r|\n/);
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  return lines;
}

/**
 * The line map between a snippet and its fix: { aToB: Map(lineA → lineB), bToA, changed: Set(lineB) }.
 * Lines count from 1. `changed` holds B's lines whose text differs from the A line they come from.
 * The map is the server's (Fix.source_lines, from diagnose/source.py line_sources), the one rule
 * for it; this only reads it. A fix from a trace older than source_lines maps no line.
 */
export function fixLineMap(codeA, fix) {
  const a = codeLines(codeA);
  const b = codeLines(fix?.code);
  const sources = Array.isArray(fix?.source_lines) ? fix.source_lines : [];
  const aToB = new Map();
  const bToA = new Map();
  const changed = new Set();
  sources.forEach((from, i) => {
    // the map comes from a sandboxed run: out-of-range or repeated lines are ignored
    if (!Number.isInteger(from) || from < 1 || from > a.length || aToB.has(from) || i >= b.length) return;
    aToB.set(from, i + 1);
    bToA.set(i + 1, from);
    if (a[from - 1].trim() !== b[i].trim()) changed.add(i + 1);
  });
  return { aToB, bToA, changed };
}

// ---------------------------------------------------------------- steps

const isCall = (s) => s.kind === "backward" || s.kind === "grad";

/** Steps split at calls: { segments: [[forward index…] before call k, …, after the last], calls: [index…] }. */
function segmentSteps(steps) {
  const segments = [[]];
  const calls = [];
  steps.forEach((s, i) => {
    if (isCall(s)) {
      calls.push(i);
      segments.push([]);
    } else segments[segments.length - 1].push(i);
  });
  return { segments, calls };
}

/**
 * The rows of the side-by-side view: [{a, b, kind}] where a / b is a step index
 * of run A / B or null (no partner), kind "forward" | "call". Every step of each
 * run appears exactly once, in order.
 */
export function alignSteps(traceA, traceB, map) {
  const stepsA = traceA.steps ?? [];
  const stepsB = traceB.steps ?? [];
  const A = segmentSteps(stepsA);
  const B = segmentSteps(stepsB);
  const lineA = (i) => {
    const l = stepsA[i].line ?? null;
    return l === null ? null : (map.aToB.get(l) ?? null);
  };
  const lineB = (j) => stepsB[j].line ?? null;
  const rows = [];
  const n = Math.max(A.segments.length, B.segments.length);
  for (let k = 0; k < n; k++) {
    const sa = A.segments[k] ?? [];
    const sb = B.segments[k] ?? [];
    const pairs = lcsPairs(sa, sb, (i, j) => lineA(i) !== null && lineA(i) === lineB(j));
    let pa = 0;
    let pb = 0;
    for (const [ia, ib] of [...pairs, [sa.length, sb.length]]) {
      while (pa < ia) rows.push({ a: sa[pa++], b: null, kind: "forward" });
      while (pb < ib) rows.push({ a: null, b: sb[pb++], kind: "forward" });
      if (ia < sa.length) rows.push({ a: sa[ia], b: sb[ib], kind: "forward" });
      pa = ia + 1;
      pb = ib + 1;
    }
    if (k < Math.max(A.calls.length, B.calls.length)) {
      rows.push({ a: A.calls[k] ?? null, b: B.calls[k] ?? null, kind: "call" });
    }
  }
  return rows;
}

/**
 * The step each run shows at row r: its own step, or — when it has none there —
 * its latest step before r (held), or its first step when it has none yet.
 * → { a, b, heldA, heldB } (a / b null only for a run without steps)
 */
export function shownAt(rows, r) {
  const pick = (side) => {
    if (rows[r] && rows[r][side] !== null) return { i: rows[r][side], held: false };
    for (let k = r - 1; k >= 0; k--) if (rows[k][side] !== null) return { i: rows[k][side], held: true };
    for (let k = r + 1; k < rows.length; k++) if (rows[k][side] !== null) return { i: rows[k][side], held: true };
    return { i: null, held: true };
  };
  const a = pick("a");
  const b = pick("b");
  return { a: a.i, b: b.i, heldA: a.held, heldB: b.held };
}

// ---------------------------------------------------------------- nodes

function nodeKeys(trace, lineOf) {
  const keys = new Map();
  const count = new Map();
  for (const n of trace.nodes ?? []) {
    const base = n.op === "AccumulateGrad" && n.tensor
      ? `leaf:${n.tensor}`
      : `${n.op}@${n.line === null || n.line === undefined ? "-" : (lineOf(n.line) ?? "?")}`;
    const k = count.get(base) ?? 0;
    count.set(base, k + 1);
    // a line removed by the fix matches nothing
    if (!base.endsWith("@?")) keys.set(n.id, `${base}#${k}`);
  }
  return keys;
}

/** Matching nodes of the two runs: { aToB: Map(id → id), bToA }. */
export function matchNodes(traceA, traceB, map) {
  const ka = nodeKeys(rowsOf(traceA), (l) => map.aToB.get(l));
  const kb = nodeKeys(rowsOf(traceB), (l) => l);
  const byKey = new Map([...kb].map(([id, k]) => [k, id]));
  const aToB = new Map();
  const bToA = new Map();
  for (const [id, k] of ka) {
    const other = byKey.get(k);
    if (other === undefined) continue;
    aToB.set(id, other);
    bToA.set(other, id);
  }
  return { aToB, bToA };
}

// ---------------------------------------------------------------- differences

function stateOf(step) {
  const out = new Map();
  for (const s of step?.nodes ?? []) {
    if (s.dropped) continue;
    out.set(s.id, { freed: s.freed ?? false, stale: s.stale ?? false, failed: s.failed ?? false });
  }
  return out;
}

function addKind(m, id, kind) {
  if (!m.has(id)) m.set(id, new Set());
  m.get(id).add(kind);
}

/**
 * Everything a comparison needs, computed once from the two runs and the fix's line map
 * (fixLineMap): { map, rows, nodes, diffAt(r) }.
 * diffAt(r) → { shown: shownAt(rows, r), a: Map(id → Set(kind)), b: Map(id → Set(kind)),
 *   grads: [{name, a, b}], freed: [{a, b, freedIn}], errors: {a, b} }
 * kinds: "freed", "stale", "failed", "grad", "only".
 */
export function compareTraces(traceA, traceB, map) {
  // any version: a version-4 trace's tables read as rows (columns.js; the page's come as rows)
  traceA = rowsOf(traceA);
  traceB = rowsOf(traceB);
  const rows = alignSteps(traceA, traceB, map);
  const nodes = matchNodes(traceA, traceB, map);
  const diffAt = (r) => {
    const shown = shownAt(rows, r);
    const stepA = shown.a === null ? null : traceA.steps[shown.a];
    const stepB = shown.b === null ? null : traceB.steps[shown.b];
    const sa = stateOf(stepA);
    const sb = stateOf(stepB);
    const a = new Map();
    const b = new Map();
    const freed = [];
    for (const [id, x] of sa) {
      const other = nodes.aToB.get(id);
      const y = other === undefined ? undefined : sb.get(other);
      if (!y) {
        addKind(a, id, "only");
        continue;
      }
      for (const kind of ["freed", "stale", "failed"]) {
        if (x[kind] === y[kind]) continue;
        addKind(a, id, kind);
        addKind(b, other, kind);
        if (kind === "freed") freed.push({ a: id, b: other, freedIn: x.freed ? "a" : "b" });
      }
    }
    for (const id of sb.keys()) {
      const other = nodes.bToA.get(id);
      if (other === undefined || !sa.has(other)) addKind(b, id, "only");
    }
    const ta = new Map((stepA?.tensors ?? []).map((t) => [t.name, t]));
    const tb = new Map((stepB?.tensors ?? []).map((t) => [t.name, t]));
    const grads = [];
    for (const name of new Set([...ta.keys(), ...tb.keys()])) {
      const x = ta.get(name);
      const y = tb.get(name);
      if (sameGrad(x?.grad ?? null, y?.grad ?? null, ACROSS_RUNS)) continue;
      grads.push({ name, a: x?.grad ?? null, b: y?.grad ?? null });
      if (x && x.node !== null && x.node !== undefined && sa.has(x.node)) addKind(a, x.node, "grad");
      if (y && y.node !== null && y.node !== undefined && sb.has(y.node)) addKind(b, y.node, "grad");
    }
    // an error belongs to the step that raised it, not to a step held beside another
    const errA = !shown.heldA && stepA?.error ? stepA.error : null;
    const errB = !shown.heldB && stepB?.error ? stepB.error : null;
    const errors = { a: errA && !errB ? errA : null, b: errB && !errA ? errB : null };
    return { shown, a, b, grads, freed, errors };
  };
  return { map, rows, nodes, diffAt };
}
