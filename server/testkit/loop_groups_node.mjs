// frontend/model.js's groups on a trace tests/trace/test_loop_groups.py writes to stdin (JSON):
// answers, on stdout, each group (id, kind, label, iteration, parent, its nodes' ids, size).
import { readFileSync } from "node:fs";
import { buildModel } from "../../frontend/model.js";

const model = buildModel(JSON.parse(readFileSync(0, "utf8")));
const groups = [...model.groups.values()].map((g) => ({
  id: g.id, kind: g.kind, label: g.label, iteration: g.iteration ?? null, parent: g.parent, module: g.module,
  nodes: g.nodes, size: g.size,
}));
process.stdout.write(JSON.stringify({ groups, rootGroups: model.rootGroups }));
