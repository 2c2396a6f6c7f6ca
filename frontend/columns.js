// Trace version 4 writes its tables as columns (docs/trace-format.md, "Tables as columns"):
// `trace.nodes`, each step's `nodes` and each step's `tensors` are objects with one list per field,
// which names each field once instead of once per row (the 24-layer trace: 87 KB brotli, not 115),
// and `step.edges` is left out, since a step's added edges are the `next` of the nodes it added.
// Every reader in the front end reads rows, as version 3 wrote them: rowsOf gives them back, so the
// front end reads versions 1-4 alike. The twin of server/gradstep/columns.py `rows_of`.
//
// A row carries only the fields not at their default, as the tracer writes rows: readers apply the
// defaults (`??`), and for some an absent field says more than its default would (a leaf's absent
// `vars` reads as its `tensor`). Rows are new objects; their values are shared with the input, which
// is never changed. Loops run column by column, with no per-row work for a column a table leaves
// out: the 24-layer trace (~1,800 nodes, 4 steps) converts in a few milliseconds.

// Each table's required fields: in every row, copied as is. Every other field has a default that is
// its type's empty value, null, false or [] (docs/trace-format.md; tests/trace/test_trace_copies.py
// holds the schema to that and these lists to the schema), so a row leaves out a value that is
// null, false or [] whatever the field: a field added within version 4 needs no entry here.
const NODE_REQUIRED = new Set(["op", "step"]);
const STATE_REQUIRED = new Set(["id"]);
const TENSOR_REQUIRED = new Set(["name", "shape", "dtype", "requires_grad", "is_leaf"]);

function isDefault(v) {
  return v === undefined || v === null || v === false || (Array.isArray(v) && v.length === 0); // undefined: a short column
}

/** A table's rows: an array as it is (rows already), columns turned into rows, absent: none. */
function tableRows(table, required, countBy, withId) {
  if (Array.isArray(table)) return table;
  if (!table || typeof table !== "object") return [];
  const count = Array.isArray(table[countBy]) ? table[countBy].length : 0;
  const rows = new Array(count);
  for (let i = 0; i < count; i++) rows[i] = withId ? { id: i } : {};
  for (const name of Object.keys(table)) {
    const col = table[name];
    if (!Array.isArray(col) || (withId && name === "id")) continue; // null: all at the default; a node's id is its position
    const n = Math.min(count, col.length);
    if (required.has(name)) {
      for (let i = 0; i < n; i++) if (col[i] !== undefined) rows[i][name] = col[i];
      continue;
    }
    for (let i = 0; i < n; i++) {
      const v = col[i];
      if (!isDefault(v)) rows[i][name] = v;
    }
  }
  return rows;
}

const hasRows = (s) => Array.isArray(s.nodes) && Array.isArray(s.tensors) && Array.isArray(s.edges);

/**
 * Any trace as rows (version 3's layout): a version-4 trace (or any whose `nodes` is an object of
 * columns) with its tables as rows and each step's `edges` derived; one already in rows (versions
 * 1-3, or rowsOf's own result) is returned as it is.
 */
export function rowsOf(trace) {
  if (!trace || typeof trace !== "object") return trace;
  const columnar = (trace.version ?? 1) >= 4 || (trace.nodes != null && !Array.isArray(trace.nodes));
  if (!columnar) return trace;
  const steps = Array.isArray(trace.steps) ? trace.steps : [];
  if (Array.isArray(trace.nodes) && steps.every(hasRows)) return trace;
  const nodes = tableRows(trace.nodes, NODE_REQUIRED, "op", true);
  // The edges each step added: [id, j] for each j in the `next` of the nodes it added, by id.
  const added = new Map();
  for (const n of nodes) {
    const next = n.next;
    if (!next || !next.length) continue;
    let list = added.get(n.step);
    if (!list) added.set(n.step, (list = []));
    for (const j of next) list.push([n.id, j]);
  }
  return {
    ...trace,
    nodes,
    steps: steps.map((s, i) => hasRows(s) ? s : {
      ...s,
      nodes: tableRows(s.nodes, STATE_REQUIRED, "id", false),
      tensors: tableRows(s.tensors, TENSOR_REQUIRED, "name", false),
      edges: Array.isArray(s.edges) ? s.edges : (added.get(s.index ?? i) ?? []),
    }),
  };
}
