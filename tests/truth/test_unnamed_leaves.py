"""Every tensor that can hold a .grad and is alive is listed with its real .grad, named or not.

A rebound name (`w = w - 0.1 * w.grad`, `w = w.detach().requires_grad_()`), a model rebuilt while
an old graph lives, an optimizer holding parameters no name reaches: the trace's last step lists
each leaf alive at the end of a plain torch run of the same code, with the .grad torch left in it,
under its name or, unnamed, under the label the trace format documents (the name and line that
first bound it, with the iteration when that line bound several).

The plain run knows its bindings on its own: a line tracer notes, before each line, the tensors
its namespace holds that it had not seen, as bound by the line that ran before.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from gradstep.narrate import narrate
from gradstep.tracer import record
from testkit import truth
from testkit.learner_code import REBOUND_LEAF_LOOP

ISSUE = REBOUND_LEAF_LOOP

# the same rebinding that runs to its end: every backward reaches the line-2 leaf
REBOUND_CHAIN = """\
import torch
w = torch.randn(3, requires_grad=True)
x = torch.tensor([1., 2., 3.])
for epoch in range(3):
    y = (w * x).sum()
    y.backward(retain_graph=True)
    w = w * 0.9
z = (w * x).sum()
z.backward()
"""

# each iteration's leaf is kept alive by the loss graphs the list holds
DETACH_LOOP = """\
import torch
w = torch.randn(3, requires_grad=True)
losses = []
for step in range(3):
    loss = (w ** 2).sum()
    loss.backward(retain_graph=True)
    losses.append(loss)
    w = w.detach().requires_grad_()
total = sum(losses)
total.backward()
"""

RNN_DETACH = """\
import torch
rnn = torch.nn.RNNCell(3, 4)
h = torch.zeros(1, 4)
xs = torch.randn(6, 1, 3)
for t in range(6):
    h = rnn(xs[t], h)
    if t % 2 == 1:
        loss = h.pow(2).sum()
        loss.backward()
        h = h.detach()
"""

DATA_ASSIGN = """\
import torch
w = torch.randn(3, requires_grad=True)
for i in range(3):
    loss = (w * w).sum()
    loss.backward()
    w.data = w.data - 0.1 * w.grad
loss = (w * w).sum()
loss.backward()
"""

MODEL_REBUILT = """\
import torch
losses = []
for i in range(3):
    model = torch.nn.Linear(2, 1)
    loss = model(torch.ones(1, 2) * (i + 1)).sum()
    losses.append(loss)
total = sum(losses)
total.backward()
"""

OPTIMIZER_HOLDS = """\
import torch
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loss = model(torch.ones(1, 2)).sum()
loss.backward()
model = torch.nn.Linear(2, 1)
del loss
out = model(torch.ones(1, 2)).sum()
out.backward()
"""

CURATED = (Path(__file__).resolve().parents[2] / "snippets" / "rebound_leaf_keeps_grad.py").read_text()

CASES = {
    "issue_rebinding": ISSUE,
    "curated_snippet": CURATED,
    "rebound_chain": REBOUND_CHAIN,
    "detach_loop": DETACH_LOOP,
    "rnn_detach": RNN_DETACH,
    "data_assign": DATA_ASSIGN,
    "model_rebuilt": MODEL_REBUILT,
    "optimizer_holds": OPTIMIZER_HOLDS,
}


class _Bindings:
    """The plain run's own record of which name and line first bound each tensor."""

    def __init__(self) -> None:
        self.first: dict[int, tuple[torch.Tensor, str, int, int]] = {}  # strong refs: ids stay unique
        self.counts: Counter[tuple[str, int]] = Counter()
        self.prev: dict[int, int] = {}  # id(frame) -> the line it ran last

    def note(self, frame: Any) -> None:
        line = self.prev.get(id(frame))
        if line is None:
            return
        for name, value in list(frame.f_locals.items()):
            if isinstance(value, torch.Tensor):
                self._bind(value, name, line)
            elif isinstance(value, torch.nn.Module):
                for qual, p in value.named_parameters():
                    self._bind(p, f"{name}.{qual}", line)

    def _bind(self, t: torch.Tensor, name: str, line: int) -> None:
        if id(t) not in self.first:
            self.counts[(name, line)] += 1
            self.first[id(t)] = (t, name, line, self.counts[(name, line)])

    def trace(self, frame: Any, event: str, arg: Any):
        if frame.f_code.co_filename != truth.SNIPPET:
            return None
        if event == "line":
            self.note(frame)
            self.prev[id(frame)] = frame.f_lineno
        return self.trace

    def label(self, t: torch.Tensor) -> str:
        _, name, line, k = self.first[id(t)]
        return (
            f"{name} (line {line}, iteration {k})"
            if self.counts[(name, line)] > 1
            else f"{name} (line {line})"
        )


