"""Random small graphs: the tracer agrees with plain PyTorch.

Programs are random sequences of unary/binary ops on three leaves, in-place
ops on intermediates, retain_grad calls, and 1-3 backward/grad calls with
random retain_graph flags (some wrapped in try/except so later calls still
run). Each is run by the tracer and by ``truth.run_plain``.
"""

from __future__ import annotations

import torch
from gradstep.tracer import record
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from testkit import truth

LEAVES = {
    "a": "[0.5, -0.3, 0.8]",
    "b": "[1.2, 0.4, -0.7]",
    "c": "[-0.2, 0.9, 0.1]",
}
UNARY = [
    "{x}.sin()",
    "{x}.cos()",
    "{x}.tanh()",
    "{x}.sigmoid()",
    "{x}.exp()",
    "{x} * 2",
    "{x} ** 2",
    "{x}.relu()",
]
BINARY = ["{x} * {y}", "{x} + {y}", "{x} - {y}", "torch.maximum({x}, {y})"]
INPLACE = ["{x}.mul_(2)", "{x}.add_(1)", "{x}.sin_()", "{x}.exp_()"]
CALLS = [
    "{x}.sum().backward(retain_graph={r})",
    "torch.autograd.backward([{x}.sum()], retain_graph={r})",
    "torch.autograd.grad({x}.sum(), [a, b, c], allow_unused=True, retain_graph={r})",
]

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@st.composite
def programs(draw) -> str:
    lines = ["import torch"]
    lines += [f"{k} = torch.tensor({v}, requires_grad=True)" for k, v in LEAVES.items()]
    names = list(LEAVES)
    computed: list[str] = []
    n_calls = draw(st.integers(1, 3))
    calls_done = 0
    for _ in range(draw(st.integers(1, 7)) + n_calls):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "inplace", "retain", "call", "call"]))
        if kind == "call" and calls_done < n_calls:
            call = draw(st.sampled_from(CALLS)).format(x=draw(st.sampled_from(names)), r=draw(st.booleans()))
            if draw(st.booleans()):
                lines += ["try:", f"    {call}", "except RuntimeError:", "    pass"]
            else:
                lines.append(call)
            calls_done += 1
        elif kind in ("inplace", "retain") and computed:
            x = draw(st.sampled_from(computed))
            lines.append(
                draw(st.sampled_from(INPLACE)).format(x=x) if kind == "inplace" else f"{x}.retain_grad()"
            )
        else:
            template = draw(st.sampled_from(BINARY if kind == "binary" else UNARY))
            v = f"v{len(computed)}"
            lines.append(
                f"{v} = " + template.format(x=draw(st.sampled_from(names)), y=draw(st.sampled_from(names)))
            )
            computed.append(v)
            names.append(v)
    while calls_done < n_calls:
        lines.append(
            draw(st.sampled_from(CALLS)).format(x=draw(st.sampled_from(names)), r=draw(st.booleans()))
        )
        calls_done += 1
    return "\n".join(lines) + "\n"


def _both(code: str) -> tuple[dict, truth.PlainRun]:
    note(code)
    torch.manual_seed(0)
    return record(code), truth.run_plain(code, seed=0)


def _assert_none(mismatches: list[str]) -> None:
    assert not mismatches, "\n".join(mismatches)


@SETTINGS
@given(code=programs())
def test_random_graphs_same_calls_and_errors(code):
    trace, plain = _both(code)
    _assert_none(truth.compare_calls(trace, plain) + truth.compare_errors(trace, plain))
    _assert_none(truth.compare_status(trace, plain))


@SETTINGS
@given(code=programs())
def test_random_graphs_same_grads(code):
    trace, plain = _both(code)
    _assert_none(truth.compare_grads(trace, plain) + truth.compare_returned(trace, plain))


@SETTINGS
@given(code=programs())
def test_random_graphs_same_freed_and_stale_flags(code):
    trace, plain = _both(code)
    _assert_none(truth.compare_freed(trace, plain) + truth.compare_stale(trace, plain))


@SETTINGS
@given(code=programs())
def test_random_graphs_same_execution_order(code):
    trace, plain = _both(code)
    _assert_none(truth.compare_order(trace, plain) + truth.compare_failed(trace, plain))
