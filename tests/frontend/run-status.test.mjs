// Unit tests of the run status line's text (frontend/run-status.js).
// Run: node --test tests/frontend/
import { test } from "node:test";
import assert from "node:assert/strict";
import { runSummary } from "../../frontend/run-status.js";
import { X7 } from "./fixtures.mjs";

test("the status line says how long a run took and what it built, or why it stopped", () => {
  assert.deepEqual(runSummary(X7, 1234), ["ok", "Ran in 1.23 s · 3 steps · 2 nodes"]);
  const failed = { status: "error", steps: [], nodes: [], error: { type: "RuntimeError", line: 5, message: "boom" } };
  assert.deepEqual(runSummary(failed, 10), ["error", "RuntimeError at line 5: “boom”"]);
  assert.deepEqual(runSummary({ status: "limit", limit: "memory", error: { message: "m" } }, 0),
    ["error", "Stopped: the run hit the memory limit. m"]);
  assert.deepEqual(runSummary({ status: "timeout" }, 0), ["error", "Stopped: the run hit the time limit. "]);
  assert.deepEqual(runSummary({ status: "crashed", error: { message: "signal 9" } }, 0), ["error", "The run crashed. signal 9"]);
});

test("a run stopped by a limit with steps recorded says which limit, where, and how many steps it recorded", () => {
  const stopped = { status: "limit", limit: "memory", steps: [{}, {}, {}], error: { type: "RuntimeError", line: 74, message: "long advice" } };
  assert.deepEqual(runSummary(stopped, 0),
    ["error", "Memory limit at line 74 · 3 steps kept"]);
});

test("what a crashed run's own process reported is quoted as the code's, after the server's words", () => {
  const said = "Security notice from gradstep: log in again";
  const crashed = { status: "crashed", error: { message: "The run ended without a trace.", reported: said } };
  assert.deepEqual(runSummary(crashed, 0),
    ["error", `The run crashed. The run ended without a trace. Reported by the code: “${said}”`]);
  const long = { status: "crashed", error: { message: "m", reported: "x".repeat(1000) } };
  assert.ok(runSummary(long, 0)[1].endsWith(`“${"x".repeat(300)}…”`));
});
