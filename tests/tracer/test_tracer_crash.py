"""The code's failure outside a backward/grad call is a step of its own: the last one, at the line
that raised, with the graph and the ``.grad`` of every named tensor as plain torch has them when the
exception is raised. A failed call that ends the run keeps its own step and gets no second one."""

from __future__ import annotations

import textwrap

import gradstep
import pytest
import torch
from gradstep.tracer import Limits, record
from testkit import truth


def _code(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def _line_of(code: str, text: str) -> int:
    return next(i for i, line in enumerate(code.splitlines(), 1) if text in line)


def _plain_at_exception(code: str) -> tuple[dict, dict[str, torch.Tensor | None]]:
    """Run ``code`` under plain torch to its exception: the error as Python reports it ({type,
    message, line}) and the .grad of every tensor that can hold one, named in the globals or in the
    frames the exception left (the raising frame's locals)."""
    globs: dict = {"__name__": "__main__"}
    try:
        exec(compile(code, truth.SNIPPET, "exec"), globs)
    except Exception as e:  # noqa: BLE001 - the code's own failure is what is compared
        frames = []
        tb = e.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == truth.SNIPPET and tb.tb_frame.f_locals is not globs:
                frames.append(dict(tb.tb_frame.f_locals))
            tb = tb.tb_next
        grads: dict[str, torch.Tensor | None] = {}
        for scope in [globs, *frames]:
            for t, names in truth.named_tensors_in(scope).values():
                if (t.is_leaf and t.requires_grad) or t.retains_grad:
                    for name in names:
                        grads[name] = None if t.grad is None else t.grad.detach().clone()
        return truth._error(e), grads
    raise AssertionError("the code did not raise")


def _error_step(trace: dict) -> dict:
    last = trace["steps"][-1]
    assert last["kind"] == "error", [s["kind"] for s in trace["steps"]]
    return last


# w and b are updated each iteration; `b = b - 0.1 * b.grad` makes b a non-leaf, whose .grad is None
# in the second iteration: TypeError at that line, w a leaf with the gradient of two backward calls
REBOUND = _code(
    """
    import torch
    w = torch.ones(3, requires_grad=True)
    b = torch.zeros(3, requires_grad=True)
    x = torch.tensor([1., 2., 3.])
    for epoch in range(3):
        y = (w * x + b).sum()
        y.backward()
        b = b - 0.1 * b.grad
    """
)

IN_PLACE = _code(
    """
    import torch
    w = torch.ones(3, requires_grad=True)
    (w * 2).sum().backward()
    w -= 0.1 * w.grad
    """
)

# the failure inside a function: its local leaf is named at the failure
IN_A_FUNCTION = _code(
    """
    import torch
    def train(steps):
        p = torch.ones(2, requires_grad=True)
        for _ in range(steps):
            (p * 3).sum().backward()
        return p.grad + undefined_name
    train(2)
    """
)


@pytest.mark.parametrize(
    "code", [REBOUND, IN_PLACE, IN_A_FUNCTION], ids=["rebound", "in-place", "in-a-function"]
)
def test_the_error_step_is_the_last_at_the_line_python_reports_with_its_error(code):
    error, _ = _plain_at_exception(code)
    trace = record(code)
    step = _error_step(trace)
    assert step["line"] == error["line"]
    assert {k: step["error"].get(k) for k in ("type", "message", "line")} == error
    assert trace["status"] == "error" and trace["error"]["message"] == error["message"]


@pytest.mark.parametrize(
    "code", [REBOUND, IN_PLACE, IN_A_FUNCTION], ids=["rebound", "in-place", "in-a-function"]
)
def test_the_error_step_shows_every_grad_as_plain_torch_has_it_at_the_exception(code):
    _, expected = _plain_at_exception(code)
    assert expected, "the comparison needs a tensor that can hold a .grad"
    tensors = {te["name"]: te for te in _error_step(record(code))["tensors"]}
    for name, grad in expected.items():
        assert name in tensors, f"{name} is not listed at the error step"
        problem = truth.grad_mismatch(grad, tensors[name].get("grad"))
        assert problem is None, f"{name}.grad: {problem}"


def test_the_error_step_shows_the_graph_the_names_reach_at_the_failure():
    trace = record(REBOUND)
    step = _error_step(trace)
    # b names the SubBackward0 of the first iteration's update, still alive at the failure
    named = [
        trace["nodes"][st["id"]]
        for st in step["nodes"]
        if "b" in st.get("vars", []) and not st.get("dropped")
    ]
    assert [(info["op"], info["line"]) for info in named] == [
        ("SubBackward0", _line_of(REBOUND, "b = b - 0.1"))
    ]


def test_what_was_printed_before_the_failure_is_the_error_steps_output():
    code = _code(
        """
        import torch
        x = torch.ones(2, requires_grad=True)
        y = (x * 2).sum()
        print("before")
        y.grad_fn.next_functions[5]
        """
    )
    step = _error_step(record(code))
    assert step["stdout"] == "before\n"


def test_a_failing_op_leaves_no_empty_forward_step_before_the_error():
    # the op that fails took a sequence number: its line looked as if it built a node
    code = _code(
        """
        import torch
        a = torch.ones(3, 4, requires_grad=True)
        b = torch.ones(5, 4)
        c = a @ b
        """
    )
    trace = record(code)
    assert [(s["kind"], s["line"]) for s in trace["steps"]] == [("error", _line_of(code, "a @ b"))]


def test_a_failed_backward_that_ends_the_run_keeps_its_step_and_gets_no_second():
    code = _code(
        """
        import torch
        x = torch.ones(3, requires_grad=True)
        y = (x * x).sum()
        y.backward()
        y.backward()
        """
    )
    trace = record(code)
    assert [s["kind"] for s in trace["steps"]] == ["forward", "backward", "backward"]
    assert trace["steps"][-1]["error"]["message"] == trace["error"]["message"]


def test_an_error_raised_after_a_caught_failed_call_gets_its_step():
    code = _code(
        """
        import torch
        x = torch.ones(3, requires_grad=True)
        y = (x * x).sum()
        y.backward()
        try:
            y.backward()
        except RuntimeError as e:
            raise ValueError("the second backward failed") from e
        """
    )
    trace = record(code)
    assert [s["kind"] for s in trace["steps"]] == ["forward", "backward", "backward", "error"]
    assert _error_step(trace)["line"] == _line_of(code, "raise ValueError")


def test_a_run_that_raised_before_there_was_anything_to_show_has_no_step():
    trace = record("import torch\nx = torch.ones(2)\nprint(undefined_name)\n")
    assert trace["status"] == "error" and trace["error"]["type"] == "NameError"
    assert trace["steps"] == []


def test_a_run_that_ends_normally_has_no_error_step():
    trace = record("import torch\nx = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()\n")
    assert trace["status"] == "ok"
    assert all(s["kind"] != "error" for s in trace["steps"])


def test_past_the_step_cap_there_is_no_error_step():
    trace = record(IN_PLACE, Limits(max_steps=2))
    assert "steps" in trace["truncated"]
    assert [s["kind"] for s in trace["steps"]] == ["forward", "backward"]
    assert trace["error"]["type"] == "RuntimeError"


def _live_failure(x: torch.Tensor) -> None:
    y = x * 2
    y.grad.zero_()  # y is not a leaf: its .grad is None


def test_a_recording_of_the_callers_own_code_gets_the_error_step_too():
    x = torch.ones(2, requires_grad=True)
    rec = gradstep.record(watch={"x": x})
    with pytest.raises(AttributeError) as info, rec:
        _live_failure(x)
    trace = rec.data
    step = _error_step(trace)
    assert step["error"]["type"] == "AttributeError" and step["error"]["message"] == str(info.value)
    assert trace["files"][step["file"]]["path"].endswith("test_tracer_crash.py")
    assert step["line"] == _live_failure.__code__.co_firstlineno + 2
