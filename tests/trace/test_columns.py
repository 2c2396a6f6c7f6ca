"""Version 4's columns hold exactly the rows the tracer recorded: every snippet's and test case's
trace, packed to the wire's JSON and read back (gradstep.columns), is the recorded trace, and the
edges a reader derives are the ones the tracer recorded for each step."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import torch
from gradstep.columns import NODE_STATES, NODES, TENSORS, Table, pack, rows_of, unpack, wire_of
from gradstep.tracer import record

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "snippets").glob("*.py")) + sorted((ROOT / "tests" / "cases").glob("*.py"))


def _without_defaults(rows: list[dict], table: Table) -> list[dict]:
    """Rows as a reader sees them: a field at its default says nothing more than its absence."""

    def at_default(name: str, value) -> bool:
        return (
            name in table.defaults
            and value == table.defaults[name]
            and type(value) is type(table.defaults[name])
        )

    return [{k: v for k, v in row.items() if not at_default(k, v)} for row in rows]


def _as_read(trace: dict) -> dict:
    trace = orjson.loads(orjson.dumps(trace))
    trace["nodes"] = _without_defaults(trace.get("nodes") or [], NODES)
    for step in trace.get("steps") or []:
        step["nodes"] = _without_defaults(step.get("nodes") or [], NODE_STATES)
        step["tensors"] = _without_defaults(step.get("tensors") or [], TENSORS)
        step["edges"] = [list(edge) for edge in step.get("edges") or []]
    return trace


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.stem}" for p in FILES])
def test_a_recorded_trace_packed_and_read_back_is_the_recorded_trace(path: Path):
    torch.manual_seed(0)
    recorded = record(path.read_text())
    wire = orjson.loads(orjson.dumps(pack(recorded)))
    assert isinstance(wire["nodes"], dict) and all("edges" not in step for step in wire["steps"])
    assert _as_read(unpack(wire)) == _as_read(recorded)  # edges included: derived, as recorded


def test_rows_of_and_wire_of_take_either_form():
    recorded = record("import torch\nx = torch.ones(2, requires_grad=True)\n(x * x).sum().backward()\n")
    wire = pack(recorded)
    assert rows_of(recorded) is recorded and wire_of(wire) is wire
    assert _as_read(rows_of(wire)) == _as_read(recorded)
    assert wire_of(recorded) == wire
    assert wire["nodes"]["next"][0] == [2, 2]  # x * x: the same input twice, kept twice
