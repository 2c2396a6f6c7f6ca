"""nan/inf gradients: the diagnosis names the node where plain PyTorch's gradient first went non-finite
(found with hooks on every node) and its line; each fix gives finite gradients that equal the original
ones wherever those were finite. Code that already guards the singular point stays silent."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from test_diagnose import code_of, diagnoses, grads_of, only, plain_ok
from testkit.truth import run_plain

KIND = "nonfinite_grad"


def _sqrt() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.tensor([0.0, 3.0, 4.0], requires_grad=True)
    return x, torch.sqrt((x - torch.zeros(3)) ** 2).sum()


def _entropy() -> tuple[torch.Tensor, torch.Tensor]:
    p = torch.tensor([0.0, 0.5, 1.0], requires_grad=True)
    return p, -(p * torch.log(p)).sum()


def _normalize() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    diff = x - torch.tensor([1.0, 2.0])
    return x, (diff / diff.norm()).sum()


def _power() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.tensor([0.0, 0.0], requires_grad=True)
    return x, (x**2).sum() ** 0.5


# where -> (snippet, the leaf, the singular expression's line text, the same loss in plain torch)
VARIANTS: dict[str, tuple[str, str, str, Callable]] = {
    "top_level": (
        """
        import torch
        x = torch.tensor([0.0, 3.0, 4.0], requires_grad=True)
        y = torch.zeros(3)
        dist = torch.sqrt((x - y) ** 2)
        dist.sum().backward()
        print(x.grad)
        """,
        "x",
        "dist = torch.sqrt((x - y) ** 2)",
        _sqrt,
    ),
    "in_a_function": (
        """
        import torch
        def entropy(p):
            return -(p * torch.log(p)).sum()
        p = torch.tensor([0.0, 0.5, 1.0], requires_grad=True)
        entropy(p).backward()
        print(p.grad)
        """,
        "p",
        "return -(p * torch.log(p)).sum()",
        _entropy,
    ),
    "in_a_loop": (
        """
        import torch
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        for target in [torch.tensor([0.0, 2.0]), torch.tensor([1.0, 2.0])]:
            x.grad = None
            diff = x - target
            unit = diff / diff.norm()
            unit.sum().backward()
        print(x.grad)
        """,
        "x",
        "unit = diff / diff.norm()",
        _normalize,
    ),
    "power": (
        """
        import torch
        x = torch.tensor([0.0, 0.0], requires_grad=True)
        length = (x**2).sum() ** 0.5
        length.backward()
        print(x.grad)
        """,
        "x",
        "length = (x**2).sum() ** 0.5",
        _power,
    ),
}


def producers(build: Callable) -> list[str]:
    """Plain torch: the ops whose output gradient went non-finite from a finite incoming one, as they ran."""
    leaf, loss = build()
    found: list[str] = []

    def bad(grads) -> bool:
        return any(g is not None and not torch.isfinite(g).all() for g in grads)

    seen, todo, handles = set(), [loss.grad_fn], []
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        handles.append(
            node.register_hook(lambda i, o, n=node: found.append(n.name()) if bad(i) and not bad(o) else None)
        )
        todo.extend(n for n, _ in node.next_functions)
    loss.backward()
    for h in handles:
        h.remove()
    return found


SINGULAR = ("Sqrt", "Log", "Div", "Pow", "Rsqrt", "Reciprocal")


def _line_of(code: str, text: str) -> int:
    return next(i for i, line in enumerate(code.splitlines(), 1) if line.strip() == text)


@pytest.mark.parametrize("where", sorted(VARIANTS))
def test_names_the_node_where_plain_torch_first_went_non_finite(where: str):
    snippet, leaf, site, build = VARIANTS[where]
    code = code_of(snippet)
    plain = run_plain(code)
    assert not torch.isfinite(grads_of(plain.calls[-1], leaf)).all()  # silent: no error, a nan/inf .grad
    first = next(op for op in producers(build) if op.startswith(SINGULAR))
    d = only(code, KIND)
    assert d["severity"] == "warning"
    assert d["line"] == _line_of(code, site)
    assert f"{first} comes from line {d['line']}" in d["message"]


@pytest.mark.parametrize("where", sorted(VARIANTS))
def test_fixes_give_finite_gradients_equal_to_the_original_where_it_was_finite(where: str):
    snippet, leaf, _, _ = VARIANTS[where]
    code = code_of(snippet)
    original = grads_of(run_plain(code).calls[-1], leaf)
    d = only(code, KIND)
    assert d["fixes"]
    for f in d["fixes"]:
        fixed = grads_of(plain_ok(f["code"]).calls[-1], leaf)
        assert torch.isfinite(fixed).all(), f["title"]
        ok = torch.isfinite(original)
        assert torch.allclose(fixed[ok], original[ok], rtol=1e-4, atol=1e-4), f["title"]


@pytest.mark.parametrize(
    "code",
    [
        VARIANTS["top_level"][0].replace("(x - y) ** 2)", "(x - y) ** 2 + 1e-8)"),
        VARIANTS["in_a_function"][0].replace("torch.log(p)", "torch.log(p.clamp(min=1e-8))"),
        VARIANTS["top_level"][0].replace("[0.0, 3.0, 4.0]", "[1.0, 3.0, 4.0]"),
    ],
    ids=["epsilon_already_there", "clamp_already_there", "away_from_the_singular_point"],
)
def test_stays_quiet_when_gradients_are_finite(code: str):
    assert diagnoses(code_of(code)) == []


@pytest.mark.parametrize("where", ["top_level", "in_a_function", "power"])
def test_the_trace_marks_the_nodes_plain_torch_hooks_find(where: str):
    from gradstep.tracer import record

    snippet, _, _, build = VARIANTS[where]
    trace = record(code_of(snippet))
    call = next(s for s in trace["steps"] if s["kind"] != "forward")
    assert [trace["nodes"][i]["op"] for i in call["nonfinite"]] == producers(build)


def test_a_finite_backward_marks_no_node():
    from gradstep.tracer import record

    trace = record(code_of(VARIANTS["top_level"][0]).replace("[0.0, 3.0, 4.0]", "[1.0, 3.0, 4.0]"))
    assert all("nonfinite" not in s for s in trace["steps"])
