// Unit tests for frontend/exercise-spec.js: the exercise spec's grammar, the `# predict:` comments,
// the questions of a run and the checking of answers. (The page's side: tests/browser/test_browser_exercise.py.)
// Run: node --test tests/frontend/
import { test } from "node:test";
import assert from "node:assert/strict";
import { buildModel } from "../../frontend/model.js";
import {
  checkError, checkFreed, checkGrad, closeTo, commentQuestions, errorChoiceOf, freedCandidates, parseGradAnswer, parseOption,
  parseSpec, planExercise, summarize, truthOf,
} from "../../frontend/exercise-spec.js";
import { X7 } from "./fixtures.mjs";

// X7: x = tensor(2.), y = x**7 (line 4), y.backward(retain_graph=True) (line 5), y.backward() (line 6)
const withCode = (code) => buildModel({ ...X7, code });
const X7_CODE = X7.code;

// ---------------------------------------------------------------- grammar

test("a spec lists its questions in order", () => {
  const { items, errors } = parseSpec("x.grad, freed ,error");
  assert.deepEqual(errors, []);
  assert.deepEqual(items, [{ kind: "grad", tensor: "x", line: null }, { kind: "freed", line: null }, { kind: "error", line: null }]);
});

test("dotted and indexed tensor names are names", () => {
  const { items, errors } = parseSpec("model.0.weight.grad, ps[0].grad");
  assert.deepEqual(errors, []);
  assert.deepEqual(items.map((i) => i.tensor), ["model.0.weight", "ps[0]"]);
});

test("@LINE restricts an item to a line", () => {
  assert.deepEqual(parseSpec("w.grad@12").items, [{ kind: "grad", tensor: "w", line: 12 }]);
});

test("@LINE is refused in a comment", () => {
  const { items, errors } = parseSpec("freed@3", { allowLine: false });
  assert.deepEqual(items, []);
  assert.match(errors[0], /leave out “@3”/);
});

test("a line after @ must be a positive number", () => {
  assert.match(parseSpec("freed@x").errors[0], /line number/);
  assert.match(parseSpec("freed@0").errors[0], /line number/);
});

test("an unknown question is named in its message", () => {
  const { items, errors } = parseSpec("x.grad, x.gard");
  assert.equal(items.length, 1);
  assert.match(errors[0], /“x\.gard” is not a question/);
});

test("empty questions between commas are reported", () => {
  assert.match(parseSpec("freed,,error").errors[0], /empty question/);
});

test("repeated questions are asked once", () => {
  assert.equal(parseSpec("freed, freed, x.grad, x.grad").items.length, 2);
});

test("a spec longer than 500 characters or with a newline is refused", () => {
  assert.match(parseSpec("freed,".repeat(100)).errors[0], /too long/);
  assert.match(parseSpec("freed\nerror").errors[0], /one line/);
});

// ---------------------------------------------------------------- the option

test("off, code and a spec are the option's three shapes", () => {
  for (const off of [undefined, null, false, "", "0", "false"]) assert.equal(parseOption(off).on, false, String(off));
  for (const code of [true, "1", "true", "code", " code "]) assert.deepEqual([parseOption(code).on, parseOption(code).code], [true, true], String(code));
  const spec = parseOption("x.grad");
  assert.deepEqual([spec.on, spec.code, spec.items.length], [true, false, 1]);
});

test("an option that is not text is a message, not an exception", () => {
  assert.match(parseOption(3).errors[0], /must be text/);
});

// ---------------------------------------------------------------- comments

test("a comment after a call asks at its line", () => {
  const { byLine, errors } = commentQuestions("y = x**2\ny.backward()  # predict: x.grad, freed\n");
  assert.deepEqual(errors, []);
  assert.deepEqual([...byLine.keys()], [2]);
  assert.deepEqual(byLine.get(2).map((i) => i.kind), ["grad", "freed"]);
});

test("a comment on a line of its own asks at the next line of code", () => {
  const { byLine } = commentQuestions("# predict: error\n\ny.backward()\n");
  assert.deepEqual([...byLine.keys()], [3]);
});

test("a comment's bad spec is reported with its line", () => {
  const { byLine, errors } = commentQuestions("a\ny.backward()  # predict: x.grad@2\n");
  assert.equal(byLine.size, 0);
  assert.match(errors[0], /^Line 2: /);
});

