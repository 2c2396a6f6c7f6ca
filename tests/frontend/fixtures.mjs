// Traces shared by the front-end unit tests.
import { readFileSync } from "node:fs";
import { rowsOf } from "../../frontend/columns.js";

// The example of docs/trace-format.md (x**7, backward with retain_graph, then without), as rows:
// example_trace.json is what `gradstep trace` prints for it, written with the docs by
// `make schema` (tests/trace/trace_copies.py) and checked against the tracer there.
export const X7 = rowsOf(JSON.parse(readFileSync(new URL("./example_trace.json", import.meta.url), "utf8")));
