// Unit tests for the step of an error raised outside a backward/grad call (Step.kind "error"): its
// title, and that the side-by-side view does not pair it with the other run's call.
// Run: node --test tests/frontend/
import { test } from "node:test";
import assert from "node:assert/strict";
import { buildModel, stepTitle } from "../../frontend/model.js";
import { alignSteps, fixLineMap } from "../../frontend/align.js";

const CODE = "import torch\nw = torch.ones(3, requires_grad=True)\ny = (w * 2).sum()\ny.backward()\nw = w - 0.1 * w.grad\ny = (w * 2).sum()\ny.backward()\nprint(w.grad * 2)\n";
const error = { type: "TypeError", message: "unsupported operand type(s) for *: 'NoneType' and 'int'", line: 8 };
const TRACE = {
  version: 4,
  status: "error",
  error,
  code: CODE,
  nodes: [],
  steps: [
    { index: 0, kind: "forward", line: 3 },
    { index: 1, kind: "backward", line: 4, api: "Tensor.backward" },
    { index: 2, kind: "forward", line: 5 },
    { index: 3, kind: "forward", line: 6 },
    { index: 4, kind: "backward", line: 7, api: "Tensor.backward" },
    { index: 5, kind: "error", line: 8, error },
  ],
};

test("an error step's title names the error and says the run ended there", () => {
  const m = buildModel(TRACE);
  assert.equal(stepTitle(m.steps[5]), "line 8 · TypeError ✕ the run ended here");
  assert.equal(m.step(5).isCall, false);
});

test("side by side, an error step is not paired with the other run's call", () => {
  // the fixed run: no error, a third backward where the original raised
  const fixed = structuredClone(TRACE);
  fixed.status = "ok";
  fixed.error = null;
  fixed.steps[5] = { index: 5, kind: "backward", line: 8, api: "Tensor.backward" };
  const map = fixLineMap(CODE, { code: CODE, source_lines: CODE.split("\n").slice(0, -1).map((_, i) => i + 1) });
  const rows = alignSteps(TRACE, fixed, map);
  const ofError = rows.filter((r) => r.a === 5);
  assert.deepEqual(ofError, [{ a: 5, b: null, kind: "forward" }]);
  assert.ok(rows.some((r) => r.a === null && r.b === 5 && r.kind === "call"));
});
