// The gradient-flow chart's data: at a backward (or autograd.grad) call, each module's parameter
// .grad norm, flagged vanishing / exploding / non-finite, beside the same module at the earlier
// calls of the run (a training loop's iterations). Pure: no DOM, so `node --test` checks it; the
// norms are module-stats.js's (the one computation, held to torch), this file only shapes them.
import { moduleStats } from "./module-stats.js";

export const MAX_ROWS = 50; // the default level: the finest whose row count stays under this
export const VANISHING = 1e-7; // a norm below this × the call's largest is vanishing
export const EXPLODING = 1e3; // a norm above this × the call's median is exploding…
// …and above this itself: beside a vanishing chain (a deep sigmoid net) the median is tiny, and the
// last layers' ordinary norms (~1) are not what "exploding" warns about
export const EXPLODING_MIN = 10;
export const HISTORY = 20; // earlier calls drawn beside the current one

const isCall = (s) => s.kind === "backward" || s.kind === "grad";

/** Step indices of the run's engine calls (backward, autograd.grad), in order. */
export function callSteps(model) {
  const out = [];
  model.steps.forEach((s, i) => {
    if (isCall(s)) out.push(i);
  });
  return out;
}

/** The call a step shows: the latest call at or before it (null before the first). */
export function callAt(calls, index) {
  let at = null;
  for (const c of calls) {
    if (c > index) break;
    at = c;
  }
  return at;
}

/**
 * The levels of the module tree the chart can show, coarse to fine: each a list of module paths
 * in the model's order (its forward order). Level 0 is the top modules holding parameters; the
 * next replaces each module by its submodules that hold parameters. A module holding parameters
 * of its own besides its submodules' stays whole (its norm would not be the sum of its rows').
 */
export function flowLevels(model) {
  const leaves = new Map(); // module path → parameter leaves drawn in it (its submodules' too)
  const own = new Map(); // module path → leaves drawn in it directly
  for (const n of model.nodes) {
    if (!n.isLeaf || !n.group) continue;
    own.set(n.group, (own.get(n.group) ?? 0) + 1);
    let p = n.group;
    while (p !== null && p !== undefined) {
      leaves.set(p, (leaves.get(p) ?? 0) + 1);
      p = model.groups.get(p)?.parent ?? null;
    }
  }
  const holding = (ids) => ids.filter((id) => leaves.has(id));
  let level = holding(model.rootGroups);
  if (!level.length) return [];
  const levels = [level];
  for (;;) {
    let split = false;
    const next = level.flatMap((id) => {
      const kids = holding(model.groups.get(id).groups);
      if (!kids.length || own.has(id)) return [id];
      split = true;
      return kids;
    });
    if (!split) break;
    levels.push(next);
    level = next;
  }
  return levels;
}

/** The level opened first: the finest with at most `max` rows (a single module opens one finer). */
export function defaultLevel(levels, max = MAX_ROWS) {
  let at = 0;
  levels.forEach((l, i) => {
    if (l.length <= max) at = i;
  });
  return at;
}

