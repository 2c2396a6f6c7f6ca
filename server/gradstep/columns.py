"""The trace's tables as columns (trace version 4) and back to rows.

The tracer, narration and the diagnoses work on rows: a dict per node, per node state, per tensor
(``gradstep.trace_dicts``). On the wire (version 4) each of those tables is an object of columns,
one list per field, which names each field once instead of once per row: the 24-layer trace's
brotli encoding is 87 KB instead of 115. ``Step.edges`` is left out too: the edges a step added
are the ``next`` of the nodes it added, so a reader derives them (``added_edges``).

``pack`` is what a producer writes (the sandboxed child, a notebook, an export); ``unpack`` gives
the rows back to the Python that reads a trace from the wire (the check job's rules, tests).
``frontend/columns.js`` is the front end's ``unpack``. A column is left out when no row has the
field (the tracer leaves defaults out of rows); an entry holds the whole value, defaults too.
Packed data shares its lists and dicts with the rows it came from: copy before editing.
"""

from __future__ import annotations

import itertools
import operator

from pydantic import BaseModel

from gradstep.schema import NodeInfo, NodeState, TensorState


class Table:
    """One table's fields in the model's order: ``key`` fields are in every row (and every
    packed table); the others have a default, used where a row or a column leaves them out."""

    def __init__(self, model: type[BaseModel], implicit: str | None = None):
        fields = {name: f for name, f in model.model_fields.items() if name != implicit}
        self.implicit = implicit  # a row's position: not written
        self.key = tuple(name for name, f in fields.items() if f.is_required())
        self.defaults = {
            name: f.get_default(call_default_factory=True)
            for name, f in fields.items()
            if not f.is_required()
        }
        self.known = frozenset(fields) | ({implicit} if implicit else frozenset())

    def pack(self, rows: list[dict]) -> dict[str, list]:
        present = set().union(*rows) if rows else set()
        if not present <= self.known:
            raise ValueError(f"fields no trace has: {sorted(present - self.known)}")
        columns = {name: [row[name] for row in rows] for name in self.key}
        for name, default in self.defaults.items():
            if name in present:
                columns[name] = [row.get(name, default) for row in rows]
        return columns

    def unpack(self, columns: dict[str, list | None]) -> list[dict]:
        """Rows with their key fields and the fields not at their default (as the tracer writes
        them), each a new dict."""
        if not columns:
            return []
        count = len(columns[self.key[0]])
        rows: list[dict] = (
            [{self.implicit: i} for i in range(count)] if self.implicit else [{} for _ in range(count)]
        )
        for name in self.key:
            for row, value in zip(rows, columns[name], strict=True):
                row[name] = value
        for name, default in self.defaults.items():
            column = columns.get(name)
            if column is None:
                continue
            if len(column) != count:
                raise ValueError(f"column {name!r} has {len(column)} rows, not {count}")
            kept = _not_default(column, default)
            if kept is None:  # a default with no quick test: every cell compared
                kept = [i for i, v in enumerate(column) if v != default or type(v) is not type(default)]
            for i in kept:  # most cells hold the default: only the others are visited in Python
                rows[i][name] = column[i]
        return rows


def _not_default(column: list, default: object) -> list[int] | None:
    """The positions in ``column`` whose value is not ``default`` (as ``unpack`` counts it: equal and of
    its type), found in C for the defaults tables have: None, False, an empty list; else None."""
    if default is None or default is False:
        mask = map(operator.is_not, column, itertools.repeat(default))
    elif default == [] and type(default) is list:
        mask = map(len, column)  # the contract made each a list: an empty one is the default
    else:
        return None
    return list(itertools.compress(range(len(column)), mask))


NODES = Table(NodeInfo, implicit="id")
NODE_STATES = Table(NodeState)
TENSORS = Table(TensorState)


def pack(trace: dict) -> dict:
    """``trace`` (rows, as the tracer builds it) as version 4 writes it. Not a copy of what it
    shares with ``trace``."""
    packed = dict(trace)
    if "nodes" in trace:
        packed["nodes"] = NODES.pack(trace["nodes"])
    if "steps" in trace:
        packed["steps"] = [_pack_step(step) for step in trace["steps"]]
    return packed


def _pack_step(step: dict) -> dict:
    packed = {k: v for k, v in step.items() if k != "edges"}
    if "nodes" in step:
        packed["nodes"] = NODE_STATES.pack(step["nodes"])
    if "tensors" in step:
        packed["tensors"] = TENSORS.pack(step["tensors"])
    return packed


def unpack(trace: dict) -> dict:
    """A version-4 trace (parsed, validated) as rows, with each step's ``edges``."""
    rows = dict(trace)
    nodes = NODES.unpack(trace.get("nodes") or {})
    rows["nodes"] = nodes
    edges = added_edges(nodes)
    steps = []
    for step in trace.get("steps") or ():
        step = dict(step, edges=edges.get(step["index"], []))
        for key, table in (("nodes", NODE_STATES), ("tensors", TENSORS)):
            step[key] = table.unpack(step.get(key) or {})
        steps.append(step)
    rows["steps"] = steps
    return rows


def added_edges(nodes: list[dict]) -> dict[int, list[list[int]]]:
    """Each step's added edges, by step index: ``[id, next]`` of its new nodes, in id order."""
    edges: dict[int, list[list[int]]] = {}
    for node in nodes:
        if node.get("next"):
            edges.setdefault(node["step"], []).extend([node["id"], j] for j in node["next"])
    return edges


def rows_of(trace: dict) -> dict:
    """Any trace as rows: a version-4 trace unpacked, one with rows (version 3 and before, or the
    tracer's own dicts) as it is."""
    return unpack(trace) if isinstance(trace.get("nodes"), dict) else trace


def wire_of(trace: dict) -> dict:
    """Any trace as version 4 writes it: rows (the tracer's dicts) packed, a packed one as it is."""
    return pack(trace) if isinstance(trace.get("nodes"), list) else trace
