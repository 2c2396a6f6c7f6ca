"""retain_grad() called after the only backward that reached the tensor: its line is a step, the
narration says why .grad stays None, and the diagnosis moves the call before the backward; the
fixed snippet fills .grad as plain PyTorch does. A retain_grad() that a later backward honours,
or one before the backward, stays silent."""

from __future__ import annotations

import pytest
import torch
from gradstep.pipeline import explained
from test_diagnose import close, code_of, diagnoses, grads_of, only, plain_ok
from testkit.truth import run_plain

KIND = "grad_of_non_leaf"

VARIANTS = {
    "top_level": """
        import torch
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        h = x * 3
        z = (h * h).sum()
        z.backward()
        h.retain_grad()
        print(h.grad)
        """,
    "in_a_function": """
        import torch
        def step(x):
            h = x.tanh() * 2
            loss = h.pow(2).sum()
            loss.backward()
            h.retain_grad()
            return h
        x = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
        h = step(x)
        print(h.grad)
        """,
    "two_backwards_then_late": """
        import torch
        w = torch.tensor([1.0, -2.0], requires_grad=True)
        h = w.exp()
        (h.sum() * 2).backward(retain_graph=True)
        (h ** 2).sum().backward()
        h.retain_grad()
        print(h.grad, w.grad)
        """,
}

SILENT = {
    "retain_before_backward": """
        import torch
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        h = x * 3
        h.retain_grad()
        (h * h).sum().backward()
        print(h.grad)
        """,
    "late_but_a_later_backward_fills_it": """
        import torch
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        h = x * 3
        z = (h * h).sum()
        z.backward(retain_graph=True)
        h.retain_grad()
        z.backward()
        print(h.grad)
        """,
    "retain_grad_on_a_leaf": """
        import torch
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        (x * x).sum().backward()
        x.retain_grad()
        print(x.grad)
        """,
    "never_backward": """
        import torch
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        h = x * 3
        h.retain_grad()
        print(h.grad)
        """,
}


def _retained_name(code: str) -> str:
    line = next(ln for ln in code.splitlines() if ".retain_grad()" in ln)
    return line.strip().split(".retain_grad()")[0]


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_late_retain_grad_is_found_at_its_line_and_the_fix_fills_grad_as_plain_torch(variant):
    code = code_of(VARIANTS[variant])
    name = _retained_name(code)
    original = run_plain(code)
    assert original.error is None and original.stdout.startswith("None")  # plain torch: .grad is None
    d = only(code, KIND)
    assert code.splitlines()[d["line"] - 1].strip() == f"{name}.retain_grad()"
    assert "stays None" in d["message"]
    fixed = d["fixes"][0]["code"]
    run = plain_ok(fixed)
    # plain torch on the fixed code: the backward now keeps h's gradient, every other grad unchanged
    assert grads_of(run.calls[-1], name) is not None
    for call_fixed, call_original in zip(run.calls, original.calls, strict=True):
        for names, g in call_original.grads.items():
            if g is not None:
                assert close(call_fixed.grads[names], g)


@pytest.mark.parametrize("variant", SILENT)
def test_retain_grad_that_works_or_does_nothing_stays_silent(variant):
    assert [d["kind"] for d in diagnoses(code_of(SILENT[variant]))] == []


def test_the_retain_grad_line_is_a_step_showing_the_tensor_retained_as_plain_torch_does():
    code = code_of(SILENT["retain_before_backward"])
    trace = explained(code)
    at = next(s for s in trace["steps"] if s.get("line") == 4)  # h.retain_grad()
    assert at["kind"] == "forward"
    h = next(t for t in at["tensors"] if t["name"] == "h")
    ns: dict = {}
    exec(code.split("(h * h)")[0], ns)  # plain torch up to the same point
    assert h["retains_grad"] is ns["h"].retains_grad is True and h["is_leaf"] is ns["h"].is_leaf
    assert "From here on, a backward that reaches h's grad_fn keeps it in h.grad." in at["explanation"]
    assert any(link["tensor"] == "h" for link in at["links"])


def test_the_late_step_says_which_backward_already_ran_through_the_tensor():
    code = code_of(VARIANTS["top_level"])
    trace = explained(code)
    late = next(s for s in trace["steps"] if s.get("line") == 6)
    call = next(s for s in trace["steps"] if s["kind"] == "backward")
    assert (
        f"The backward at line {call['line']} (step {call['index'] + 1}) already ran through"
        in late["explanation"]
    )
    assert "h.grad stays None until a backward runs after it." in late["explanation"]
    h_node = next(t for t in late["tensors"] if t["name"] == "h")["node"]
    assert any(link["node"] == h_node for link in late["links"])
    assert torch.is_tensor(run_plain(code).calls[0].grads[frozenset({"x"})])
