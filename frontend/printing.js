// Numbers as torch prints them: the one number format of the page.
//
// The twin of server/gradstep/printing.py (same rule, same names in camelCase; the
// rule is explained there). In short, per tensor as torch._tensor_str decides:
// "sci" (1.6021e-02) when its nonzero finite values span more than 1000× or leave
// [1e-4, 1e8]; else "int" (448.) when all are integers; else "fixed": 4 decimals,
// more below 0.1 so every value keeps 4 significant digits of its own. The trace
// stores values rounded to exactly these digits and the mode torch chose
// (`grad.format`); modesOf derives it for numbers the trace does not carry.
// tests/trace/test_printing.py checks this module against torch through node.

const DECIMALS = 4; // torch's default print precision
const OWN_DIGITS = 4; // significant digits every value keeps of its own

function isNumber(v) {
  return typeof v === "number" && Number.isFinite(v);
}

/** How torch prints a tensor holding `numbers` ("int" | "fixed" | "sci"). */
export function modeOf(numbers) {
  let lo = Infinity;
  let hi = 0;
  let integral = true;
  for (const v of numbers) {
    if (!isNumber(v) || v === 0) continue;
    const a = Math.abs(v);
    if (a < lo) lo = a;
    if (a > hi) hi = a;
    if (v !== Math.ceil(v)) integral = false;
  }
  if (hi === 0) return "int";
  if (hi / lo > 1000 || hi > 1e8 || lo < 1e-4) return "sci";
  return integral ? "int" : "fixed";
}

/** Decimals of `v` in fixed mode: torch's 4, more below 0.1 to keep 4 digits of its own. */
export function fixedDecimals(v) {
  if (v === 0 || !Number.isFinite(v)) return DECIMALS;
  const exponent = Number(v.toExponential(OWN_DIGITS - 1).split("e")[1]); // of v rounded to 4 digits
  return Math.max(DECIMALS, OWN_DIGITS - 1 - exponent);
}

// JS drops the sign of -0 and writes exponents as e-2; Python (and torch) write -0. and e-02.
function signed(v, text) {
  return Object.is(v, -0) ? `-${text}` : text;
}

function sci(v) {
  const [mantissa, exp] = v.toExponential(DECIMALS).split("e");
  const sign = exp[0] === "-" ? "-" : "+";
  const digits = exp.replace(/^[+-]/, "");
  return signed(v, `${mantissa}e${sign}${digits.padStart(2, "0")}`);
}

/** One real value of a tensor printed in `mode`. */
export function fmtValue(v, mode) {
  if (typeof v === "string") return v; // "nan", "inf", "-inf" as the trace writes them
  if (v === null || v === undefined) return "nan";
  if (typeof v !== "number") return String(v);
  if (Number.isNaN(v)) return "nan";
  if (!Number.isFinite(v)) return v > 0 ? "inf" : "-inf";
  if (mode === "sci") return sci(v);
  if (mode === "int") return signed(v, `${v.toFixed(0)}.`);
  return signed(v, v.toFixed(fixedDecimals(v)));
}

/** A complex value `[re, im]` as torch prints it: 1.0000+2.0000j. */
export function fmtComplex(pair, modes) {
  const real = fmtValue(pair[0], modes[0]);
  const imag = `${fmtValue(pair[1], modes[1])}j`;
  return imag[0] === "+" || imag[0] === "-" ? real + imag : `${real}+${imag}`;
}

export function isComplex(dtype) {
  return typeof dtype === "string" && dtype.startsWith("complex");
}

function isPair(v) {
  return Array.isArray(v) && v.length === 2 && !Array.isArray(v[0]);
}

/** The elements of nested `values` in order (a complex element is its [re, im] pair). */
export function leaves(values, complex = false) {
  if (!Array.isArray(values) || (complex && isPair(values))) return [values];
  return values.flatMap((v) => leaves(v, complex));
}

/** The modes torch would pick for `values` (when the trace carries none: derived numbers). */
export function modesOf(values, dtype = null) {
  if (!isComplex(dtype)) return [modeOf(leaves(values))];
  const pairs = leaves(values, true);
  return [modeOf(pairs.map((p) => p[0])), modeOf(pairs.map((p) => p[1]))];
}

/** Nested `values` as torch prints them, brackets and all: [[1., 2.], [3., 4.]]. */
export function fmtValues(values, dtype = null, modes = null) {
  const m = modes && modes.length ? modes : modesOf(values, dtype);
  const complex = isComplex(dtype);
  const text = (v) => {
    if (complex && isPair(v)) return fmtComplex(v, m);
    if (Array.isArray(v)) return `[${v.map(text).join(", ")}]`;
    return fmtValue(v, m[0]);
  };
  return text(values);
}

/** A lone number (a norm, a scalar) as torch prints a 0-d tensor holding it. */
export function fmtNumber(v) {
  return fmtValue(v, modeOf([v]));
}
