"""Tracer features checked one at a time against plain PyTorch.

Each test runs a small snippet through ``gradstep.tracer.record`` and runs the
same snippet (or the same statements) under plain torch in this process, then
compares one behaviour: forward steps and their lines, loop folding, names,
module paths, create_graph graphs, dropped nodes and memory, caps, warnings,
stdout, errors, stale saved tensors and saved bytes. Expected values always
come from torch, never from a trace.

The checks that ``tests/truth/test_tracer_truth.py`` already makes on every snippet
(grads, call errors, freed/stale flags, engine order, schema validation) are
not repeated here.
"""

from __future__ import annotations

import ast
import contextlib
import gc
import io
import json
import linecache
import re
import subprocess
import sys
import textwrap
import traceback
import warnings
import weakref
from typing import Any

import pytest
import torch
from gradstep import trace
from gradstep.schema import Trace
from gradstep.tracer import Limits, record
from gradstep.tracer.names import SNIPPET_FILENAME
from testkit import truth
from testkit.torch_print import printed

SNIPPET = "<snippet>"
_seq = torch._C._autograd._get_sequence_nr
_FRAME = re.compile(r'File "<snippet>", line (\d+)')


# ---------------------------------------------------------------- plain torch helpers


def _code(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def _line_of(code: str, fragment: str) -> int:
    """1-based number of the only source line containing ``fragment``."""
    hits = [i for i, src in enumerate(code.splitlines(), 1) if fragment in src]
    assert len(hits) == 1, f"{fragment!r} found on lines {hits}"
    return hits[0]


def _plain(code: str) -> tuple[dict, str]:
    """Run ``code`` under plain torch; return its globals and stdout."""
    globs: dict[str, Any] = {"__name__": "__main__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, SNIPPET, "exec"), globs)
    return globs, out.getvalue()


def _statements(code: str) -> tuple[list[tuple[int, bool, str]], dict]:
    """Run ``code`` one top-level statement at a time under plain torch.

    Returns (line, built autograd nodes, stdout) per statement, and the globals.
    """
    globs: dict[str, Any] = {"__name__": "__main__"}
    out = []
    for stmt in ast.parse(code).body:
        compiled = compile(ast.Module([stmt], type_ignores=[]), SNIPPET, "exec")
        buf = io.StringIO()
        before = _seq()
        with contextlib.redirect_stdout(buf):
            exec(compiled, globs)
        out.append((stmt.lineno, _seq() != before, buf.getvalue()))
    return out, globs


def _reachable(*roots) -> list:
    seen: dict[int, Any] = {}
    stack = [r for r in roots if r is not None]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        stack.extend(n for n, _ in node.next_functions if n is not None)
    return list(seen.values())


def _is_acc(node) -> bool:
    return type(node).__name__ == "AccumulateGrad"


def _roots(globs: dict) -> list:
    return [v.grad_fn for v in globs.values() if isinstance(v, torch.Tensor) and v.grad_fn is not None]


def _leaf_name(globs: dict, leaf: torch.Tensor) -> str | None:
    for k, v in globs.items():
        if v is leaf:
            return k
    return None


def _creation_lines(code: str) -> tuple[dict[int, int], dict[str, int], dict, int]:
    """Line that created each node still reachable from a global at the end, per torch.

    Anomaly mode makes torch store the stack at node creation in
    ``node.metadata["traceback_"]``; the innermost ``<snippet>`` frame is the line.
    Returns {relative seq: line}, {leaf name: line of its AccumulateGrad}, the
    globals, and the sequence number the snippet started at. (Torch reports the
    line of the expression, so snippets checked with it keep statements on one line.)
    """
    globs: dict[str, Any] = {"__name__": "__main__"}
    compiled = compile(code, SNIPPET, "exec")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anomaly mode warns that it is slow
        with torch.autograd.detect_anomaly(check_nan=False), contextlib.redirect_stdout(io.StringIO()):
            base = _seq()
            exec(compiled, globs)
    by_seq: dict[int, int] = {}
    by_leaf: dict[str, int] = {}
    for node in _reachable(*_roots(globs)):
        lines = _FRAME.findall("".join(node.metadata["traceback_"]))
        line = int(lines[-1])
        if _is_acc(node):
            by_leaf[_leaf_name(globs, node.variable)] = line
        else:
            by_seq[node._sequence_nr() - base] = line
    return by_seq, by_leaf, globs, base


def _forward(tr: dict) -> list[dict]:
    return [s for s in tr["steps"] if s["kind"] == "forward"]


def _calls(tr: dict) -> list[dict]:
    return [s for s in tr["steps"] if s["kind"] != "forward"]


def _info(tr: dict) -> dict[int, dict]:
    return {n["id"]: n for n in tr["nodes"]}


def _by_seq(tr: dict) -> dict[int, dict]:
    return {n["seq"]: n for n in tr["nodes"] if n.get("seq") is not None}


def _state(step: dict, nid: int) -> dict | None:
    found = [s for s in step["nodes"] if s["id"] == nid]
    assert len(found) <= 1, f"node {nid} listed {len(found)} times in step {step['index']}"
    return found[0] if found else None


def _tensor(step: dict, name: str) -> dict:
    found = [t for t in step["tensors"] if t["name"] == name]
    assert len(found) == 1, f"tensor {name} listed {len(found)} times in step {step['index']}"
    return found[0]


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-5 * max(abs(a), abs(b)) + 1e-6


# ---------------------------------------------------------------- 1. forward steps

STRAIGHT = _code(
    """
    import torch
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    c = torch.ones(3)
    y = x * 2
    print("y built")
    z = y.exp() + c
    with torch.no_grad():
        q = z * 3
    d = z.detach()
    w = (z * d).sum()
    e = d * 2
    """
)


def test_one_forward_step_per_line_that_builds_nodes():
    stmts, _ = _statements(STRAIGHT)
    building = [line for line, built, _ in stmts if built]
    assert len(building) == 3  # the snippet is what it claims to be: y, z and w lines
    tr = record(STRAIGHT)
    assert tr["status"] == "ok"
    assert [s["line"] for s in _forward(tr)] == building
    assert all(s.get("repeat", 1) == 1 for s in _forward(tr))


def test_lines_that_build_nothing_yield_no_step():
    stmts, _ = _statements(STRAIGHT)
    idle = {line for line, built, _ in stmts if not built}
    idle.add(_line_of(STRAIGHT, "q = z * 3"))  # the no_grad body
    tr = record(STRAIGHT)
    assert not idle & {s["line"] for s in tr["steps"]}


def test_node_line_is_the_line_that_created_it():
    by_seq, by_leaf, _, _ = _creation_lines(STRAIGHT)
    tr = record(STRAIGHT)
    got_seq = {n["seq"]: n["line"] for n in tr["nodes"] if n["op"] != "AccumulateGrad"}
    got_leaf = {n["tensor"]: n["line"] for n in tr["nodes"] if n["op"] == "AccumulateGrad"}
    assert got_seq == by_seq
    assert got_leaf == by_leaf


def test_nodes_built_on_a_function_return_line_appear_in_that_step():
    code = _code(
        """
        import torch
        x = torch.ones(3, requires_grad=True)
        def f(t):
            return t * 2
        y = f(x)
        """
    )
    by_seq, _, _, _ = _creation_lines(code)
    tr = record(code)
    assert set(_by_seq(tr)) == set(by_seq), "nodes built by the snippet are missing from the node table"
    ret = _line_of(code, "return t * 2")
    steps = [s for s in _forward(tr) if s["line"] == ret]
    assert len(steps) == 1
    shown = {_info(tr)[s["id"]]["seq"] for s in steps[0]["nodes"]}
    assert set(by_seq) <= shown, "the step of the return line does not show the nodes that line built"


def test_nodes_built_by_a_while_condition_get_the_while_line():
    code = _code(
        """
        import torch
        x = torch.ones(2, requires_grad=True)
        y = x
        while (c := y.sum()) < 10:
            y = y * 3
        """
    )
    by_seq, _, globs, base = _creation_lines(code)
    cond = globs["c"].grad_fn._sequence_nr() - base  # the last check's sum, kept in c
    assert by_seq[cond] == _line_of(code, "while")
    tr = record(code)
    assert _by_seq(tr)[cond]["line"] == by_seq[cond]


# ---------------------------------------------------------------- 2. loop folding

LOOP = _code(
    """
    import torch
    x = torch.ones(3, requires_grad=True)
    y = x
    for i in range(50):
        y = y * 1.01
    """
)


def test_loop_line_shows_line_repeats_steps_then_one_folded_step():
    line = _line_of(LOOP, "y = y * 1.01")
    runs = 50  # range(50) in LOOP
    shown = Limits().line_repeats
    tr = record(LOOP)
    repeats = [s.get("repeat", 1) for s in _forward(tr) if s["line"] == line]
    assert repeats == [1] * shown + [runs - shown]
    assert {s["line"] for s in tr["steps"]} == {line}


def test_folded_loop_records_every_node_torch_built():
    globs, _ = _plain(LOOP)
    expected = _reachable(globs["y"].grad_fn)
    tr = record(LOOP)
    assert len(tr["nodes"]) == len(expected)
    assert sorted(n["op"] for n in tr["nodes"]) == sorted(type(n).__name__ for n in expected)


# ---------------------------------------------------------------- 3. functions and names

FUNC = _code(
    """
    import torch
    x = torch.tensor([0.5, 1.5], requires_grad=True)
    def f(t):
        u = t.sin() * 3
        return u
    y = x * 2
    z = f(y)
    s = z.sum()
    """
)


def test_nodes_built_inside_a_function_get_the_function_line():
    by_seq, _, globs, base = _creation_lines(FUNC)
    inner = _line_of(FUNC, "u = t.sin() * 3")
    outside = {id(n) for n in _reachable(globs["y"].grad_fn)}
    inside = [n for n in _reachable(globs["z"].grad_fn) if id(n) not in outside]
    inside_seqs = {n._sequence_nr() - base for n in inside}
    assert len(inside_seqs) == 2  # sin and mul
    assert {by_seq[s] for s in inside_seqs} == {inner}  # torch agrees the function line built them
    tr = record(FUNC)
    nodes = _by_seq(tr)
    assert {nodes[s]["line"] for s in inside_seqs} == {inner}


def test_node_vars_name_the_variable_whose_grad_fn_it_is():
    _, _, globs, base = _creation_lines(FUNC)
    tr = record(FUNC)
    last = tr["steps"][-1]
    nodes = _by_seq(tr)
    for var in ("y", "z", "s"):
        node = nodes[globs[var].grad_fn._sequence_nr() - base]
        assert _state(last, node["id"])["vars"] == [var]
    sin = [n for n in _reachable(globs["z"].grad_fn) if type(n).__name__ == "SinBackward0"]
    assert _state(last, nodes[sin[0]._sequence_nr() - base]["id"]).get("vars", []) == []


def test_accumulate_grad_node_carries_the_leaf_name():
    tr = record(FUNC)
    acc = [n for n in tr["nodes"] if n["op"] == "AccumulateGrad"]
    assert [n["tensor"] for n in acc] == ["x"]
    # the name is in the table; per-step vars repeat it only when they differ
    assert _state(tr["steps"][-1], acc[0]["id"]).get("vars", []) == []


def test_accumulate_grad_vars_name_an_aliased_leaf():
    code = "import torch\nx = torch.ones(2, requires_grad=True)\ny = (x * 2).sum()\nalias = x\nz = y * 3\n"
    tr = record(code)
    (acc,) = [n for n in tr["nodes"] if n["op"] == "AccumulateGrad"]
    assert acc["tensor"] == "x"
    assert _state(tr["steps"][-1], acc["id"])["vars"] == ["x", "alias"]


# ---------------------------------------------------------------- 4. module paths

SEQUENTIAL = _code(
    """
    import torch
    import torch.nn as nn
    x = torch.linspace(-1, 1, 6).reshape(2, 3)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    out = model(x)
    """
)

CUSTOM = _code(
    """
    import torch
    import torch.nn as nn
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Linear(3, 2)
        def forward(self, x):
            h = self.enc(x)
            return h.tanh()
    net = Net()
    x = torch.linspace(-1, 1, 6).reshape(2, 3)
    out = net(x)
    loss = out.sum()
    """
)


def test_sequential_nodes_get_their_child_module_path():
    globs, _ = _plain(SEQUENTIAL)
    children = ["model." + n for n, _ in globs["model"].named_children()]
    tr = record(SEQUENTIAL)
    created = [n for n in tr["nodes"] if n["op"] != "AccumulateGrad"]
    assert created
    assert all(n.get("module") in children for n in created), [(n["op"], n.get("module")) for n in created]
    addmm = sorted((n["seq"], n.get("module")) for n in created if n["op"] == "AddmmBackward0")
    assert [m for _, m in addmm] == ["model.0", "model.2"]


def test_parameters_are_named_after_named_parameters():
    globs, _ = _plain(SEQUENTIAL)
    expected = {"model." + n for n, _ in globs["model"].named_parameters()}
    tr = record(SEQUENTIAL)
    names = {t["name"] for t in tr["steps"][-1]["tensors"]}
    assert names == expected


def test_custom_module_submodule_attribute_gets_its_path():
    tr = record(CUSTOM)
    ops = {n["op"]: n.get("module") for n in tr["nodes"] if n["op"] != "AccumulateGrad"}
    assert ops["AddmmBackward0"] == "net.enc"
    assert ops["TanhBackward0"] == "net"
    assert ops["SumBackward0"] is None


def test_a_module_whose_forward_raises_is_left_for_the_nodes_after_it():
    code = _code(
        """
        import torch
        import torch.nn as nn
        class Picky(nn.Module):
            def forward(self, x):
                y = x.exp()
                raise ValueError("no")
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.picky = Picky()
            def forward(self, x):
                try:
                    self.picky(x)
                except ValueError:
                    pass
                return x.sin()
        net = Net()
        x = torch.ones(2, requires_grad=True)
        out = net(x)
        loss = out.sum()
        """
    )
    tr = record(code)
    ops = {n["op"]: n.get("module") for n in tr["nodes"] if n["op"] != "AccumulateGrad"}
    assert tr["status"] == "ok"
    assert ops == {"ExpBackward0": "net.picky", "SinBackward0": "net", "SumBackward0": None}


def test_the_snippets_own_module_hooks_run_as_untraced():
    code = _code(
        """
        import torch
        import torch.nn as nn
        calls = []
        lin = nn.Linear(2, 2)
        lin.register_forward_pre_hook(lambda m, args: calls.append("pre"))
        lin.register_forward_hook(lambda m, args, out: calls.append("post"))
        h = nn.modules.module.register_module_forward_hook(lambda m, args, out: calls.append("global"))
        out = lin(torch.ones(1, 2)).sum()
        h.remove()
        print(calls)
        """
    )
    plain_out = _plain(code)[1]
    tr = record(code)
    assert tr["stdout"] == plain_out == "['pre', 'global', 'post']\n"
    assert {n.get("module") for n in tr["nodes"] if n["op"] == "AddmmBackward0"} == {"lin"}


# ---------------------------------------------------------------- 5. create_graph

CREATE_GRAPH = _code(
    """
    import torch
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = (x ** 3).sum()
    g, = torch.autograd.grad(y, x, create_graph=True)
    """
)


def test_gradient_graph_nodes_are_marked_grad_graph():
    globs, _ = _plain(CREATE_GRAPH)
    forward = {id(n) for n in _reachable(globs["y"].grad_fn)}
    grad_nodes = [n for n in _reachable(globs["g"].grad_fn) if id(n) not in forward]
    assert grad_nodes
    tr = record(CREATE_GRAPH)
    marked = [n for n in tr["nodes"] if n.get("grad_graph")]
    assert sorted(n["op"] for n in marked) == sorted(type(n).__name__ for n in grad_nodes)


def test_forward_nodes_are_not_marked_grad_graph():
    globs, _ = _plain(CREATE_GRAPH)
    forward = _reachable(globs["y"].grad_fn)
    tr = record(CREATE_GRAPH)
    unmarked = [n for n in tr["nodes"] if not n.get("grad_graph")]
    assert sorted(n["op"] for n in unmarked) == sorted(type(n).__name__ for n in forward)


# ---------------------------------------------------------------- 6. dropped nodes and memory

REBUILD = _code(
    """
    import torch
    x = torch.ones(3, requires_grad=True)
    for i in range(5):
        y = (x * (i + 1)).exp().sum()
    """
)


def test_nodes_of_replaced_graphs_are_dropped_once_then_gone():
    tr = record(REBUILD)
    dropped_at: dict[int, list[int]] = {}
    for step in tr["steps"]:
        for st in step["nodes"]:
            if st.get("dropped"):
                dropped_at.setdefault(st["id"], []).append(step["index"])
    assert dropped_at
    for nid, at in dropped_at.items():
        assert len(at) == 1, f"node {nid} dropped in steps {at}"
        later = [s["index"] for s in tr["steps"][at[0] + 1 :] if _state(s, nid) is not None]
        assert not later, f"node {nid} dropped at step {at[0]} but listed again in {later}"


def test_only_the_last_graph_stays_live():
    globs, _ = _plain(REBUILD)
    live_now = _reachable(globs["y"].grad_fn)
    tr = record(REBUILD)
    last = tr["steps"][-1]
    live = [_info(tr)[s["id"]] for s in last["nodes"] if not s.get("dropped")]
    assert sorted(n["op"] for n in live) == sorted(type(n).__name__ for n in live_now)
    dropped_ever = {st["id"] for s in tr["steps"] for st in s["nodes"] if st.get("dropped")}
    assert dropped_ever == {n["id"] for n in tr["nodes"]} - {n["id"] for n in live}


def test_tracing_does_not_keep_a_replaced_graph_alive():
    code = _code(
        """
        import gc
        import weakref
        import torch
        x = torch.ones(3, requires_grad=True)
        h = x.exp()
        y = h.sin().sum()
        r = weakref.ref(h)
        h = None
        gc.collect()
        print("held by its graph:", r() is not None)
        for i in range(5):
            h = (x * (i + 1)).exp()
            y = h.sin().sum()
        gc.collect()
        print("collected:", r() is None)
        """
    )
    _, expected = _plain(code)
    tr = record(code)
    assert tr["stdout"] == expected


def test_tracing_does_not_keep_a_deleted_graph_alive():
    code = _code(
        """
        import gc
        import weakref
        import torch
        x = torch.ones(3, requires_grad=True)
        h = x.exp()
        y = h.sin().sum()
        r = weakref.ref(h)
        del h, y
        gc.collect()
        print("collected:", r() is None)
        """
    )
    _, expected = _plain(code)
    tr = record(code)
    assert tr["stdout"] == expected


def test_tracing_does_not_keep_a_deleted_models_parameters_alive():
    code = _code(
        """
        import weakref
        import torch
        from torch import nn
        models = []
        for i in range(3):
            m = nn.Linear(3, 3)
            out = m(torch.ones(1, 3)).sum()
            models.append(weakref.ref(m.weight))
        del m, out
        print("freed:", [r() is None for r in models])
        """
    )
    _, expected = _plain(code)
    assert expected == "freed: [True, True, True]\n"
    assert record(code)["stdout"] == expected


def test_a_finished_recording_frees_the_snippets_objects_as_a_plain_run_does():
    code = _code(
        """
        import torch
        w = torch.ones(64, 64, requires_grad=True)
        loss = (w.exp() * w).sum()
        loss.backward(retain_graph=True)
        """
    )

    def leftovers(run) -> bool:
        held: list = []
        real_ones = torch.ones

        def ones(*args, **kwargs):  # keep a weak handle on the snippet's leaf
            t = real_ones(*args, **kwargs)
            held.append(weakref.ref(t))
            return t

        gc.collect()
        torch.ones = ones
        try:
            run(code)
        finally:
            torch.ones = real_ones
        return any(r() is not None for r in held)  # before any collection: freed by refcount alone

    def plain(src: str) -> None:
        exec(compile(src, "<snippet>", "exec"), {"__name__": "__main__"})

    assert leftovers(plain) is False
    assert leftovers(record) is False


# ---------------------------------------------------------------- 7. caps and grad values

BUSY = _code(
    """
    import torch
    x = torch.ones(3, requires_grad=True)
    y = x
    for i in range(20):
        y = y * 1.5 + 1
        z = y.sin()
    print("z" * 10_000)
    s = y.sum()
    print("end")
    """
)


def test_max_steps_caps_steps_and_snippet_completes():
    tr = record(BUSY, limits=Limits(max_steps=5))
    _, expected_out = _plain(BUSY)
    assert len(tr["steps"]) == 5
    assert "steps" in tr["truncated"]
    assert tr["status"] == "ok"
    assert tr["stdout"] == expected_out


def test_max_nodes_caps_the_node_table_and_snippet_completes():
    globs, expected_out = _plain(BUSY)
    assert len(_reachable(globs["s"].grad_fn)) > 10
    tr = record(BUSY, limits=Limits(max_nodes=10))
    assert len(tr["nodes"]) <= 10
    assert "nodes" in tr["truncated"]
    assert tr["status"] == "ok"
    assert tr["stdout"] == expected_out


def test_max_stdout_caps_output_and_snippet_completes():
    _, expected_out = _plain(BUSY)
    tr = record(BUSY, limits=Limits(max_stdout=100))
    assert len(tr["stdout"]) <= 100
    assert expected_out.startswith(tr["stdout"])
    assert "stdout" in tr["truncated"]
    assert tr["status"] == "ok"
    assert sum(len(s["stdout"]) for s in tr["steps"]) <= 100


def test_no_cap_reported_when_none_is_hit():
    tr = record(BUSY)
    assert tr["truncated"] == []


GRADS = _code(
    """
    import torch
    a = torch.linspace(-1, 1, 3, requires_grad=True)
    b = torch.linspace(-2, 3, 100, requires_grad=True)
    loss = (a.exp() * 3).sum() + (b.sin() * b).sum()
    loss.backward()
    """
)


def test_small_grad_carries_values_equal_to_torch():
    globs, _ = _plain(GRADS)
    expected = globs["a"].grad
    assert expected.numel() <= Limits().max_values
    got = _tensor(record(GRADS)["steps"][-1], "a")["grad"]
    assert got["shape"] == list(expected.shape)
    assert got["values"] == [float(text) for text in printed(expected)]  # the digits torch prints


def test_big_grad_carries_its_norm_but_no_values():
    globs, _ = _plain(GRADS)
    expected = globs["b"].grad
    assert expected.numel() > Limits().max_values
    got = _tensor(record(GRADS)["steps"][-1], "b")["grad"]
    assert got.get("values") is None
    assert got["shape"] == list(expected.shape)
    assert _close(got["norm"], float(torch.linalg.vector_norm(expected)))


# ---------------------------------------------------------------- 8. warnings

CYCLE = _code(
    """
    import torch
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = (x ** 2).sum()
    y.backward(create_graph=True)
    """
)

_PLAIN_WARNINGS = _code(
    """
    import contextlib, io, json, sys, warnings
    code = sys.stdin.read()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("always")
        exec(compile(code, "<snippet>", "exec"), {"__name__": "__main__"})
    print(json.dumps([[w.category.__name__, str(w.message)] for w in caught]))
    """
)


def _fresh(*commands: list[str], code: str) -> list[str]:
    """Run each command on ``code`` in a new process (torch warns some things once per
    process), all at once; return their stdouts."""
    procs = [
        subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in commands
    ]
    outs = []
    for proc in procs:
        out, err = proc.communicate(code, timeout=120)
        assert proc.returncode == 0, err
        outs.append(out)
    return outs


def test_backward_create_graph_warning_lands_in_its_step_like_torch():
    plain, traced = _fresh(["-c", _PLAIN_WARNINGS], ["-m", "gradstep.tracer"], code=CYCLE)
    expected = json.loads(plain)
    assert expected  # torch warns about the reference cycle
    tr = json.loads(traced)
    (call,) = _calls(tr)
    assert call["line"] == _line_of(CYCLE, "backward(create_graph=True)")
    assert [[w["category"], w["message"]] for w in call["warnings"]] == expected
    assert [[w["category"], w["message"]] for w in tr["warnings"]] == expected


def test_snippet_warning_is_recorded_with_its_line():
    code = _code(
        """
        import warnings
        import torch
        x = torch.ones(2, requires_grad=True)
        warnings.warn("x")
        y = x * 2
        """
    )
    line = _line_of(code, 'warnings.warn("x")')
    expected = {"category": "UserWarning", "message": "x", "line": line}
    tr = record(code)
    assert tr["warnings"] == [expected]
    assert [w for s in tr["steps"] for w in s["warnings"]] == [expected]


def test_tracer_adds_no_warnings_of_its_own():
    code = _code(
        """
        import torch
        import torch.nn as nn
        x = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
        h = x.exp()
        k = h * x
        k.retain_grad()
        hs = [h, k]
        d = {"h": h}
        class Box:
            pass
        box = Box()
        box.h = h
        lin = nn.Linear(3, 2)
        lin.state = h
        out = lin(k).sum() + h.sum()
        out.backward(retain_graph=True)
        g, = torch.autograd.grad(out, [h])
        """
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _plain(code)
    expected = [[w.category.__name__, str(w.message)] for w in caught]
    tr = record(code)
    assert [[w["category"], w["message"]] for w in tr["warnings"]] == expected


# ---------------------------------------------------------------- 9. stdout per step

PRINTS = _code(
    """
    import torch
    x = torch.ones(2, requires_grad=True)
    print("a")
    y = x * 2
    print("b")
    print("c", y.shape)
    z = y * 3
    z.sum().backward()
    print("done")
    """
)


def test_output_before_a_step_lands_in_that_step():
    stmts, _ = _statements(PRINTS)
    expected, pending = [], ""
    for _line, built, out in stmts:
        pending += out
        if built:  # one forward step per building statement, with what was printed since the last
            expected.append(pending)
            pending = ""
    assert [o for o in expected if o] == ["a\n", "b\nc torch.Size([2])\n"]
    tr = record(PRINTS)
    assert [s["stdout"] for s in _forward(tr)] == expected
    assert [s["stdout"] for s in _calls(tr)] == [""]  # the backward prints nothing


def test_trace_stdout_equals_plain_stdout():
    _, expected = _plain(PRINTS)
    assert record(PRINTS)["stdout"] == expected


# ---------------------------------------------------------------- 10. errors


def test_syntax_error_reports_compile_line_and_column():
    code = "import torch\nx = torch.ones(2)\ny = (x +\n"
    with pytest.raises(SyntaxError) as info:
        compile(code, SNIPPET, "exec")
    tr = record(code)
    assert tr["status"] == "error"
    assert tr["error"]["type"] == "SyntaxError"
    assert tr["error"]["line"] == info.value.lineno
    assert tr["error"]["column"] == info.value.offset
    assert tr["steps"] == []


RAISES = _code(
    """
    import torch
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    def check(t):
        if t.requires_grad:
            raise ValueError("needs no grad")
    def outer(t):
        check(t)
    outer(y)
    z = y * 3
    """
)


def test_exception_in_a_function_points_at_the_innermost_snippet_line():
    with pytest.raises(ValueError) as info:
        _plain(RAISES)
    frames = [f for f in traceback.extract_tb(info.value.__traceback__) if f.filename == SNIPPET]
    tr = record(RAISES)
    assert tr["status"] == "error"
    assert tr["error"]["type"] == "ValueError"
    assert tr["error"]["message"] == str(info.value)
    assert tr["error"]["line"] == frames[-1].lineno
    for f in frames:
        assert f"line {f.lineno}" in tr["error"]["traceback"]


def test_sys_exit_zero_is_ok():
    code = _code(
        """
        import sys
        import torch
        x = torch.ones(2, requires_grad=True)
        y = x * 2
        sys.exit(0)
        z = y * 3
        """
    )
    tr = record(code)
    assert tr["status"] == "ok"
    assert tr["error"] is None
    assert [s["line"] for s in tr["steps"]] == [_line_of(code, "y = x * 2")]


def test_uncaught_exception_keeps_earlier_steps():
    # the statements before the failing one, run one at a time
    before = RAISES.splitlines()[: _line_of(RAISES, "outer(y)") - 1]
    built, _ = _statements("\n".join(before) + "\n")
    expected = [line for line, b, _ in built if b]
    assert expected
    tr = record(RAISES)
    *kept, last = tr["steps"]
    assert [s["line"] for s in kept] == expected
    assert (last["kind"], last["line"]) == ("error", tr["error"]["line"]), (
        "then the step of the error that ended it"
    )


# ---------------------------------------------------------------- 11. stale saved tensors

STALE = _code(
    """
    import torch
    x = torch.ones(3, requires_grad=True)
    w = torch.ones(3)
    y = x * w
    w.add_(1)
    z = y * 2
    """
)


def test_in_place_change_of_a_saved_tensor_marks_the_node_stale():
    before = STALE.splitlines()[: _line_of(STALE, "z = y * 2") - 1]
    globs, _ = _plain("\n".join(before) + "\n")
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        globs["y"].grad_fn._saved_other  # noqa: B018
    tr = record(STALE)
    mul = [n for n in tr["nodes"] if n["op"] == "MulBackward0" and n["line"] == _line_of(STALE, "y = x * w")]
    (node,) = mul
    first = tr["steps"][node["step"]]
    assert not _state(first, node["id"]).get("stale")
    after = [s for s in tr["steps"] if s["line"] == _line_of(STALE, "z = y * 2")]
    (state,) = [_state(s, node["id"]) for s in after]
    assert state.get("stale") is True
    assert "other" in state["stale_saved"]
    assert not state.get("freed")


# ---------------------------------------------------------------- 12. saved bytes


def _saved_storages(*roots) -> dict[int, int]:
    """data_ptr -> nbytes of every tensor saved by the nodes reachable from roots."""
    out = {}
    for node in _reachable(*roots):
        for attr in dir(node):
            if not attr.startswith("_saved_"):
                continue
            value = getattr(node, attr)
            for t in value if isinstance(value, list | tuple) else [value]:
                if isinstance(t, torch.Tensor):
                    st = t.untyped_storage()
                    out[st.data_ptr()] = st.nbytes()
    return out


EXP = _code(
    """
    import torch
    x = torch.linspace(0, 1, 1000, requires_grad=True)
    y = x.exp()
    y.sum().backward()
    """
)


def test_saved_bytes_is_the_storage_the_node_saved():
    before = EXP.splitlines()[: _line_of(EXP, "y = x.exp()")]
    globs, _ = _plain("\n".join(before) + "\n")
    expected = globs["y"].grad_fn._saved_result.untyped_storage().nbytes()
    tr = record(EXP)
    step = _forward(tr)[0]
    assert step["line"] == _line_of(EXP, "y = x.exp()")
    assert step["saved_bytes"] == expected


def test_saved_bytes_drops_to_zero_after_a_backward_that_frees():
    globs, _ = _plain(EXP)
    with pytest.raises(RuntimeError, match="second time"):
        globs["y"].grad_fn._saved_result  # noqa: B018
    tr = record(EXP)
    (call,) = _calls(tr)
    assert call["saved_bytes"] == 0


def test_saved_bytes_counts_a_shared_saved_tensor_once():
    code = _code(
        """
        import torch
        x = torch.linspace(0, 1, 1000, requires_grad=True)
        y = x.exp()
        a = y.sin()
        b = y.cos()
        """
    )
    globs, _ = _plain(code)
    storages = _saved_storages(globs["a"].grad_fn, globs["b"].grad_fn)
    assert len(storages) == 1  # exp, sin and cos all saved y
    tr = record(code)
    assert tr["steps"][-1]["saved_bytes"] == sum(storages.values())


# ---------------------------------------------------------------- 13. typed API


def test_typed_trace_round_trips_through_model_dump():
    t = trace(PRINTS)
    assert isinstance(t, Trace)
    assert t.status == "ok"
    assert Trace.model_validate(t.model_dump()) == t
    assert Trace.model_validate_json(t.model_dump_json()) == t


def test_typed_trace_passes_limits_through():
    t = trace(LOOP, limits=Limits(max_steps=2))
    assert len(t.steps) == 2
    assert t.truncated == ["steps"]


def test_a_tracer_failure_never_becomes_the_snippets_error(monkeypatch):
    from gradstep.tracer import graph

    def broken(*args, **kwargs):
        raise KeyError("tracer bug")

    code = "import torch\nx = torch.ones(2, requires_grad=True)\ny = (x * 3).sum()\ny.backward()\nprint(x.grad)\n"
    plain = io.StringIO()
    with contextlib.redirect_stdout(plain):
        exec(compile(code, "<snippet>", "exec"), {"__name__": "__main__"})
    monkeypatch.setattr(graph.Graph, "discover", broken)
    tr = record(code)
    assert tr["status"] == "ok"
    assert tr["stdout"] == plain.getvalue()
    assert any("tracer bug" in note for note in tr["notes"])


def test_cuda_code_gets_a_note_that_there_is_no_gpu():
    code = "import torch\nx = torch.ones(2, requires_grad=True).cuda()\n"
    with pytest.raises(AssertionError) as plain:  # what plain torch says on this CPU-only machine
        exec(compile(code, "<snippet>", "exec"), {"__name__": "__main__"})
    tr = record(code)
    assert tr["status"] == "error"
    assert tr["error"]["message"] == str(plain.value)
    assert any("no GPU" in note for note in tr["notes"])


def test_cpu_fallback_idiom_runs_without_a_note():
    code = (
        "import torch\ndev = 'cuda' if torch.cuda.is_available() else 'cpu'\nx = torch.ones(2, device=dev)\n"
    )
    tr = record(code)
    assert tr["status"] == "ok"
    assert tr["notes"] == []


def test_a_module_attribute_rebound_between_steps_names_the_new_tensor():
    code = _code(
        """
        import torch
        import torch.nn as nn
        class Holder(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(2, 2)
        m = Holder()
        x = torch.ones(2)
        m.h = m.lin(x)
        y = m.h.sum()
        m.h = m.lin(x) * 2
        z = m.h.sum()
        """
    )
    ns = {"__name__": "__main__"}
    exec(compile(code, "<snippet>", "exec"), ns)
    tr = record(code)
    ops = {n["id"]: n["op"] for n in tr["nodes"]}
    named = [ops[s["id"]] for s in tr["steps"][-1]["nodes"] if "m.h" in s.get("vars", [])]
    assert named == [type(ns["m"].h.grad_fn).__name__]


def test_a_recording_is_plain_json_data_that_round_trips_unchanged():
    code = _code(
        """
        import torch
        x = torch.ones(2, 3, requires_grad=True)
        y = (x * 2).sum()
        y.backward(retain_graph=True)
        y.backward()
        """
    )
    tr = record(code)
    assert json.loads(json.dumps(tr)) == tr  # no tuples or other types a reader would get back changed


def test_each_step_lists_the_saved_tensors_stale_at_that_step_not_later():
    code = _code(
        """
        import torch
        a = torch.ones(3, requires_grad=True) * 1
        b = torch.ones(3, requires_grad=True) * 1
        c = a * b
        a.add_(1)
        b.add_(1)
        """
    )

    def stale_after(n_lines: int) -> list[str]:
        # plain torch: run the snippet up to that line, then read each saved slot of c's node
        ns: dict = {}
        exec(compile("\n".join(code.splitlines()[:n_lines]), "<snippet>", "exec"), ns)
        stale = []
        for name in ("other", "self"):
            try:
                getattr(ns["c"].grad_fn, f"_saved_{name}")
            except RuntimeError:
                stale.append(name)
        return stale

    tr = record(code)
    mul = next(n["id"] for n in tr["nodes"] if n["op"] == "MulBackward0" and n["line"] == 4)  # c = a * b
    seen = {}
    for step in tr["steps"]:
        for st in step["nodes"]:
            if st["id"] == mul and st.get("stale"):
                seen[step["line"]] = sorted(st["stale_saved"])
    assert seen == {line: sorted(stale_after(line)) for line in (5, 6)}
    assert seen[5] != seen[6]  # the snippet is what it claims: one more tensor goes stale at line 6


def test_compile_without_inductor_runs_aot_eager_and_says_so():
    """Where inductor cannot build (the sandbox), torch.compile's default backend becomes
    aot_eager: the same gradients as the uncompiled function, one CompiledFunctionBackward node,
    no step for the compiler's own use of autograd, and a note naming the line."""
    code = textwrap.dedent(
        """
        import torch
        def f(x):
            return (x.sin() * x).sum()
        step = torch.compile(f, mode="max-autotune")
        x = torch.linspace(-1, 1, 5, requires_grad=True)
        step(x).backward()
        """
    )
    trace = record(code, Limits(inductor=False))
    assert trace["status"] == "ok", trace["error"]
    assert [s["kind"] for s in trace["steps"]] == ["forward", "backward"]
    assert [n["op"] for n in trace["nodes"]] == ["CompiledFunctionBackward", "AccumulateGrad"]
    assert any("torch.compile at line(s) 5" in n and "aot_eager" in n for n in trace["notes"])
    x = torch.linspace(-1, 1, 5, requires_grad=True)
    (x.sin() * x).sum().backward()
    (traced,) = [t for t in trace["steps"][-1]["tensors"] if t["name"] == "x"]
    assert truth.grad_mismatch(x.grad, traced["grad"]) is None


SCRIPTED = textwrap.dedent(
    """
    import inspect
    import torch

    @torch.jit.script
    def scaled(x, k: float):
        return x * x * k

    def shifted(x):
        return x + 1

    x = torch.tensor([1.0, 2.0], requires_grad=True)
    scaled(shifted(x), 3.0).sum().backward()
    print(x.grad)
    print(inspect.getsource(shifted).strip())
    """
).lstrip()


def test_code_that_reads_its_own_source_gets_it_as_from_a_file(tmp_path):
    # torch.jit.script compiles a function from its source (inspect): it failed with "Can't get
    # source" here, while `python snippet.py` runs it
    (tmp_path / "snippet.py").write_text(SCRIPTED)
    plain = subprocess.run(
        [sys.executable, "snippet.py"], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert plain.returncode == 0, plain.stderr
    for limits in (Limits(), Limits.sandboxed()):
        trace = record(SCRIPTED, limits)
        assert trace["error"] is None and trace["stdout"] == plain.stdout
    assert SNIPPET_FILENAME not in linecache.cache, "the source is not left behind"
