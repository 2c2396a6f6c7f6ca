"""A failure of the tracer degrades one node, tensor or step, never the run.

Each pass of a snapshot fails in turn (the C reader's, then its Python twin's): the trace
goes on to the end and agrees with plain PyTorch on every call, and says what it could not
record. Nodes built under saved-tensor hooks are shown as packed, never unpacked.
"""

from __future__ import annotations

import re
import types

import pytest
import torch
from gradstep.pipeline import explained
from gradstep.tracer import graph, passes, record
from testkit import truth

# A shared trunk, a retained call, a call through the freed graph: every pass has work.
CODE = """
import torch
torch.manual_seed(0)
x = torch.randn(3, requires_grad=True)
w = torch.randn(3, requires_grad=True)
h = (x * w).tanh()
a = h.sum()
b = (h ** 2).mean()
a.backward(retain_graph=True)
b.backward()
try:
    a.backward()
except RuntimeError as e:
    print("failed:", str(e)[:40])
print(x.grad, w.grad)
"""

C_PASSES = (*passes.NAMES, *passes.GRAPH)


def _failing(module: types.ModuleType | types.SimpleNamespace, name: str) -> types.SimpleNamespace:
    """``module`` with ``name`` raising, as a tracer bug or an unexpected tensor would."""
    attrs = {k: getattr(module, k) for k in dir(module) if not k.startswith("__")}

    def broken(*args, **kwargs):
        raise ValueError(f"injected failure in {name}")

    attrs[name] = broken
    return types.SimpleNamespace(**attrs)


def _agrees_with_plain(trace: dict) -> None:
    plain = truth.run_plain(CODE, seed=0)
    problems = (
        truth.mismatches(trace, plain)
        + truth.compare_order(trace, plain)
        + truth.compare_failed(trace, plain)
    )
    assert not problems, "\n".join(problems)
    assert trace["stdout"] == plain.stdout
    assert not any(n.startswith("Tracing stopped") for n in trace["notes"])


@pytest.mark.skipif(graph._nodes is None, reason="the C reader was not built")
@pytest.mark.parametrize("name", C_PASSES)
def test_a_failing_c_pass_is_redone_by_its_python_twin(name, monkeypatch):
    expected = record(CODE)
    monkeypatch.setattr(graph, "_nodes", _failing(graph._nodes, name))
    trace = record(CODE)
    _agrees_with_plain(trace)
    assert trace["steps"] == expected["steps"]
    assert trace["nodes"] == expected["nodes"]


@pytest.mark.parametrize("name", passes.NAMES)
def test_a_pass_failing_at_one_step_costs_that_step_only(name, monkeypatch):
    """The Python twin itself fails once (at the first step): later steps and calls are whole."""
    real = getattr(passes.PYTHON, name)
    calls = {"n": 0}

    def fails_once(*args):
        calls["n"] += 1
        if calls["n"] == 1:
            raise ValueError(f"injected failure in {name}")
        return real(*args)

    monkeypatch.setattr(graph, "_nodes", None)
    monkeypatch.setattr(passes, "PYTHON", types.SimpleNamespace(**{**vars(passes.PYTHON), name: fails_once}))
    trace = record(CODE)
    assert calls["n"] > 1
    _agrees_with_plain(trace)
    assert any(f"injected failure in {name}" in note for note in trace["notes"])


def test_a_node_that_cannot_be_read_is_kept_and_says_why(monkeypatch):
    """Reading TanhBackward0's saved values fails: that node says so, everything else is traced."""
    real = graph._type_slots

    def slots(t):
        if t.__name__ == "TanhBackward0":
            raise ValueError("injected: this node cannot be described")
        return real(t)

    monkeypatch.setattr(graph, "_nodes", None)
    monkeypatch.setattr(graph, "_type_slots", slots)
    trace = record(CODE)
    bad = [n for n in trace["nodes"] if n.get("unreadable")]
    assert [n["op"] for n in bad] == ["TanhBackward0"]
    assert "cannot be described" in bad[0]["unreadable"]
    assert trace["status"] == "ok"
    plain = truth.run_plain(CODE, seed=0)
    assert not truth.compare_grads(trace, plain) and not truth.compare_calls(trace, plain)


HOOKED = """
import torch
torch.manual_seed(0)
x = torch.randn(3, requires_grad=True)
def pack(t):
    print("pack", tuple(t.shape))
    return t.clone()
def unpack(t):
    print("unpack", tuple(t.shape))
    return t
with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
    y = (x * x).sin()
z = y.sum()
z.backward()
print(x.grad)
"""