test("a # predict: inside a string is not a comment", () => {
  assert.equal(commentQuestions('print("# predict: freed")\n').byLine.size, 0);
});

// ---------------------------------------------------------------- questions of a run

test("comments ask at each call of their line", () => {
  const code = X7_CODE.replace("y.backward()", "y.backward()  # predict: x.grad");
  const plan = planExercise(withCode(code), "code");
  assert.deepEqual(plan.errors, []);
  assert.deepEqual(plan.questions.map((q) => [q.step, q.kind, q.tensor]), [[2, "grad", "x"]]);
});

test("code mode without comments asks the default set at every call", () => {
  const plan = planExercise(withCode(X7_CODE), true);
  assert.deepEqual(plan.questions.filter((q) => q.step === 1).map((q) => q.kind + (q.tensor ? `:${q.tensor}` : "")), ["error", "freed", "grad:x"]);
  assert.deepEqual([...new Set(plan.questions.map((q) => q.step))], [1, 2]);
});

test("the option's items are added to the comments' ones", () => {
  const code = X7_CODE.replace("y.backward()", "y.backward()  # predict: error");
  const plan = planExercise(withCode(code), "x.grad");
  assert.deepEqual(plan.questions.map((q) => `${q.step}:${q.kind}`), ["1:grad", "2:error", "2:grad"]);
});

test("an item @LINE asks only at that line's calls", () => {
  const plan = planExercise(withCode(X7_CODE), "freed@6");
  assert.deepEqual(plan.questions.map((q) => q.step), [2]);
});

test("a tensor the run never has is a message and no question", () => {
  const plan = planExercise(withCode(X7_CODE), "w.grad, freed");
  assert.match(plan.errors[0], /no tensor named “w” \(its tensors: x\)/);
  assert.ok(plan.questions.every((q) => q.kind === "freed"));
});

test("a comment on a line where no call ran is a message", () => {
  const plan = planExercise(withCode(X7_CODE.replace("y = x**7", "y = x**7  # predict: freed")), "code");
  assert.match(plan.errors[0], /^Line 4: .*no backward\(\) or autograd\.grad\(\) call ran/);
});

test("an @LINE with no call is a message", () => {
  assert.match(planExercise(withCode(X7_CODE), "freed@2").errors[0], /no backward\(\) .* on line 2/);
});

test("the mode off asks nothing, whatever the comments", () => {
  const plan = planExercise(withCode(X7_CODE.replace("y.backward()", "y.backward()  # predict: error")), "");
  assert.deepEqual([plan.on, plan.questions.length], [false, 0]);
});

// ---------------------------------------------------------------- truth

test("the truth of a .grad question is the step's record", () => {
  const m = withCode(X7_CODE);
  assert.deepEqual(truthOf(m, { step: 1, kind: "grad", tensor: "x" }), { values: 448, shape: [] });
  assert.deepEqual(truthOf(m, { step: 2, kind: "grad", tensor: "x" }), { values: 896, shape: [] });
});

test("the truth of a freed question is what the call freed and no earlier call had", () => {
  const m = withCode(X7_CODE);
  assert.deepEqual(truthOf(m, { step: 1, kind: "freed" }), []); // retain_graph=True
  assert.deepEqual(truthOf(m, { step: 2, kind: "freed" }), [0]); // PowBackward0
  assert.deepEqual(freedCandidates(m, 2), [0]);
});

test("the truth of an error question is the step's error and its choice", () => {
  const m = withCode(X7_CODE);
  assert.deepEqual(truthOf(m, { step: 1, kind: "error" }), { fails: false, error: null, choice: null, message: null });
  assert.equal(errorChoiceOf({ type: "RuntimeError", message: "Trying to backward through the graph a second time (or directly access saved tensors ...)" }), "backward-twice");
  assert.equal(errorChoiceOf({ type: "RuntimeError", message: "grad can be implicitly created only for scalar outputs" }), "not-scalar");
  assert.equal(errorChoiceOf({ type: "ValueError", message: "something else" }), "other");
});

// ---------------------------------------------------------------- answers