function median(values) {
  if (!values.length) return null;
  const s = [...values].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** A row's state: "nonfinite" | "vanishing" | "exploding" | "none" (no .grad) | "ok". */
export function rowStatus(stats, largest, mid) {
  if (!stats || stats.params === 0) return "none";
  if (stats.nonfinite > 0) return "nonfinite";
  const n = stats.gradNorm;
  if (n === null) return "none";
  if (largest !== null && n <= VANISHING * largest) return "vanishing";
  if (mid !== null && mid > 0 && n > EXPLODING * mid && n > EXPLODING_MIN) return "exploding";
  return "ok";
}

/**
 * What the chart shows at step `index` for the modules `paths` (a level of flowLevels):
 * null before the first call. Otherwise {call, calls, earlier, rows, min, max}: `call` the step
 * index of the call shown, `earlier` the step indices of up to `history` calls before it (those
 * `ready` says are), each
 * row {key: module path, norm, params, nonfinite, status, prev, history: [{call, norm}]}.
 * `min`/`max`: the positive norms' range over the current and earlier calls (the log axis).
 */
export function gradFlowView(model, index, paths, { history = HISTORY, calls = callSteps(model), ready = () => true } = {}) {
  const call = callAt(calls, index);
  if (call === null) return null;
  const k = calls.indexOf(call);
  // `ready(call)` false: that earlier call is left out for now (its stats are computed later, a call a task)
  const earlier = calls.slice(Math.max(0, k - history), k).filter(ready);
  const now = moduleStats(model, call);
  const before = earlier.map((c) => [c, moduleStats(model, c)]);
  const finite = paths.map((p) => now.get(p)).filter((s) => s && s.params > s.nonfinite && s.gradNorm !== null).map((s) => s.gradNorm);
  const largest = finite.length ? Math.max(...finite) : null;
  const mid = median(finite);
  let min = Infinity;
  let max = 0;
  const seen = (n) => {
    if (typeof n === "number" && n > 0 && Number.isFinite(n)) {
      min = Math.min(min, n);
      max = Math.max(max, n);
    }
  };
  const rows = paths.map((path) => {
    const s = now.get(path);
    const norm = s ? s.gradNorm : null;
    seen(norm);
    const hist = before.map(([c, stats]) => {
      const b = stats.get(path);
      const n = b && b.params > 0 ? b.gradNorm : null;
      seen(n);
      return { call: c, norm: n, nonfinite: b ? b.nonfinite : 0 };
    });
    return {
      key: path,
      norm,
      params: s ? s.params : 0,
      nonfinite: s ? s.nonfinite : 0,
      status: rowStatus(s, largest, mid),
      prev: hist.length ? hist[hist.length - 1].norm : null,
      history: hist,
    };
  });
  return { call, calls, earlier, rows, min: min === Infinity ? null : min, max: max || null, largest, median: mid };
}

/** A norm's place on the log axis, 0..1 (0: at or below the axis' start, a zero norm too). */
export function logPosition(norm, lo, hi) {
  if (typeof norm !== "number" || !(norm > 0) || lo === null || hi === null) return 0;
  const a = Math.log10(lo);
  const b = Math.log10(hi);
  if (b <= a) return 1;
  return Math.min(1, Math.max(0, (Math.log10(norm) - a) / (b - a)));
}

/** The log axis around a view's norms: whole decades, at least one wide. */
export function logDomain(view) {
  if (!view || view.min === null) return { lo: null, hi: null, ticks: [] };
  let lo = Math.floor(Math.log10(view.min));
  let hi = Math.ceil(Math.log10(view.max));
  if (hi <= lo) hi = lo + 1;
  const step = Math.max(1, Math.ceil((hi - lo) / 4)); // a few labels: the axis may be 100 px wide
  const ticks = [];
  for (let e = lo; e <= hi; e += step) ticks.push(e);
  return { lo: 10 ** lo, hi: 10 ** hi, ticks: ticks.map((e) => ({ exp: e, value: 10 ** e, at: (e - lo) / (hi - lo) })) };
}

/**
 * The rows' names without the module path they all share ("model.h.0" → "h.0" when every row is
 * in `model`): {prefix, names: Map(path → shown name)}. A single row keeps its whole path.
 */
export function sharedPrefix(paths) {
  const split = paths.map((p) => p.split("."));
  let n = 0;
  if (paths.length > 1) {
    for (;;) {
      const part = split[0][n];
      if (split.some((s) => s.length <= n + 1 || s[n] !== part)) break;
      n++;
    }
  }
  const prefix = split.length ? split[0].slice(0, n).join(".") : "";
  return { prefix, names: new Map(paths.map((p, i) => [p, split[i].slice(n).join(".")])) };
}

/**
 * A row's norm over the calls (the earlier ones, then this one) as a sparkline in a `width` ×
 * `height` box, y on the same log axis as the bars (rows stay comparable): the polyline's runs
 * (a call without a finite positive norm breaks the line) and the current call's point.
 */
export function sparkline(row, lo, hi, width, height) {
  const norms = [...row.history.map((p) => p.norm), row.status === "nonfinite" ? null : row.norm];
  const dx = norms.length > 1 ? width / (norms.length - 1) : 0;
  const point = (n, i) => (typeof n === "number" && n > 0 ? [i * dx, height - logPosition(n, lo, hi) * height] : null);
  const runs = [];
  let run = [];
  norms.forEach((n, i) => {
    const p = point(n, i);
    if (p) run.push(p);
    else if (run.length) {
      runs.push(run);
      run = [];
    }
  });
  if (run.length) runs.push(run);
  const fmt = (pts) => pts.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" ");
  return { runs: runs.map(fmt), now: point(norms[norms.length - 1], norms.length - 1) };
}
