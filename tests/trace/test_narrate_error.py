"""Narration of the step where the code raised outside a backward/grad call: the error as plain
Python raises it on the same code, then its autograd cause where the trace shows one (a non-leaf's
.grad, a leaf no backward reached or whose .grad was reset, numpy() of a tensor that requires grad,
an in-place change of a leaf), and no cause where it does not."""

from __future__ import annotations

import textwrap

from gradstep.pipeline import explained
from testkit.learner_code import REBOUND_LEAF_LOOP
from testkit.truth import run_plain


def _code(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def _line_of(code: str, text: str) -> int:
    return next(i for i, line in enumerate(code.splitlines(), 1) if text in line)


def _error_step(code: str) -> tuple[dict, dict]:
    """The trace of ``code`` and its error step, checked against the error plain Python raises."""
    trace = explained(code)
    step = trace["steps"][-1]
    assert step["kind"] == "error"
    expected = run_plain(code).error
    assert expected is not None
    assert {k: step["error"].get(k) for k in ("type", "message", "line")} == expected
    return trace, step


def _linked(trace: dict, step: dict) -> list[tuple[str, str]]:
    """(text, what it links to: a node's op or a tensor's name) of each link of the narration."""
    text = step["explanation"]
    return [
        (
            text[link["start"] : link["end"]],
            trace["nodes"][link["node"]]["op"] if link["node"] is not None else link["tensor"],
        )
        for link in step["links"]
    ]


def _head(code: str, step: dict, statement: str) -> str:
    return (
        f"`{statement}` (line {_line_of(code, statement)}) raised {step['error']['type']}, which ended the run: "
        "the graph is shown as it stood then."
    )


REBOUND = REBOUND_LEAF_LOOP


def test_a_none_grad_of_a_rebound_name_is_narrated_as_a_non_leaf_and_where_it_became_one():
    trace, step = _error_step(REBOUND)
    text = step["explanation"]
    update = _line_of(REBOUND, "w = w - 0.1")
    assert text.startswith(_head(REBOUND, step, "w = w - 0.1 * w.grad"))
    assert (
        f"`w.grad` is None: `w` names a non-leaf since line {update} (SubBackward0), and torch keeps .grad only "
        "for leaves (or tensors that called retain_grad())." in text
    )
    # the leaf w named before still takes the gradient: the second backward accumulated into it
    backward = [s for s in trace["steps"] if s["kind"] == "backward"][-1]
    assert (
        f"the backward at line {backward['line']} (step {backward['index'] + 1}) accumulated into its .grad, "
        "not into `w`'s." in text
    )
    assert ("SubBackward0", "SubBackward0") in _linked(trace, step)
    # the old leaf goes by the label the trace lists it under once `w` names another tensor
    (old,) = [t["name"] for t in step["tensors"] if t.get("unnamed") and t.get("was") == "w"]
    assert (f"AccumulateGrad ({old})", "AccumulateGrad") in _linked(trace, step)


def test_a_none_grad_of_a_leaf_no_backward_reached_says_so():
    code = _code(
        """
        import torch
        w = torch.randn(3, requires_grad=True)
        w.grad.zero_()
        """
    )
    trace, step = _error_step(code)
    assert step["explanation"] == _head(code, step, "w.grad.zero_()") + (
        " w.grad is None: w is a leaf that requires grad, but no backward call has reached it yet: "
        "a leaf's .grad stays None until one does."
    )
    assert ("w.grad", "w") in _linked(trace, step)


def test_a_none_grad_after_zero_grad_says_when_it_last_held_a_gradient():
    code = _code(
        """
        import torch
        w = torch.ones(3, requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.1)
        (w * 2).sum().backward()
        opt.zero_grad()
        print(w.grad * 2)
        """
    )
    trace, step = _error_step(code)
    held = next(s for s in trace["steps"] if s["kind"] == "backward")
    assert held["tensors"][0]["grad"] is not None
    assert (
        f"w.grad is None: it held a gradient at step {held['index'] + 1} (line {held['line']}) and was set back to "
        "None since" in step["explanation"]
    )


def test_numpy_of_a_tensor_in_the_graph_names_its_grad_fn_and_the_detach():
    code = _code(
        """
        import torch
        w = torch.ones(3, requires_grad=True)
        y = w * 2
        a = y.numpy()
        """
    )
    trace, step = _error_step(code)
    text = step["explanation"]
    assert text.startswith(_head(code, step, "a = y.numpy()"))
    assert "y is computed in the graph (its grad_fn is MulBackward0), so it requires grad" in text
    assert "`y.detach().numpy()` gives the same values without the graph." in text
    assert ("MulBackward0", "MulBackward0") in _linked(trace, step)


def test_numpy_of_a_leaf_that_requires_grad_says_it_is_one():
    code = _code(
        """
        import torch
        w = torch.ones(3, requires_grad=True)
        a = w.numpy()
        """
    )
    _, step = _error_step(code)
    assert "w is a leaf that requires grad: torch will not hand its memory to NumPy" in step["explanation"]


def test_an_in_place_change_of_a_leaf_says_why_torch_refuses_and_what_keeps_it_a_leaf():
    code = _code(
        """
        import torch
        w = torch.ones(3, requires_grad=True)
        (w * 2).sum().backward()
        w -= 0.1 * w.grad
        """
    )
    _, step = _error_step(code)
    text = step["explanation"]
    assert text.startswith(_head(code, step, "w -= 0.1 * w.grad"))
    assert "It changes w in place, and `w` is a leaf that requires grad" in text
    assert "Under torch.no_grad() the change is not recorded and `w` stays the same leaf." in text


def test_an_error_without_an_autograd_cause_is_said_plainly():
    code = _code(
        """
        import torch
        a = torch.ones(3, 4, requires_grad=True)
        b = torch.ones(5, 4)
        c = a @ b
        """
    )
    _, step = _error_step(code)
    assert step["explanation"] == _head(code, step, "c = a @ b")


def test_a_none_grad_the_trace_cannot_explain_gets_no_cause():
    # x does not require grad: the trace lists w, not x, so nothing it shows explains the None
    code = _code(
        """
        import torch
        w = torch.ones(2, requires_grad=True)
        x = torch.ones(2)
        print(x.grad * 2)
        """
    )
    _, step = _error_step(code)
    assert step["explanation"] == _head(code, step, "print(x.grad * 2)")


def test_a_name_error_inside_a_function_names_the_functions_line():
    code = _code(
        """
        import torch
        def f(t):
            return t * undefined_name
        f(torch.ones(2, requires_grad=True))
        """
    )
    _, step = _error_step(code)
    assert step["explanation"] == _head(code, step, "return t * undefined_name")
