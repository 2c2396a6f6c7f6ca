// Unit tests for what the strip under the step buttons shows of the code's output
// (frontend/step-output.js). Run: node --test tests/frontend/
import { test } from "node:test";
import assert from "node:assert/strict";
import { buildModel } from "../../frontend/model.js";
import { lastLines, SHOWN_LINES, stepOutputView } from "../../frontend/step-output.js";
import { X7 as BASE } from "./fixtures.mjs";

// x**7 at 2, two backward calls; the snippet prints before the first and after the last
const X7 = structuredClone(BASE);
X7.stdout = "y is 128.0\nafter\n";
X7.steps[1].stdout = "y is 128.0\n";

test("a step that printed nothing shows no strip", () => {
  assert.equal(stepOutputView(buildModel(X7), 0), null);
});

test("a step shows what was printed since the previous step, as the Output panel says it", () => {
  const v = stepOutputView(buildModel(X7), 1);
  assert.deepEqual(v.parts.map((p) => [p.key, p.label, p.text, p.lines]), [["step", "printed since the previous step", "y is 128.0\n", 1]]);
  assert.equal(v.lines, 1);
});

test("the first step's output is what was printed before it", () => {
  const first = structuredClone(X7);
  first.steps[0].stdout = "start\n";
  assert.equal(stepOutputView(buildModel(first), 0).parts[0].label, "printed before this step");
});

test("the last step also shows what was printed after it", () => {
  const v = stepOutputView(buildModel(X7), 2);
  assert.deepEqual(v.parts.map((p) => [p.key, p.label, p.text]), [["rest", "printed after the last step", "after\n"]]);
});

test("a trace without steps has no strip (the Output panel shows the whole run)", () => {
  assert.equal(stepOutputView(buildModel({ ...X7, steps: [] }), 0), null);
});

test("lines are counted as printed: a last newline ends a line, output without one still has its line", () => {
  const many = structuredClone(X7);
  many.steps[1].stdout = "a\nb\nc\nd\ne\n";
  assert.equal(stepOutputView(buildModel(many), 1).parts[0].lines, 5);
  many.steps[1].stdout = "a\nb";
  assert.equal(stepOutputView(buildModel(many), 1).parts[0].lines, 2);
});

test("the strip's short form is the last lines", () => {
  assert.equal(SHOWN_LINES, 3);
  assert.equal(lastLines("a\nb\nc\nd\ne\n", 3), "c\nd\ne");
  assert.equal(lastLines("a\nb", 3), "a\nb");
  assert.equal(lastLines("one line", 3), "one line");
});
