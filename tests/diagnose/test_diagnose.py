"""Diagnoses: each fires where the run shows the mistake, stays quiet where the code is fine,
and every fix it offers runs cleanly under plain PyTorch with the intended gradients.

Expected gradients are computed here with plain torch (autograd.grad, or the
same computation written the way the fix means it); the fixes' code is run with
``truth.run_plain`` (no gradstep in it).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from gradstep.diagnose import (
    MAX_FIX_RUNS,
    RULES,
    diagnose,
    find,
    freed_graph,
    graph_cut,
    hidden_state,
    inplace,
    integer_grad,
    leaf_inplace,
    needless_retain,
    no_graph,
    non_leaf_grad,
    non_scalar,
    nonfinite_grad,
    running_total,
    stale_graph,
    step_order,
    zero_grad,
)
from gradstep.diagnose.source import moved_line
from gradstep.pipeline import run_locally
from gradstep.printing import fmt_bytes
from gradstep.schema import Diagnosis
from gradstep.tracer import record
from testkit.learner_code import REBOUND_LEAF_LOOP
from testkit.torch_print import printed_number
from testkit.truth import run_plain

ROOT = Path(__file__).resolve().parents[2]
SNIPPETS = ROOT / "snippets"
CASES = ROOT / "tests" / "cases"

# each kind as its rule declares it (gradstep.diagnose.registry)
FREED = freed_graph.KIND
NON_SCALAR = non_scalar.KIND
INPLACE = inplace.KIND
ZERO_GRAD = zero_grad.KIND
HIDDEN = hidden_state.KIND
NON_LEAF = non_leaf_grad.KIND
INTEGER = integer_grad.KIND
LEAF_INPLACE = leaf_inplace.KIND
NO_GRAPH = no_graph.KIND
GRAPH_CUT = graph_cut.KIND
RUNNING_TOTAL = running_total.KIND
NONFINITE = nonfinite_grad.KIND
STEP_ORDER = step_order.KIND
NEEDLESS_RETAIN = needless_retain.KIND
STALE_GRAPH = stale_graph.KIND

# curated snippets that show a mistake, and which (each rule's SNIPPETS); every other snippet is fine
SNIPPET_KINDS = {name: rule.KIND for rule in RULES for name in getattr(rule, "SNIPPETS", ())}


def code_of(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def diagnoses(code: str) -> list[dict]:
    found = diagnose(record(code), run_locally)
    for d in found:
        Diagnosis.model_validate(d)
    return found


def only(code: str, kind: str) -> dict:
    found = diagnoses(code)
    assert [d["kind"] for d in found] == [kind], found
    return found[0]


def fix(diagnosis: dict, title_start: str) -> str:
    for f in diagnosis["fixes"]:
        if f["title"].startswith(title_start):
            return f["code"]
    raise AssertionError(f"no fix titled {title_start!r} in {[f['title'] for f in diagnosis['fixes']]}")


def plain_ok(code: str):
    """The fixed code under plain PyTorch: it must run to its end with no call failing."""
    run = run_plain(code)
    assert run.error is None, run.error
    assert all(c.error is None for c in run.calls), [c.error for c in run.calls]
    return run


def grads_of(call, name: str) -> torch.Tensor:
    return next(g for names, g in call.grads.items() if name in names)


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- every curated snippet


@pytest.mark.parametrize("path", sorted(SNIPPETS.glob("*.py")), ids=lambda p: p.stem)
def test_curated_snippet_gets_exactly_its_diagnosis(path: Path):
    expected = [SNIPPET_KINDS[path.stem]] if path.stem in SNIPPET_KINDS else []
    assert [d["kind"] for d in diagnoses(path.read_text())] == expected


@pytest.mark.parametrize("path", sorted(SNIPPETS.glob("*.py")), ids=lambda p: p.stem)
def test_every_fix_offered_for_a_curated_snippet_runs_cleanly_in_plain_torch(path: Path):
    for d in diagnoses(path.read_text()) if path.stem in SNIPPET_KINDS else []:
        assert d["fixes"], f"{path.stem}: no verified fix for {d['kind']}"
        for f in d["fixes"]:
            plain_ok(f["code"])


@pytest.mark.parametrize(
    "name",
    [
        "inplace_not_saved_ok",
        "loop_of_backwards",
        "retain_grad_non_leaf",
        "sequential_model",
        "leaf_used_twice",
    ],
)
def test_fine_case_gets_no_diagnosis(name: str):
    assert diagnoses((CASES / f"{name}.py").read_text()) == []


# ---------------------------------------------------------------- backward through a freed graph

FREED_VARIANTS = {
    "top_level": """
        import torch
        x = torch.tensor(3.0, requires_grad=True)
        y = x**2
        y.backward()
        y.backward()
        """,
    "in_a_function": """
        import torch
        def train(out):
            out.backward()
        x = torch.tensor(3.0, requires_grad=True)
        y = x**2
        train(y)
        train(y)
        """,
    "in_a_loop": """
        import torch
        x = torch.tensor(3.0, requires_grad=True)
        y = x**2
        for _ in range(2):
            y.backward()
        """,
    "autograd_backward": """
        import torch
        x = torch.tensor(3.0, requires_grad=True)
        y = x**2
        torch.autograd.backward(y)
        torch.autograd.backward(y)
        """,
    "autograd_grad_then_backward": """
        import torch
        x = torch.tensor(3.0, requires_grad=True)
        y = x**2
        (g,) = torch.autograd.grad(y, x)
        y.backward()
        """,
}


@pytest.mark.parametrize("variant", sorted(FREED_VARIANTS))
def test_freed_graph_fires_on_a_second_backward(variant: str):
    d = only(code_of(FREED_VARIANTS[variant]), FREED)
    assert d["severity"] == "error"
    assert d["line"] == run_plain(code_of(FREED_VARIANTS[variant])).calls[-1].line


@pytest.mark.parametrize("variant", sorted(FREED_VARIANTS))
def test_freed_graph_retain_fix_gives_the_grads_of_both_calls(variant: str):
    code = code_of(FREED_VARIANTS[variant])
    fixed = plain_ok(fix(only(code, FREED), "Keep the graph"))
    x = torch.tensor(3.0, requires_grad=True)
    (once,) = torch.autograd.grad(x**2, x)
    backward_calls = sum(1 for c in fixed.calls if c.kind == "backward")
    assert close(grads_of(fixed.calls[-1], "x"), once * backward_calls)


@pytest.mark.parametrize("variant", sorted(FREED_VARIANTS))
def test_freed_graph_retain_fix_quotes_what_the_retained_call_keeps(variant: str):
    d = only(code_of(FREED_VARIANTS[variant]), FREED)
    keep = next(f for f in d["fixes"] if f["title"].startswith("Keep the graph"))
    # the fixed run's own step for the call the fix changed (found by its text, not by line mapping)
    line = next(i for i, text in enumerate(keep["code"].splitlines(), 1) if "retain_graph=True" in text)
    step = next(s for s in record(keep["code"])["steps"] if s["kind"] != "forward" and s["line"] == line)
    assert step["saved_bytes"] > 0  # a retained graph holds its saved tensors
    assert f"({fmt_bytes(step['saved_bytes'])} in this run)" in keep["explanation"]


def test_a_rewritten_line_stays_put_when_its_old_text_follows_it():
    old = "x = 1\ny.backward()\ny.backward()\n"
    new = "x = 1\ny.backward(retain_graph=True)\ny.backward()\n"
    assert [moved_line(old, new, n) for n in (1, 2, 3)] == [1, 2, 3]
    assert [moved_line("a\nb\nc\n", "a\nz\nb\nc\n", n) for n in (1, 2, 3)] == [1, 3, 4]  # inserted
    assert [moved_line("a\nb\nc\n", "a\nc\n", n) for n in (1, 2, 3)] == [1, None, 2]  # deleted
    assert [moved_line("a\nb\nc\n", "a\nB1\nB2\nc\n", n) for n in (1, 2, 3)] == [1, None, 4]  # 1 -> 2 lines


def test_freed_graph_retain_fix_is_placed_on_the_earlier_call():
    d = only(code_of(FREED_VARIANTS["autograd_grad_then_backward"]), FREED)
    assert "torch.autograd.grad(y, x, retain_graph=True)" in fix(d, "Keep the graph")


def test_freed_graph_sum_fix_gives_the_same_grads_as_two_retained_backwards():
    code = (SNIPPETS / "shared_trunk_partial_grads.py").read_text()
    d = only(code, FREED)
    retained = plain_ok(fix(d, "Keep the graph")).calls[-1]
    summed = plain_ok(fix(d, "One backward on the summed losses")).calls[-1]
    assert len(plain_ok(fix(d, "One backward on the summed losses")).calls) == 1
    for name in ("w", "w1", "w2"):
        assert close(grads_of(summed, name), grads_of(retained, name))


def test_freed_graph_sum_fix_says_it_costs_less_memory():
    d = only((SNIPPETS / "shared_trunk_partial_grads.py").read_text(), FREED)
    explanation = next(f["explanation"] for f in d["fixes"] if f["title"].startswith("One backward"))
    assert "less memory" in explanation and "same" in explanation


def test_freed_graph_has_no_sum_fix_for_the_same_output_twice():
    d = only(code_of(FREED_VARIANTS["top_level"]), FREED)
    assert [f["title"].split(":")[0] for f in d["fixes"]] == ["Keep the graph"]


@pytest.mark.parametrize(
    "code",
    [
        """
        import torch
        x = torch.tensor(3.0, requires_grad=True)
        for _ in range(2):
            y = x**2
            y.backward()
        """,
        """
        import torch
        x = torch.tensor(3.0, requires_grad=True)
        y = x**2
        y.backward(retain_graph=True)
        y.backward()
        """,
        """
        import torch
        x = torch.ones(3, requires_grad=True)
        y = (x + 1).sum()
        y.backward()
        y.backward()
        """,
    ],
    ids=["recomputed_each_time", "retained", "graph_saves_no_tensor"],
)
def test_freed_graph_stays_quiet_when_the_second_backward_works(code: str):
    assert diagnoses(code_of(code)) == []


# ---------------------------------------------------------------- non-scalar backward

NON_SCALAR_VARIANTS = {
    "top_level": "y.backward()",
    "autograd_backward": "torch.autograd.backward(y)",
    "autograd_grad": "(g,) = torch.autograd.grad(y, x)",
    "expression": "(x * x).backward()",
    "in_a_function": "def run(t):\n    t.backward()\nrun(y)",
    "in_a_loop": "for out in [y]:\n    out.backward()",
}


def _non_scalar(variant: str) -> str:
    return (
        "import torch\nx = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)\ny = x * x\n"
        + NON_SCALAR_VARIANTS[variant]
        + "\n"
    )


def _result(run, name: str = "x") -> torch.Tensor:
    call = run.calls[-1]
    return call.returned[0] if call.kind == "grad" else grads_of(call, name)


@pytest.mark.parametrize("variant", sorted(NON_SCALAR_VARIANTS))
def test_non_scalar_fires_without_gradient(variant: str):
    assert only(_non_scalar(variant), NON_SCALAR)["severity"] == "error"


@pytest.mark.parametrize("variant", sorted(NON_SCALAR_VARIANTS))
def test_non_scalar_sum_and_ones_fixes_give_the_vector_jacobian_product_with_ones(variant: str):
    d = only(_non_scalar(variant), NON_SCALAR)
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    (expected,) = torch.autograd.grad(y, x, torch.ones_like(y))
    offered = [f for f in d["fixes"] if ".sum()" in f["title"] or "ones_like" in f["title"]]
    assert offered
    for f in offered:
        assert close(_result(plain_ok(f["code"])), expected)


@pytest.mark.parametrize("variant", sorted(NON_SCALAR_VARIANTS))
def test_non_scalar_mean_fix_gives_the_sum_gradient_divided_by_the_count(variant: str):
    d = only(_non_scalar(variant), NON_SCALAR)
    mean = next(f for f in d["fixes"] if ".mean()" in f["title"])
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (expected,) = torch.autograd.grad((x * x).mean(), x)
    assert close(_result(plain_ok(mean["code"])), expected)


def test_non_scalar_offers_ones_like_only_for_a_named_output():
    d = only(_non_scalar("expression"), NON_SCALAR)
    assert not any("ones_like" in f["title"] for f in d["fixes"])


@pytest.mark.parametrize(
    "line",
    [
        "y.sum().backward()",
        "y.backward(gradient=torch.ones_like(y))",
        "(g,) = torch.autograd.grad(y.sum(), x)",
    ],
)
def test_non_scalar_stays_quiet_on_a_scalar_or_a_given_gradient(line: str):
    code = "import torch\nx = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)\ny = x * x\n" + line + "\n"
    assert diagnoses(code) == []


# ---------------------------------------------------------------- in-place change of a saved tensor

INPLACE_VARIANTS = {
    "method": ("y.mul_(2)", "y = y.mul(2)"),
    "augmented": ("y += 1", "y = y + 1"),
    "setitem": ("y[0] = 0.0", None),
}


def _inplace(change: str, where: str = "top_level") -> str:
    body = f"y = x.sigmoid()\n{change}\ny.sum().backward()\n"
    if where == "in_a_function":
        body = "def run():\n" + textwrap.indent(body, "    ") + "run()\n"
    elif where == "in_a_loop":
        body = "for _ in range(2):\n" + textwrap.indent(body, "    ")
    return "import torch\nx = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)\n" + body


def _sigmoid_then(change) -> torch.Tensor:
    """x.grad for the computation the in-place line meant, written out of place in plain torch."""
    x = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
    y = change(x.sigmoid())
    (g,) = torch.autograd.grad(y.sum(), x)
    return g


INTENDED = {
    "method": lambda y: y * 2,
    "augmented": lambda y: y + 1,
    "setitem": lambda y: torch.cat([torch.zeros(1), y[1:]]),
}


@pytest.mark.parametrize("variant", sorted(INPLACE_VARIANTS))
@pytest.mark.parametrize("where", ["top_level", "in_a_function", "in_a_loop"])
def test_inplace_points_at_the_line_that_changed_the_saved_tensor(variant: str, where: str):
    code = _inplace(INPLACE_VARIANTS[variant][0], where)
    line = next(
        i for i, text in enumerate(code.splitlines(), 1) if text.strip() == INPLACE_VARIANTS[variant][0]
    )
    assert only(code, INPLACE)["line"] == line


@pytest.mark.parametrize("variant", sorted(INPLACE_VARIANTS))
@pytest.mark.parametrize("where", ["top_level", "in_a_loop"])
def test_inplace_fixes_give_the_gradient_of_the_intended_computation(variant: str, where: str):
    d = only(_inplace(INPLACE_VARIANTS[variant][0], where), INPLACE)
    expected = _sigmoid_then(INTENDED[variant]) * (2 if where == "in_a_loop" else 1)  # the loop accumulates
    titles = [f["title"] for f in d["fixes"]]
    assert any(t.startswith("Clone") for t in titles)
    assert any(t.startswith("Use the out-of-place") for t in titles) == (
        INPLACE_VARIANTS[variant][1] is not None
    )
    for f in d["fixes"]:
        assert close(grads_of(plain_ok(f["code"]).calls[-1], "x"), expected)


def test_inplace_out_of_place_fix_rewrites_only_that_statement():
    code = _inplace("y.mul_(2)")
    d = only(code, INPLACE)
    assert fix(d, "Use the out-of-place") == code.replace("y.mul_(2)", "y = y.mul(2)")


def test_inplace_stays_quiet_when_the_changed_tensor_was_not_saved():
    assert diagnoses((CASES / "inplace_not_saved_ok.py").read_text()) == []


# ---------------------------------------------------------------- .grad accumulating without zero_grad

ZERO_GRAD_VARIANTS = {
    "optimizer": """
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        data = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
        for _ in range(3):
            loss = model(data).pow(2).mean()
            loss.backward()
            opt.step()
        """,
    "manual_update": """
        import torch
        w = torch.tensor([1.0, -2.0], requires_grad=True)
        data = torch.tensor([0.5, 1.5])
        for _ in range(3):
            loss = ((w * data).sum() - 1.0) ** 2
            loss.backward()
            with torch.no_grad():
                w -= 0.1 * w.grad
        """,
    "in_a_function": """
        import torch
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        data = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
        def train_step():
            loss = model(data).pow(2).mean()
            loss.backward()
            opt.step()
        for _ in range(3):
            train_step()
        """,
    "while_loop": """
        import torch
        w = torch.tensor([1.0, -2.0], requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.1)
        i = 0
        while i < 3:
            loss = (w**2).sum()
            loss.backward()
            opt.step()
            i += 1
        """,
}


@pytest.mark.parametrize("variant", sorted(ZERO_GRAD_VARIANTS))
def test_zero_grad_fires_as_a_warning_with_the_growth_plain_torch_shows(variant: str):
    code = code_of(ZERO_GRAD_VARIANTS[variant])
    d = only(code, ZERO_GRAD)
    assert d["severity"] == "warning"
    plain = run_plain(code)
    growths = [
        " → ".join(printed_number(c.grads[names].norm()) for c in plain.calls)
        for names in plain.calls[0].grads
    ]
    assert any(g in d["message"] for g in growths), (growths, d["message"])


def _fresh_linear() -> list[torch.Tensor]:
    """optimizer / in_a_function variants, written with zero_grad in plain torch: weight grads per call."""
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    out = []
    for _ in range(3):
        opt.zero_grad()
        model(data).pow(2).mean().backward()
        out.append(model.weight.grad.clone())
        opt.step()
    return out


def _fresh_manual() -> list[torch.Tensor]:
    w = torch.tensor([1.0, -2.0], requires_grad=True)
    data = torch.tensor([0.5, 1.5])
    out = []
    for _ in range(3):
        (g,) = torch.autograd.grad(((w * data).sum() - 1.0) ** 2, w)
        out.append(g)
        with torch.no_grad():
            w -= 0.1 * g
    return out


def _fresh_while() -> list[torch.Tensor]:
    w = torch.tensor([1.0, -2.0], requires_grad=True)
    out = []
    for _ in range(3):
        (g,) = torch.autograd.grad((w**2).sum(), w)
        out.append(g)
        with torch.no_grad():
            w -= 0.1 * g
    return out


FRESH = {
    "optimizer": ("model.weight", _fresh_linear),
    "in_a_function": ("model.weight", _fresh_linear),
    "manual_update": ("w", _fresh_manual),
    "while_loop": ("w", _fresh_while),
}


@pytest.mark.parametrize("variant", sorted(ZERO_GRAD_VARIANTS))
def test_zero_grad_fix_gives_each_call_only_its_own_gradient(variant: str):
    fixed = plain_ok(only(code_of(ZERO_GRAD_VARIANTS[variant]), ZERO_GRAD)["fixes"][0]["code"])
    name, fresh = FRESH[variant]
    expected = fresh()
    assert len(fixed.calls) == len(expected)
    for call, grad in zip(fixed.calls, expected, strict=True):
        assert close(grads_of(call, name), grad)


@pytest.mark.parametrize(
    "code",
    [
        (CASES / "loop_of_backwards.py").read_text(),
        """
        import torch
        w = torch.tensor([1.0, -2.0], requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            (w**2).sum().backward()
            opt.step()
        """,
        """
        import torch
        w = torch.tensor([1.0, -2.0], requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.1)
        for i in range(4):
            (w**2).sum().backward()
            if i % 2 == 1:
                opt.step()
                opt.zero_grad()
        """,
        """
        import torch
        w = torch.tensor([1.0, -2.0], requires_grad=True)
        for _ in range(3):
            (w**2).sum().backward()
            with torch.no_grad():
                w -= 0.1 * w.grad
            w.grad.zero_()
        """,
    ],
    ids=[
        "accumulate_then_use_once",
        "zero_grad_each_iteration",
        "accumulate_two_batches",
        "grad_zeroed_by_hand",
    ],
)
def test_zero_grad_stays_quiet_when_gradients_are_reset_or_accumulated_on_purpose(code: str):
    assert diagnoses(code_of(code)) == []


def test_zero_grad_fix_matches_a_plain_training_loop_that_resets_gradients():
    code = (SNIPPETS / "training_loop_no_zero_grad.py").read_text()
    fixed = plain_ok(only(code, ZERO_GRAD)["fixes"][0]["code"])
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    targets = torch.tensor([[1.0], [2.0]])
    expected = []
    for _ in range(3):
        optimizer.zero_grad()
        ((model(inputs) - targets) ** 2).mean().backward()
        expected.append(model.weight.grad.clone())
        optimizer.step()
    assert [
        bool(close(grads_of(c, "model.weight"), e)) for c, e in zip(fixed.calls, expected, strict=True)
    ] == [True] * 3


# ---------------------------------------------------------------- hidden state not detached

HIDDEN_VARIANTS = {
    "for_loop": """
        import torch
        torch.manual_seed(0)
        W = torch.randn(2, 2, requires_grad=True)
        h = torch.zeros(2)
        for x_t in torch.randn(3, 2):
            h = torch.tanh(W @ x_t + h)
            h.sum().backward()
        """,
    "in_a_function": """
        import torch
        torch.manual_seed(0)
        W = torch.randn(2, 2, requires_grad=True)
        def cell(h, x_t):
            return torch.tanh(W @ x_t + h)
        h = torch.zeros(2)
        for x_t in torch.randn(3, 2):
            h = cell(h, x_t)
            loss = h.sum()
            loss.backward()
        """,
    "while_loop": """
        import torch
        torch.manual_seed(0)
        W = torch.randn(2, 2, requires_grad=True)
        xs = torch.randn(3, 2)
        h = torch.zeros(2)
        t = 0
        while t < 3:
            h = torch.tanh(W @ xs[t] + h)
            torch.autograd.backward(h.sum())
            t += 1
        """,
}


@pytest.mark.parametrize("variant", sorted(HIDDEN_VARIANTS))
def test_hidden_state_fires_on_the_second_iterations_backward(variant: str):
    code = code_of(HIDDEN_VARIANTS[variant])
    d = only(code, HIDDEN)
    assert d["severity"] == "error" and "`h`" in d["message"]
    assert d["line"] == run_plain(code).calls[1].line


@pytest.mark.parametrize("variant", sorted(HIDDEN_VARIANTS))
def test_hidden_state_fix_runs_each_iteration_through_its_own_graph_only(variant: str):
    code = code_of(HIDDEN_VARIANTS[variant])
    fixed = plain_ok(only(code, HIDDEN)["fixes"][0]["code"])
    torch.manual_seed(0)
    W = torch.randn(2, 2, requires_grad=True)
    xs = torch.randn(3, 2)
    h = torch.zeros(2)
    for i, x_t in enumerate(xs):
        h = torch.tanh(W @ x_t + h.detach())
        h.sum().backward()
        assert close(grads_of(fixed.calls[i], "W"), W.grad)


def test_hidden_state_with_retain_graph_is_a_warning_with_a_detach_fix():
    code = code_of(HIDDEN_VARIANTS["for_loop"]).replace(
        "h.sum().backward()", "h.sum().backward(retain_graph=True)"
    )
    d = only(code, HIDDEN)
    assert d["severity"] == "warning"
    plain_ok(d["fixes"][0]["code"])


def test_hidden_state_stays_quiet_when_a_loop_backwards_the_same_retained_output():
    code = code_of(
        """
        import torch
        x = torch.tensor(2.0, requires_grad=True)
        y = x**2
        total = torch.zeros(())
        for _ in range(3):
            total = total + y
            y.backward(retain_graph=True)
        """
    )
    assert diagnoses(code) == []


def test_hidden_state_stays_quiet_when_it_is_detached():
    assert diagnoses((SNIPPETS / "rnn_hidden_detached.py").read_text()) == []


# ---------------------------------------------------------------- .grad of a non-leaf

NON_LEAF_VARIANTS = {
    "top_level": """
        import torch
        x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        h = x * 2
        out = (h**2).sum()
        out.backward()
        print(h.grad)
        """,
    "in_a_function": """
        import torch
        def run():
            x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
            h = x * 2
            out = (h**2).sum()
            out.backward()
            return h.grad
        print(run())
        """,
    "in_a_loop": """
        import torch
        x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        for _ in range(2):
            h = x * 2
            out = (h**2).sum()
            out.backward()
            print(h.grad)
        """,
}


@pytest.mark.parametrize("variant", sorted(NON_LEAF_VARIANTS))
def test_non_leaf_grad_fires_where_grad_is_read(variant: str):
    code = code_of(NON_LEAF_VARIANTS[variant])
    d = only(code, NON_LEAF)
    line = next(i for i, text in enumerate(code.splitlines(), 1) if "h.grad" in text)
    assert d["severity"] == "warning" and d["line"] == line


@pytest.mark.parametrize("variant", sorted(NON_LEAF_VARIANTS))
def test_non_leaf_retain_grad_fix_fills_the_gradient_plain_torch_computes(variant: str):
    code = code_of(NON_LEAF_VARIANTS[variant])
    fixed = plain_ok(only(code, NON_LEAF)["fixes"][0]["code"])
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = x * 2
    (expected,) = torch.autograd.grad((h**2).sum(), h)
    assert close(grads_of(fixed.calls[-1], "h"), expected)


def test_non_leaf_stays_quiet_when_retain_grad_was_called():
    assert diagnoses((SNIPPETS / "retain_grad_before_or_after.py").read_text()) == []


# ---------------------------------------------------------------- requires_grad on an integer tensor

INTEGER_VARIANTS = {
    "tensor_literal": "x = torch.tensor([1, 2, 3], requires_grad=True)",
    "arange": "x = torch.arange(1, 4, requires_grad=True)",
    "requires_grad_method": "x = torch.tensor([1, 2, 3])\nx.requires_grad_()",
    "attribute": "x = torch.tensor([1, 2, 3])\nx.requires_grad = True",
    "in_a_function": "def make():\n    return torch.tensor([1, 2, 3], requires_grad=True)\nx = make()",
}


def _integer(variant: str) -> str:
    return "import torch\n" + INTEGER_VARIANTS[variant] + "\n(x * x).sum().backward()\nprint(x.grad)\n"


@pytest.mark.parametrize("variant", sorted(INTEGER_VARIANTS))
def test_integer_requires_grad_fires_at_its_line(variant: str):
    code = _integer(variant)
    d = only(code, INTEGER)
    assert d["line"] == run_plain(code).error["line"]


@pytest.mark.parametrize("variant", sorted(INTEGER_VARIANTS))
def test_integer_fix_gives_the_float_gradient(variant: str):
    fixed = plain_ok(only(_integer(variant), INTEGER)["fixes"][0]["code"])
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (expected,) = torch.autograd.grad((x * x).sum(), x)
    assert close(grads_of(fixed.calls[-1], "x"), expected)


def test_integer_stays_quiet_on_float_tensors():
    code = "import torch\nx = torch.tensor([1.0, 2.0], requires_grad=True)\n(x * x).sum().backward()\n"
    assert diagnoses(code) == []


# ---------------------------------------------------------------- verification


def test_a_fix_that_does_not_run_is_not_offered():
    trace = record(code_of(FREED_VARIANTS["top_level"]))
    candidates = find(trace)
    assert candidates and candidates[0].fixes

    def broken(codes):
        return [{**record(c), "status": "error"} for c in codes]

    assert diagnose(trace, broken)[0]["fixes"] == []


def test_a_fix_whose_grads_differ_from_the_intent_is_not_offered():
    code = (SNIPPETS / "shared_trunk_partial_grads.py").read_text()
    trace = record(code)

    def tampered(codes):
        traces = [record(c) for c in codes]
        for t in traces:
            if "(loss1 + loss2)" in t["code"]:
                for tensor in t["steps"][-1]["tensors"]:
                    if tensor.get("grad"):
                        tensor["grad"] = {
                            **tensor["grad"],
                            "values": None,
                            "norm": (tensor["grad"]["norm"] or 0) + 1,
                        }
        return traces

    titles = [f["title"] for f in diagnose(trace, tampered)[0]["fixes"]]
    assert titles and not any(t.startswith("One backward") for t in titles)


def test_no_fix_is_run_when_no_rule_fires():
    trace = record("import torch\nx = torch.ones(2, requires_grad=True)\n(x * 3).sum().backward()\n")

    def must_not_run(codes):
        raise AssertionError("ran fixes for a snippet with no diagnosis")

    assert diagnose(trace, must_not_run) == []


def test_a_snippet_with_a_syntax_error_gets_no_diagnosis():
    assert diagnose(record("import torch\nx = (\n"), run_locally) == []


def test_in_process_trace_carries_verified_diagnoses():
    import gradstep

    t = gradstep.trace(code_of(FREED_VARIANTS["top_level"]))
    assert [d.kind for d in t.diagnoses] == [FREED] and t.diagnoses[0].fixes


def test_in_process_trace_can_skip_diagnosis():
    import gradstep

    assert gradstep.trace(code_of(FREED_VARIANTS["top_level"]), diagnose=False).diagnoses == []


def test_inplace_through_a_view_points_at_the_view_and_its_fixes_keep_the_gradient():
    code = (CASES / "inplace_on_view.py").read_text()
    d = only(code, INPLACE)
    line = next(i for i, text in enumerate(code.splitlines(), 1) if text.startswith("row.mul_(3)"))
    assert d["line"] == line and d["fixes"]
    w = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    (expected,) = torch.autograd.grad((w * 2).sin().sum(), w)
    for f in d["fixes"]:
        assert close(grads_of(plain_ok(f["code"]).calls[-1], "w"), expected)


def test_fix_runs_per_trace_are_bounded():
    reads = "".join(f"h{i} = x * {i + 2}\n" for i in range(12))
    prints = "".join(f"print(h{i}.grad)\n" for i in range(12))
    code = (
        "import torch\nx = torch.ones(2, requires_grad=True)\n"
        + reads
        + "sum(["
        + ", ".join(f"h{i}" for i in range(12))
        + "]).sum().backward()\n"
        + prints
    )
    ran: list[str] = []

    def counting(codes):
        ran.extend(codes)
        return run_locally(codes)

    found = diagnose(record(code), counting)
    assert len(found) == 12 and len(ran) == MAX_FIX_RUNS
    assert sum(len(d["fixes"]) for d in found) == MAX_FIX_RUNS


# ---------------------------------------------------------------- a hand-written step that rebinds its leaf

REBINDING_VARIANTS = {
    "the_learners_loop": REBOUND_LEAF_LOOP,
    "a_learning_rate_and_a_bias": """
        import torch
        w = torch.randn(3, requires_grad=True)
        b = torch.zeros(1, requires_grad=True)
        x = torch.tensor([1., 2., 3.])
        lr = 0.05
        for step in range(4):
            loss = ((w * x).sum() + b - 1.0) ** 2
            loss.backward()
            w = w - lr * w.grad
            b = b - lr * b.grad
        """,
}


def _sgd_as_meant(code: str) -> dict[str, torch.Tensor]:
    """The loop's gradient steps done as meant (each iteration's own gradient, leaves kept leaves), by
    running the code with the update lines replaced by an explicit step of plain torch.autograd.grad."""
    scope: dict = {}
    meant = []
    for text in code.splitlines():
        stripped = text.strip()
        head, _, rest = stripped.partition(" = ")
        if rest.startswith(f"{head} - ") and f"{head}.grad" in rest:
            pad = text[: len(text) - len(text.lstrip())]
            step = rest[len(head) + 3 :].replace(f"{head}.grad", "__g")
            meant.append(f"{pad}__g = {head}.grad")
            meant.append(f"{pad}{head} = ({head} - {step}).detach().requires_grad_()")
        else:
            meant.append(text)
    torch.manual_seed(0)
    exec(compile("\n".join(meant), "<meant>", "exec"), scope)
    return {k: v for k, v in scope.items() if isinstance(v, torch.Tensor) and v.is_leaf and v.requires_grad}


@pytest.mark.parametrize("variant", sorted(REBINDING_VARIANTS))
def test_a_rebinding_update_is_diagnosed_at_the_read_with_the_rebinding_named(variant: str):
    code = code_of(REBINDING_VARIANTS[variant])
    found = [d for d in diagnoses(code) if d["kind"] == NON_LEAF]
    assert found, "no diagnosis"
    rebinding = next(i for i, text in enumerate(code.splitlines(), 1) if " = w - " in text)
    assert f"`w` names a non-leaf from line {rebinding} on" in found[0]["message"]


@pytest.mark.parametrize("variant", sorted(REBINDING_VARIANTS))
def test_the_in_place_update_fix_trains_as_the_loop_meant(variant: str):
    code = code_of(REBINDING_VARIANTS[variant])
    d = next(d for d in diagnoses(code) if d["kind"] == NON_LEAF)
    fixed_code = fix(d, "Update w")
    scope: dict = {}
    torch.manual_seed(0)
    exec(compile(fixed_code, "<fixed>", "exec"), scope)
    meant = _sgd_as_meant(code)
    for name, value in meant.items():
        assert scope[name].is_leaf and close(scope[name].detach(), value.detach()), name
