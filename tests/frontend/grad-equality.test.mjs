// The page's "same gradient" rule agrees with the server's on the shared case table.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as rule from "../../frontend/grad-equality.js";

const table = JSON.parse(readFileSync(new URL("./same_grad_cases.json", import.meta.url), "utf8"));

for (const c of table.cases) {
  test(`same grad: ${c.why}`, () => {
    assert.equal(rule.sameGrad(c.a, c.b, rule[c.tolerance]), c.same);
    assert.equal(rule.sameGrad(c.b, c.a, rule[c.tolerance]), c.same, "symmetric");
  });
}
