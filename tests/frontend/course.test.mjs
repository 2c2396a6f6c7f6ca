// Every curated snippet has its place in the picker's course (none falls into "More examples").
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { COURSE } from "../../frontend/examples.js";

test("every snippet in snippets/ is listed once in the course", () => {
  const files = readdirSync(new URL("../../snippets/", import.meta.url))
    .filter((f) => f.endsWith(".py"))
    .map((f) => f.slice(0, -3))
    .sort();
  const listed = COURSE.flatMap(([, names]) => names);
  assert.equal(new Set(listed).size, listed.length, "listed twice");
  assert.deepEqual([...listed].sort(), files);
});
