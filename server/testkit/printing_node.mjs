// frontend/printing.js on the cases tests/trace/test_printing.py writes to stdin (JSON), answered on
// stdout: for each case, its recorded values in the recorded modes, the values in the modes
// modesOf derives, those modes, and the norm.
import { readFileSync } from "node:fs";
import { fmtNumber, fmtValues, modesOf } from "../../frontend/printing.js";

const cases = JSON.parse(readFileSync(0, "utf8"));
const answers = cases.map((c) => ({
  values: c.values === null ? null : fmtValues(c.values, c.dtype, c.format),
  derived: c.values === null ? null : fmtValues(c.values, c.dtype),
  modes: c.values === null ? null : modesOf(c.values, c.dtype),
  norm: c.norm === null ? null : fmtNumber(c.norm),
}));
process.stdout.write(JSON.stringify(answers));
