"""The C passes (tracer/_nodes.c) record exactly what their Python twins (passes.py) record.

Every trace is made twice, once per reader, and the two must serialise to the same
bytes: the Python reader is the reference the rest of the suite checks against plain
PyTorch, so agreement carries those checks over to the reader actually in use.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

import orjson
import pytest
from gradstep.tracer import graph, record
from gradstep.tracer.limits import Limits
from hypothesis import given
from test_tracer_properties import SETTINGS, programs

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "snippets").glob("*.py")) + sorted((ROOT / "tests" / "cases").glob("*.py"))

# Saved values of every kind the reader handles: tensors and parameters, sizes, scalars,
# lists of tensors (foreach ops, index), a custom Function's saved_tensors, a saved
# tensor modified in place on the line that saved it, a node freed before it is seen.
ODD_SAVES = """
import torch
from torch import nn
torch.manual_seed(0)
x = torch.randn(3, 4, requires_grad=True)
w = nn.Parameter(torch.randn(4, 2))
idx = torch.tensor([0, 2])
y = (x @ w).relu()[idx]
z = torch.cat([x, x * 2], dim=0).view(2, 12).pow(3).sum(dim=1)
ys = torch._foreach_mul([x, x.exp()], 2.0)
s = torch.stack(ys).mean()

class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        ctx.save_for_backward(t)
        ctx.k = 2
        return t * t

    @staticmethod
    def backward(ctx, g):
        (t,) = ctx.saved_tensors
        return 2 * t * g

q = Square.apply(x).sum()
e = x.exp().add_(1)
lost = (x.sin() * 3).sum()
lost.backward()
total = y.sum() + z.sum() + s + q + lost.detach()
total.backward(retain_graph=True)
try:
    e.sum().backward()
except RuntimeError as err:
    print(err)
"""

TRANSFORMER = """
import torch
from torch import nn
torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.1, batch_first=True)
model = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
out = model(torch.randn(2, 5, 16))
loss = out.pow(2).mean()
loss.backward(retain_graph=True)
loss.backward()
"""

needs_native = pytest.mark.skipif(graph._nodes is None, reason="the C reader was not built")


@pytest.mark.skipif(not os.environ.get("CI"), reason="a machine without a compiler may lack it")
def test_the_c_reader_is_built_where_ci_installs():
    assert graph._nodes is not None, "make install did not build gradstep/tracer/_nodes.c"


def _recorded(code: str, limits: Limits | None = None) -> bytes:
    trace = record(code, limits)
    # torch warns some things once per process (create_graph's reference cycle): the
    # second run of a snippet here would miss it, whichever reader it used.
    trace.pop("warnings")
    for step in trace["steps"]:
        step.pop("warnings")
    return orjson.dumps(trace)


def _both(code: str, monkeypatch, limits: Limits | None = None) -> tuple[bytes, bytes]:
    native = _recorded(code, limits)
    with monkeypatch.context() as m:
        m.setattr(graph, "_nodes", None)
        python = _recorded(code, limits)
    return native, python


@needs_native
@pytest.mark.parametrize("path", SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_same_trace_for_every_snippet_and_case(path, monkeypatch):
    native, python = _both(path.read_text(), monkeypatch)
    assert native == python


@needs_native
@pytest.mark.parametrize("code", [ODD_SAVES, TRANSFORMER], ids=["odd_saves", "transformer"])
def test_same_trace_for_every_kind_of_saved_value(code, monkeypatch):
    native, python = _both(code, monkeypatch)
    trace = orjson.loads(native)
    assert trace["status"] == "ok"
    assert native == python


@needs_native
def test_odd_saves_reach_every_branch_of_the_reader(monkeypatch):
    nodes = orjson.loads(_both(ODD_SAVES, monkeypatch)[0])["nodes"]
    kinds = {s["kind"] for n in nodes for s in n["saved"]}
    assert {"tensor", "tensors", "value"} <= kinds
    assert any("of" in s for n in nodes for s in n["saved"])  # a saved tensor named by the snippet
    assert any(s["kind"] == "tensor" and "shape" not in s for n in nodes for s in n["saved"])  # unreadable
    assert any(n["op"] == "SquareBackward" for n in nodes)


# Saved values that are equal as Python keys but not as values: the C reader shares one record
# between equal saved values, and must keep these apart.
LOOKALIKES = """
import torch
x = torch.randn(3, requires_grad=True)
ys = [x.pow(2), x.pow(2.0), x.pow(0.0), x.pow(-0.0), x.pow(True), x.pow(2), x.pow(1)]
"""


@needs_native
def test_equal_saved_values_share_a_record_but_lookalikes_stay_apart(monkeypatch):
    native, python = _both(LOOKALIKES, monkeypatch)
    assert native == python
    ns: dict = {}
    exec(LOOKALIKES, ns)  # plain torch: what each pow node saved, and as which type
    plain = [y.grad_fn._saved_exponent for y in ns["ys"]]
    trace = record(LOOKALIKES)
    saved = [
        next(s for s in n["saved"] if s["name"] == "exponent")
        for n in trace["nodes"]
        if n["op"] == "PowBackward0"
    ]
    got = [s["value"] for s in saved]
    assert [(type(v), repr(v)) for v in got] == [(type(v), repr(v)) for v in plain]
    assert orjson.dumps(got) == orjson.dumps(plain)  # 0.0 and -0.0 print apart
    assert saved[0] is saved[5]  # the two x.pow(2): one record
    assert len({id(s) for s in saved}) == 6


@needs_native
def test_same_trace_when_the_node_cap_is_hit(monkeypatch):
    native, python = _both(TRANSFORMER, monkeypatch, Limits(max_nodes=37))
    trace = orjson.loads(native)
    assert "nodes" in trace["truncated"] and len(trace["nodes"]) == 37
    assert native == python


@needs_native
@SETTINGS
@given(code=programs())
def test_same_trace_for_random_graphs(code):
    native = _recorded(code)
    saved, graph._nodes = graph._nodes, None
    try:
        python = _recorded(code)
    finally:
        graph._nodes = saved
    assert native == python


@needs_native
def test_plain_trace_data_is_taken_out_of_the_garbage_collectors_sight():
    step = {"nodes": [{"id": 1, "saved": [{"shape": [2, 3]}]}], "edges": [[1, 0]], "t": (1, "a")}
    assert gc.is_tracked(step["nodes"])
    assert graph._nodes.untrack(step) is True
    assert not any(map(gc.is_tracked, (step, step["nodes"], step["nodes"][0]["saved"], step["edges"][0])))


@needs_native
def test_a_container_holding_a_live_object_or_a_cycle_stays_tracked():
    class Live:
        pass

    holder = {"fine": [1, 2], "live": [Live()]}
    cycle: list = []
    cycle.append(cycle)
    assert graph._nodes.untrack(holder) is False
    assert gc.is_tracked(holder) and gc.is_tracked(holder["live"]) and not gc.is_tracked(holder["fine"])
    assert graph._nodes.untrack(cycle) is False
    assert gc.is_tracked(cycle)


@needs_native
def test_recorded_steps_and_nodes_are_untracked():
    trace = record(TRANSFORMER)
    assert not any(gc.is_tracked(step) for step in trace["steps"])
    assert not any(gc.is_tracked(node) for node in trace["nodes"])
