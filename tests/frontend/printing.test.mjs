// frontend/printing.js where JavaScript's number formatting differs from Python's (which torch
// prints with). The strings themselves are checked against torch by tests/trace/test_printing.py, which
// runs this module under node next to torch; here only what JS would get wrong on its own.
// Run: node --test tests/frontend/
import { test } from "node:test";
import assert from "node:assert/strict";
import { fixedDecimals, fmtComplex, fmtNumber, fmtValue, fmtValues, modeOf } from "../../frontend/printing.js";

test("negative zero keeps its sign in every mode, as Python prints it", () => {
  for (const mode of ["int", "fixed", "sci"]) {
    assert.equal(fmtValue(-0, mode), `-${fmtValue(0, mode)}`, mode);
  }
});

test("exponents are signed and at least two digits long", () => {
  assert.match(fmtValue(1234.5, "sci"), /e\+03$/);
  assert.match(fmtValue(0.012, "sci"), /e-02$/);
  assert.match(fmtValue(1e-100, "sci"), /e-100$/);
  assert.match(fmtValue(0, "sci"), /e\+00$/);
});

test("fixed mode keeps 4 decimals, and 4 significant digits below 0.1", () => {
  assert.equal(fixedDecimals(0.5), 4);
  assert.equal(fixedDecimals(123.25), 4);
  assert.equal(fixedDecimals(0.05), 5);
  assert.equal(fixedDecimals(0.0012345), 6);
  assert.equal(fixedDecimals(0.099996), 4, "rounds up to 0.1000: a tenth");
});

test("non-finite values, as the trace spells them, print as they are", () => {
  assert.equal(fmtValues(["nan", 1.5, "-inf", "inf"]), `[nan, ${fmtValue(1.5, "fixed")}, -inf, inf]`);
  assert.equal(fmtNumber(null), "nan");
  assert.equal(modeOf(["nan", "inf", 0]), "int");
});

test("a complex value joins its parts with the imaginary part's sign, or +", () => {
  assert.equal(fmtComplex([2, -4], ["int", "int"]), `${fmtValue(2, "int")}${fmtValue(-4, "int")}j`);
  assert.equal(fmtComplex([2, 4], ["int", "int"]), `${fmtValue(2, "int")}+${fmtValue(4, "int")}j`);
  assert.equal(fmtComplex([1, "nan"], ["int", "int"]), `${fmtValue(1, "int")}+nanj`);
  assert.equal(fmtValues([[1, 2], [3, -1]], "complex64", ["int", "int"]), `[${fmtComplex([1, 2], ["int", "int"])}, ${fmtComplex([3, -1], ["int", "int"])}]`);
});

test("a complex scalar is one pair, not a vector of two", () => {
  assert.equal(fmtValues([1.5, 0.25], "complex64", ["fixed", "fixed"]), fmtComplex([1.5, 0.25], ["fixed", "fixed"]));
});
