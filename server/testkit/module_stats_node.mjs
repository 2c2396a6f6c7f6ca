// frontend/module-stats.js on a trace tests/trace/test_module_stats.py writes to stdin (JSON):
// answers, on stdout, each module's stats at each step, as plain objects.
import { readFileSync } from "node:fs";
import { buildModel } from "../../frontend/model.js";
import { moduleStats } from "../../frontend/module-stats.js";

const trace = JSON.parse(readFileSync(0, "utf8"));
const model = buildModel(trace);
const answers = model.steps.map((_, i) =>
  Object.fromEntries([...moduleStats(model, i)].map(([path, m]) => [path, { ...m, group: undefined }])),
);
process.stdout.write(JSON.stringify(answers));