def _alive_leaves(globs: dict) -> tuple[dict, list[torch.Tensor]]:
    """The named tensors, and every leaf that can hold a .grad a graph of theirs or an optimizer holds."""
    named = truth.named_tensors_in(globs)
    held: dict[int, torch.Tensor] = {}
    stack = [t.grad_fn for t, _ in named.values() if t.grad_fn is not None]
    seen: set = set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable"):
            held[id(node.variable)] = node.variable
        stack.extend(child for child, _ in node.next_functions if child is not None)
    for value in globs.values():
        if isinstance(value, torch.optim.Optimizer):
            for group in value.param_groups:
                for p in group["params"]:
                    held[id(p)] = p
    unnamed = [t for key, t in held.items() if key not in named and t.requires_grad]
    return named, unnamed


def _plain(code: str) -> tuple[dict, list[torch.Tensor], _Bindings]:
    torch.manual_seed(0)
    globs: dict[str, Any] = {"__name__": "__main__"}
    bindings = _Bindings()
    compiled = compile(code, truth.SNIPPET, "exec")
    sys.settrace(bindings.trace)
    try:
        exec(compiled, globs)
    except Exception:  # noqa: BLE001 - the state at the failure is what the trace ends with
        pass
    finally:
        sys.settrace(None)
    return globs, *_alive_leaves(globs), bindings  # type: ignore[return-value]


def _traced(code: str) -> dict:
    torch.manual_seed(0)
    return record(code)


@pytest.mark.parametrize("name", CASES)
def test_every_leaf_alive_at_the_end_has_the_grad_torch_left(name):
    code = CASES[name]
    trace = _traced(code)
    _globs, named, unnamed, bindings = _plain(code)
    last = {t["name"]: t for t in trace["steps"][-1]["tensors"]}
    problems = []
    for t, names in named.values():
        if not (t.requires_grad and t.is_leaf):
            continue
        listed = [last[n] for n in names if n in last]
        if len(listed) != 1:
            problems.append(f"{'/'.join(sorted(names))} listed {len(listed)} times")
            continue
        if m := truth.grad_mismatch(t.grad, listed[0].get("grad")):
            problems.append(f"{'/'.join(sorted(names))}: {m}")
    for t in unnamed:
        label = bindings.label(t)
        rec = last.get(label)
        if rec is None:
            problems.append(f"{label} not listed (listed: {sorted(last)})")
            continue
        if not rec.get("unnamed"):
            problems.append(f"{label} not marked unnamed")
        if m := truth.grad_mismatch(t.grad, rec.get("grad")):
            problems.append(f"{label}: {m}")
    leaves = [r for r in last.values() if r["is_leaf"] and r["requires_grad"]]
    expected = sum(1 for t, _ in named.values() if t.requires_grad and t.is_leaf) + len(unnamed)
    if len(leaves) != expected:
        problems.append(f"{len(leaves)} leaves listed, {expected} alive in torch: {sorted(last)}")
    assert not problems, problems


@pytest.mark.parametrize("name", CASES)
def test_every_listed_tensor_has_a_name_of_its_own_at_each_step(name):
    trace = _traced(CASES[name])
    for step in trace["steps"]:
        names = [t["name"] for t in step["tensors"]]
        assert len(names) == len(set(names)), (step["index"], names)


@pytest.mark.parametrize("name", CASES)
def test_an_unnamed_tensor_keeps_its_label_and_the_label_its_tensor(name):
    trace = _traced(CASES[name])
    label_of_node: dict[int, str] = {}
    node_of_label: dict[str, int] = {}
    for step in trace["steps"]:
        for t in step["tensors"]:
            if t.get("unnamed") and t.get("node") is not None:
                assert label_of_node.setdefault(t["node"], t["name"]) == t["name"], step["index"]
                assert node_of_label.setdefault(t["name"], t["node"]) == t["node"], step["index"]


def test_a_rebound_name_labels_its_old_leaf_by_the_line_that_bound_it():
    trace = _traced(ISSUE)
    backwards = [s for s in trace["steps"] if s["kind"] == "backward"]
    second = {t["name"]: t for t in backwards[1]["tensors"]}
    assert "w (line 2)" in second and second["w (line 2)"]["was"] == "w"


