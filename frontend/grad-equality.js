// When two recorded gradients are "the same": the rule of server/gradstep/grad_equality.py, in
// the page (tests/frontend/same_grad_cases.json holds the cases both must agree on).
//
// The trace rounds each value to the digits torch prints (at least 4 significant digits) and each
// norm to 9. Within one run a recorded value is exact, so any difference is a change: tolerance 0.
// Across two runs (a snippet and its fix) float noise may move the last printed digit by one unit.

export const SAME_RUN = 0;
export const ACROSS_RUNS = 1.01e-3; // one unit of a 4th significant digit, relative to the value

/** A grad's nested `values` as one flat array. */
export function flatValues(values) {
  return Array.isArray(values) ? values.flatMap(flatValues) : [values];
}

const isNumber = (v) => typeof v === "number";

function close(x, y, tolerance, scale) {
  if (!isNumber(x) || !isNumber(y)) return x === y; // "nan", "inf", "-inf": only themselves
  return Math.abs(x - y) <= tolerance * (Math.max(Math.abs(x), Math.abs(y)) + 0.1 * scale);
}

/**
 * Both absent, or the same shape, grad_fn-ness and values (the norm where either has no values)
 * up to `tolerance` relative to each value (plus a tenth of it relative to the largest).
 */
export function sameGrad(a, b, tolerance = SAME_RUN) {
  if (a === b) return true;
  if (a == null || b == null) return a == null && b == null;
  if (JSON.stringify(a.shape ?? null) !== JSON.stringify(b.shape ?? null)) return false;
  if (Boolean(a.has_grad_fn) !== Boolean(b.has_grad_fn)) return false;
  const va = a.values ?? null;
  const vb = b.values ?? null;
  if (va !== null && vb !== null) {
    const xs = flatValues(va);
    const ys = flatValues(vb);
    if (xs.length !== ys.length) return false;
    const scale = Math.max(0, ...[...xs, ...ys].filter(isNumber).map(Math.abs));
    return xs.every((x, i) => close(x, ys[i], tolerance, scale));
  }
  const na = a.norm ?? null;
  const nb = b.norm ?? null;
  if (na === null || nb === null) return na === nb;
  return close(na, nb, tolerance, 0);
}