def test_saved_tensor_hooks_run_only_when_torch_runs_them():
    """The tracer reads packed values through the raw handle: unpack runs in backward only."""
    trace = record(HOOKED)
    plain = truth.run_plain(HOOKED, seed=0)
    assert trace["stdout"] == plain.stdout
    assert not truth.mismatches(trace, plain)
    saved = [s for n in trace["nodes"] for s in n["saved"] if s["kind"] == "tensor"]
    assert saved and all(s["packed"] == "tensor on cpu" for s in saved)
    ns: dict = {}
    torch.manual_seed(0)
    exec(compile("import torch\nx = torch.randn(3, requires_grad=True)", "<snippet>", "exec"), ns)
    assert all(s["bytes"] == ns["x"].untyped_storage().nbytes() for s in saved)  # each pack is a clone of 3


CHECKPOINT = """
import torch
from torch.utils.checkpoint import checkpoint
torch.manual_seed(0)
w = torch.randn(3, 3, requires_grad=True)
x = torch.randn(2, 3, requires_grad=True)
def block(a):
    return torch.tanh(a @ w).sin()
y = checkpoint(block, x, use_reentrant=False)
loss = y.sum()
loss.backward()
print(w.grad.shape)
"""


def test_checkpointed_nodes_show_their_placeholders_and_trace_to_the_end():
    trace = record(CHECKPOINT)
    plain = truth.run_plain(CHECKPOINT, seed=0)
    assert not truth.mismatches(trace, plain)
    assert trace["notes"] == []
    packed = {s["packed"] for n in trace["nodes"] for s in n["saved"] if s.get("packed")}
    assert packed == {"_Holder"}  # the checkpoint keeps a placeholder, and recomputes in backward
    tanh = next(n for n in trace["nodes"] if n["op"] == "TanhBackward0")
    last = trace["steps"][-1]["nodes"]
    assert next(s for s in last if s["id"] == tanh["id"]).get("freed") is True


def test_a_checkpoint_recomputing_its_forward_in_backward_is_shown():
    ns: dict = {}
    head, call = CHECKPOINT.split("loss.backward()")
    exec(compile(head, "<snippet>", "exec"), ns)
    before = torch._C._autograd._get_sequence_nr()
    ns["loss"].backward()
    rebuilt = torch._C._autograd._get_sequence_nr() - before  # nodes plain torch built in backward
    step = truth.call_steps(explained(CHECKPOINT))[0]
    assert rebuilt > 0 and step["rebuilt"] == rebuilt
    assert step["ran_lines"] == [CHECKPOINT.splitlines().index("    return torch.tanh(a @ w).sin()") + 1]
    assert "recomputes the forward" in step["explanation"]


def test_torch_autograd_grad_over_a_dict_of_parameters():
    code = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(3, 2)
loss = model(torch.randn(4, 3)).pow(2).sum()
grads = torch.autograd.grad(loss, dict(model.named_parameters()))
print(sorted(grads))
"""
    trace = record(code)
    plain = truth.run_plain(code, seed=0)
    assert not truth.mismatches(trace, plain) and not truth.compare_returned(trace, plain)
    assert trace["steps"][-1]["inputs"] == ["model.weight", "model.bias"]


def test_parameters_given_as_a_generator_reach_torch_whole():
    code = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(3, 2)
loss = model(torch.randn(4, 3)).pow(2).sum()
loss.backward(inputs=model.parameters())
print(model.weight.grad.sum(), model.bias.grad.sum())
"""
    trace = record(code)
    plain = truth.run_plain(code, seed=0)
    assert not truth.mismatches(trace, plain)
    assert trace["stdout"] == plain.stdout


ANOMALY = """
import torch
x = torch.tensor([0.0, 1.0], requires_grad=True)
with torch.autograd.detect_anomaly():
    y = torch.sqrt(x) * 0
    z = (y - y).sum()
    z.backward()
"""


def test_anomaly_mode_marks_the_node_that_raised_and_not_what_never_ran():
    trace = record(ANOMALY)
    plain = truth.run_plain(ANOMALY, seed=0)
    assert not truth.compare_errors(trace, plain) and not truth.compare_grads(trace, plain)
    step = truth.call_steps(trace)[0]
    ops = {n["id"]: n["op"] for n in trace["nodes"]}
    failed = [s for s in step["nodes"] if s.get("failed")]
    assert [ops[s["id"]] for s in failed] == ["SqrtBackward0"]
    executed = {ops[s["id"]] for s in step["nodes"] if s.get("executed")}
    assert "AccumulateGrad" not in executed  # the engine raised before x's gradient was written
    assert plain.calls[0].grads[frozenset({"x"})] is None