def test_the_old_leafs_accumulategrad_node_carries_its_label():
    trace = _traced(ISSUE)
    last = trace["steps"][-1]
    leaf = next(t for t in last["tensors"] if t["name"] == "w (line 2)")
    state = next(s for s in last["nodes"] if s["id"] == leaf["node"])
    assert trace["nodes"][leaf["node"]]["op"] == "AccumulateGrad"
    assert state["vars"] == ["w (line 2)"]


def test_the_curated_snippet_shows_the_old_leaf_accumulating_at_its_second_backward():
    trace = _traced(CURATED)
    second = [s for s in trace["steps"] if s["kind"] == "backward"][1]
    old = next(t for t in second["tensors"] if t["name"] == "w (line 17)")
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    x = torch.tensor([1.0, 2.0, 3.0])
    (w * x).sum().backward()
    (((w - 0.1 * w.grad) * x).sum()).backward()
    assert truth.grad_mismatch(w.grad, old["grad"]) is None


def test_a_loop_rebinding_a_leaf_labels_each_old_one_by_its_iteration():
    trace = _traced(DETACH_LOOP)
    names = {t["name"] for t in trace["steps"][-1]["tensors"]}
    assert {"w (line 2)", "w (line 8, iteration 1)", "w (line 8, iteration 2)"} <= names


def test_a_parameter_only_an_optimizer_holds_is_listed():
    code = """\
import torch
opt = torch.optim.SGD([torch.randn(2, requires_grad=True)], lr=0.1)
x = torch.ones(2, requires_grad=True)
y = (x * opt.param_groups[0]['params'][0]).sum()
y.backward()
"""
    torch.manual_seed(0)
    trace = record(code)
    torch.manual_seed(0)
    globs: dict = {"__name__": "__main__"}
    exec(compile(code, truth.SNIPPET, "exec"), globs)
    last = {t["name"]: t for t in trace["steps"][-1]["tensors"]}
    rec = last["opt.param_groups[0]['params'][0]"]
    assert rec["unnamed"]
    assert truth.grad_mismatch(globs["opt"].param_groups[0]["params"][0].grad, rec["grad"]) is None


def test_narration_says_the_name_now_names_a_non_leaf_and_how_the_leaf_is_shown():
    trace = narrate(_traced(ISSUE))
    renamed = next(s for s in trace["steps"] if s["kind"] == "forward" and s["line"] == 8)
    sub = next(n["id"] for n in trace["nodes"] if n["op"] == "SubBackward0")
    assert "`w` now names a non-leaf, the output of SubBackward0" in renamed["explanation"]
    text = renamed["explanation"]
    assert "the leaf it named is still alive and is shown as w (line 2):" in text
    start = text.index("shown as w (line 2)") + len("shown as ")
    assert {
        "start": start,
        "end": start + len("w (line 2)"),
        "node": None,
        "tensor": "w (line 2)",
    } in renamed["links"]
    start = renamed["explanation"].index("SubBackward0;")
    assert {"start": start, "end": start + len("SubBackward0"), "node": sub, "tensor": None} in renamed[
        "links"
    ]


def test_backward_narration_writes_of_the_old_leafs_grad_accumulating():
    trace = narrate(_traced(ISSUE))
    second = [s for s in trace["steps"] if s["kind"] == "backward"][1]
    assert "w (line 2)'s .grad went from [1., 2., 3.] to [2., 4., 6.]" in second["explanation"]
    assert "AccumulateGrad (w (line 2))" in second["explanation"]


def test_narration_says_an_optimizer_holds_a_parameter_no_graph_and_no_name_reaches():
    trace = narrate(_traced(OPTIMIZER_HOLDS))
    rebuilt = next(s for s in trace["steps"] if s["kind"] == "forward" and s["line"] == 8)
    assert "shown as model.weight (line 2): an optimizer holds it" in rebuilt["explanation"]


@pytest.mark.parametrize("name", CASES)
def test_the_python_passes_list_the_unnamed_tensors_as_the_c_ones_do(name, monkeypatch):
    from gradstep.tracer import graph

    native = _traced(CASES[name])
    with monkeypatch.context() as m:
        m.setattr(graph, "_nodes", None)
        python = _traced(CASES[name])
    assert [s["tensors"] for s in native["steps"]] == [s["tensors"] for s in python["steps"]]
