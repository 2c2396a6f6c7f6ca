"""In-place change of a leaf that requires grad: found where torch raised, fixed under torch.no_grad(),
and the fixed snippet updates the parameter exactly as plain PyTorch does; correct updates stay silent."""

from __future__ import annotations

import pytest
import torch
from test_diagnose import close, code_of, diagnoses, only, plain_ok
from testkit.truth import run_plain

KIND = "inplace_on_leaf"

VARIANTS = {
    "top_level": """
        import torch
        w = torch.tensor([1.0, -2.0], requires_grad=True)
        data = torch.tensor([0.5, 1.5])
        loss = ((w * data).sum() - 1.0) ** 2
        loss.backward()
        w -= 0.1 * w.grad
        print(w)
        """,
    "in_a_function": """
        import torch
        w = torch.tensor([1.0, -2.0], requires_grad=True)
        data = torch.tensor([0.5, 1.5])
        def sgd_step(param, lr):
            param.sub_(lr * param.grad)
            param.grad = None
        for _ in range(3):
            loss = ((w * data).sum() - 1.0) ** 2
            loss.backward()
            sgd_step(w, 0.1)
        print(w)
        """,
    "in_a_loop": """
        import torch
        w = torch.tensor([1.0, -2.0], requires_grad=True)
        data = torch.tensor([0.5, 1.5])
        for _ in range(3):
            loss = ((w * data).sum() - 1.0) ** 2
            loss.backward()
            w -= 0.1 * w.grad
            w.grad.zero_()
        print(w)
        """,
}

# a view of the leaf changed in place: an initialisation of part of it
VIEW = """
    import torch
    w = torch.tensor([1.0, -2.0], requires_grad=True)
    w[0] = 0.0
    loss = (w**2).sum()
    loss.backward()
    print(w.grad)
    """


def namespace(code: str) -> dict:
    """The snippet's globals after running it with plain torch."""
    scope = {"__name__": "__main__"}
    exec(compile(code, "<snippet>", "exec"), scope)
    return scope


def sgd(steps: int) -> torch.Tensor:
    """What the variants mean: plain SGD on ((w * data).sum() - 1)^2 with lr 0.1, fresh gradient each step."""
    w = torch.tensor([1.0, -2.0], requires_grad=True)
    data = torch.tensor([0.5, 1.5])
    for _ in range(steps):
        (g,) = torch.autograd.grad(((w * data).sum() - 1.0) ** 2, w)
        with torch.no_grad():
            w -= 0.1 * g
    return w.detach()


STEPS = {"top_level": 1, "in_a_function": 3, "in_a_loop": 3}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_fires_at_the_line_torch_raised_on(variant: str):
    code = code_of(VARIANTS[variant])
    d = only(code, KIND)
    assert d["severity"] == "error"
    plain = run_plain(code)
    assert "in-place operation" in plain.error["message"]
    assert d["line"] == plain.error["line"]
    assert "torch.no_grad()" in d["message"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_no_grad_fix_updates_the_parameter_as_plain_sgd_does(variant: str):
    code = code_of(VARIANTS[variant])
    fixed = only(code, KIND)["fixes"][0]
    assert fixed["title"].startswith("Make the change under torch.no_grad()")
    plain_ok(fixed["code"])
    w = namespace(fixed["code"])["w"]
    assert w.is_leaf and w.requires_grad  # still the parameter, not a non-leaf copy
    assert close(w.detach(), sgd(STEPS[variant]))


def test_a_view_of_a_leaf_is_named_and_its_fix_gives_the_gradient_of_the_changed_values():
    code = code_of(VIEW)
    d = only(code, KIND)
    assert d["line"] == run_plain(code).error["line"] and "a view of `w`" in d["message"]
    fixed = plain_ok(d["fixes"][0]["code"])
    w = torch.tensor([0.0, -2.0], requires_grad=True)
    (expected,) = torch.autograd.grad((w**2).sum(), w)
    assert close(fixed.calls[-1].grads[frozenset({"w"})], expected)


@pytest.mark.parametrize(
    "code",
    [
        """
        import torch
        w = torch.tensor([1.0, -2.0], requires_grad=True)
        for _ in range(3):
            loss = (w**2).sum()
            loss.backward()
            with torch.no_grad():
                w -= 0.1 * w.grad
            w.grad.zero_()
        """,
        """
        import torch
        w = torch.tensor([1.0, -2.0], requires_grad=True)
        loss = (w**2).sum()
        loss.backward()
        w.data -= 0.1 * w.grad
        """,
        """
        import torch
        w = torch.tensor([1.0, -2.0], requires_grad=True)
        h = w * 2
        h += 1
        h.sum().backward()
        """,
        """
        import torch
        w = torch.tensor([1.0, -2.0], requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            (w**2).sum().backward()
            opt.step()
        """,
    ],
    ids=["update_under_no_grad", "update_through_data", "inplace_on_a_non_leaf", "optimizer_step"],
)
def test_stays_quiet_on_correct_updates(code: str):
    # a write through .data raises nothing: it is named only as the pre-0.4 idiom it is (data_write)
    assert [d["kind"] for d in diagnoses(code_of(code)) if d["kind"] != "data_write"] == []
