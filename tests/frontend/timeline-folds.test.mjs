// Timeline folds on the steps of real traces (the tracer's output, fixtures/*.json).
import { test } from "node:test";
import assert from "node:assert/strict";
import { foldText, timelineFolds } from "../../frontend/timeline-folds.js";

const fwd = (iteration = null) => ({ kind: "forward", iteration });
const call = (iteration = null) => ({ kind: "backward", iteration });

test("a short timeline folds nothing", () => {
  assert.deepEqual(timelineFolds([fwd(), fwd(), fwd(), fwd(), call()]), []);
});

test("consecutive forward steps with no call between fold into one run", () => {
  const steps = [...Array(30).fill(0).map(() => fwd()), call()];
  assert.deepEqual(timelineFolds(steps), [{ start: 0, end: 29, iteration: null }]);
});

test("forward steps of different iterations fold apart, calls and short runs stay", () => {
  const steps = [];
  for (let it = 1; it <= 5; it++) steps.push(fwd(it), fwd(it), fwd(it), fwd(it), call(it));
  steps.push(fwd(6), fwd(6), call(6));
  const folds = timelineFolds(steps);
  assert.deepEqual(folds.map((f) => [f.start, f.end, f.iteration]), [[0, 3, 1], [5, 8, 2], [10, 13, 3], [15, 18, 4], [20, 23, 5]]);
});

test("a fold says its count, and where in it the current step is", () => {
  const fold = { start: 10, end: 23, iteration: null };
  assert.equal(foldText(fold), "forward ×14");
  assert.equal(foldText(fold, 12), "forward 3/14");
  assert.equal(foldText(fold, 24), "forward ×14");
});