test("typed answers: numbers, torch's printing, lists, None", () => {
  assert.deepEqual(parseGradAnswer("448."), { value: 448 });
  assert.deepEqual(parseGradAnswer(" -1.5e-3 "), { value: -0.0015 });
  assert.deepEqual(parseGradAnswer("[1, 2.5]"), { value: [1, 2.5] });
  assert.deepEqual(parseGradAnswer("[[1, 2], [3, 4],]"), { value: [[1, 2], [3, 4]] });
  assert.deepEqual(parseGradAnswer("tensor([1., 2.])"), { value: [1, 2] });
  assert.deepEqual(parseGradAnswer("None"), { value: null });
  assert.ok(Number.isNaN(parseGradAnswer("nan").value));
  assert.equal(parseGradAnswer("-inf").value, -Infinity);
});

test("what is not a number, a list or None gets the help", () => {
  for (const bad of ["", "two", "[1, 2", "[1 2]", "[]", "[[1, 2], [3]]", "1, 2"]) {
    assert.ok(parseGradAnswer(bad).error, bad);
  }
  assert.match(parseGradAnswer("two").error, /Write a number/);
});

test("the tolerance: 0.1% relative or 1e-6 absolute", () => {
  assert.ok(closeTo(0.333, 0.3333));
  assert.ok(!closeTo(0.33, 0.3333));
  assert.ok(closeTo(448.4, 448));
  assert.ok(!closeTo(449, 448));
  assert.ok(closeTo(0.0000005, 0));
  assert.ok(!closeTo(0.00001, 0));
  assert.ok(closeTo(NaN, "nan"));
  assert.ok(closeTo(Infinity, "inf"));
  assert.ok(!closeTo(Infinity, "-inf"));
});

test("a .grad answer: values, shape, None", () => {
  assert.ok(checkGrad(896, { values: 896, shape: [] }).correct);
  assert.ok(!checkGrad(1344, { values: 896, shape: [] }).correct);
  assert.ok(checkGrad([1, 2], { values: [1, 2], shape: [2] }).correct);
  assert.ok(!checkGrad([2, 1], { values: [1, 2], shape: [2] }).correct);
  assert.match(checkGrad([1, 2], { values: [[1, 2]], shape: [1, 2] }).why, /shape \[1, 2\]/);
  assert.ok(checkGrad(3, { values: [3], shape: [1] }).correct, "a bare number answers a one-element tensor");
  assert.ok(checkGrad(null, null).correct);
  assert.ok(!checkGrad(0, null).correct);
  assert.ok(!checkGrad(null, { values: 0, shape: [] }).correct);
});

test("a big tensor's .grad is answered by its norm", () => {
  const truth = { norm: 12.5, numel: 100, shape: [10, 10] };
  assert.ok(checkGrad(12.51, truth).correct);
  assert.ok(!checkGrad(13, truth).correct);
});

test("freed: the same set of nodes, in any order", () => {
  assert.ok(checkFreed([3, 1], [1, 3]).correct);
  assert.ok(!checkFreed([1], [1, 3]).correct);
  assert.ok(checkFreed([], []).correct);
});

test("error: fails or not, and with which error", () => {
  const fails = { fails: true, error: "RuntimeError", choice: "backward-twice" };
  assert.ok(checkError({ fails: true, choice: "backward-twice" }, fails).correct);
  assert.ok(!checkError({ fails: true, choice: "inplace" }, fails).correct);
  assert.ok(!checkError({ fails: false, choice: null }, fails).correct);
  assert.ok(checkError({ fails: false, choice: null }, { fails: false, choice: null }).correct);
});

test("the summary counts first answers; a skipped question is not answered", () => {
  const qs = [{ id: "a" }, { id: "b" }, { id: "c" }, { id: "d" }];
  const results = new Map([["a", { firstCorrect: true }], ["b", { firstCorrect: false }], ["c", { skipped: true }]]);
  assert.deepEqual(summarize(qs, results), { answered: 2, correct: 1, skipped: 1, total: 4 });
});

test("a .grad too big to carry its values is asked for its norm", () => {
  const big = { shape: [10, 10], dtype: "float32", has_grad_fn: false, norm: 12.5 };
  const steps = X7.steps.map((s) => (s.index === 1 ? { ...s, tensors: s.tensors.map((t) => ({ ...t, shape: [10, 10], grad: big })) } : s));
  const m = buildModel({ ...X7, steps });
  assert.deepEqual(truthOf(m, { step: 1, kind: "grad", tensor: "x" }), { norm: 12.5, numel: 100, shape: [10, 10] });
});