def test_sparse_tensors_are_traced_and_say_their_bytes_cannot_be_counted():
    code = """
import torch
torch.manual_seed(0)
a = torch.randn(3, 3).to_sparse().requires_grad_(True)
b = torch.randn(3, 2, requires_grad=True)
y = torch.sparse.mm(a, b)
y.sum().backward()
print(b.grad.sum())
"""
    trace = record(code)
    plain = truth.run_plain(code, seed=0)
    assert not truth.mismatches(trace, plain)
    assert trace["notes"] == []
    assert trace["stdout"] == plain.stdout


def test_torch_func_transforms_leave_the_rest_of_the_run_traced():
    code = """
import torch
torch.manual_seed(0)
x = torch.randn(3)
def f(t):
    s = t.sin() ** 2
    return s.sum()
g = torch.func.grad(f)(x)
y = torch.randn(3, requires_grad=True)
(y * g).sum().backward()
print(y.grad)
"""
    trace = record(code)
    plain = truth.run_plain(code, seed=0)
    assert not truth.mismatches(trace, plain)
    assert trace["stdout"] == plain.stdout
    assert any("torch.func transform" in n for n in trace["notes"])
    assert not any("could not record" in n for n in trace["notes"])


def test_forward_mode_ad_is_said_not_drawn_and_the_rest_agrees():
    code = """
import torch
import torch.autograd.forward_ad as fwAD
x = torch.tensor([0.5, 1.0], requires_grad=True)
with fwAD.dual_level():
    primal, jvp = fwAD.unpack_dual((fwAD.make_dual(x, torch.ones(2)).sin()).sum())
print(jvp)
x.sin().sum().backward()
"""
    trace = record(code)
    plain = truth.run_plain(code, seed=0)
    assert not truth.mismatches(trace, plain) and trace["stdout"] == plain.stdout
    assert [n for n in trace["notes"] if "forward-mode AD" in n and "Line(s) 5" in n]


def test_a_big_sparse_gradient_has_its_norm_and_no_values():
    code = """
import torch
torch.manual_seed(0)
emb = torch.nn.Embedding(100, 4, sparse=True)
loss = emb(torch.tensor([1, 7, 7, 42])).pow(2).sum()
loss.backward()
"""
    trace = record(code)
    plain = truth.run_plain(code, seed=0)
    assert not truth.mismatches(trace, plain)
    grad = next(t["grad"] for t in trace["steps"][-1]["tensors"] if t["name"] == "emb.weight")
    assert grad["shape"] == [100, 4] and "values" not in grad


def test_anomaly_modes_forward_call_shows_the_snippets_frames_as_a_plain_run_does():
    # Anomaly mode's warning quotes the stack of the forward call that made the failing node. A
    # plain run's stack holds the script's frames; the recorded one has the runner above the
    # snippet, whose frames (gradstep's files and lines) no user wrote. The trace keeps the same
    # snippet frames a plain run's warning names, written as its tracebacks are, and nothing else.
    code = "import torch\ndef f(x):\n    return x.sqrt() * 0\nx = torch.tensor([0.0, 1.0], requires_grad=True)\nwith torch.autograd.detect_anomaly():\n    f(x).sum().backward()\n"
    trace = record(code)
    plain = truth.run_plain(code, seed=0)
    forward = "Traceback of forward call that caused the error:\n"
    (plain_warning,) = [m for m in plain.warnings if forward in m]
    (warning,) = [w["message"] for w in trace["warnings"] if forward in w["message"]]
    plain_lines = [
        (int(n), fn) for n, fn in re.findall(r'File "<snippet>", line (\d+), in (\S+)', plain_warning)
    ]
    assert plain_lines == [(6, "<module>"), (3, "f")]
    assert [(int(n), fn) for n, fn in re.findall(r"^  line (\d+), in (\S+)$", warning, re.M)] == plain_lines
    assert 'File "' not in warning and "gradstep" not in warning
    assert "    return x.sqrt() * 0" in warning.splitlines()  # the line's source, as in a traceback
    head, tail = plain_warning.split(forward)[0], plain_warning.rsplit("\n", 1)[-1]
    assert warning.startswith(head + forward) and warning.endswith(tail)
