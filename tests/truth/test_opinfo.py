"""The tracer agrees with plain torch on PyTorch's own OpInfo sample inputs (server/testkit/opinfo_sweep.py).

By default a fast subset: the first float64 sample of a representative set of ops, chosen among
those the tracer handles today (benchmarks/opinfo_coverage.py lists the ones it does not). The
whole sweep, every op with autograd in float64 and complex128, is marked slow:
    pytest -m slow tests/truth/test_opinfo.py
    GRADSTEP_OPINFO_SAMPLES=0 pytest -m slow tests/truth/test_opinfo.py   # every sample, not the first 10
"""

from __future__ import annotations

import faulthandler
import functools
import os
import signal
import time

import pytest

pytest.importorskip("expecttest", reason="torch's op_db needs expecttest (the test extras)")

from testkit import opinfo_sweep as sweep  # noqa: E402
from testkit import truth  # noqa: E402

# One or two per family: elementwise unary and binary, reductions, views and shape ops,
# indexing, linear algebra (decompositions included), nn.functional, FFT, sorting. Some
# save what their backward needs (the second backward fails), some save nothing (it
# accumulates); cdist and hardsigmoid do not support double backward.
FAST_OPS = (
    "abs",
    "sin",
    "exp",
    "log",
    "tanh",
    "sigmoid",
    "sqrt",
    "erf",
    "add",
    "mul",
    "div.no_rounding_mode",
    "pow",
    "atan2",
    "maximum",
    "where",
    "clamp",
    "sum",
    "mean",
    "prod",
    "amax",
    "std",
    "logsumexp",
    "cumsum",
    "norm",
    "view",
    "reshape",
    "permute",
    "transpose",
    "expand",
    "cat",
    "stack",
    "split",
    "unbind",
    "flip",
    "repeat",
    "index_select",
    "gather",
    "scatter",
    "index_put",
    "masked_fill",
    "mm",
    "matmul",
    "addmm",
    "linalg.det",
    "linalg.inv",
    "linalg.solve",
    "linalg.svd",
    "linalg.qr",
    "linalg.eigh",
    "nn.functional.linear",
    "nn.functional.conv2d",
    "nn.functional.relu",
    "nn.functional.gelu",
    "softmax",
    "nn.functional.layer_norm",
    "nn.functional.max_pool2d",
    "nn.functional.cross_entropy",
    "nn.functional.embedding",
    "cdist",
    "nn.functional.hardsigmoid",
    "fft.rfft",
    "topk",
    "sort",
)
SLOW_SAMPLES = int(os.environ.get("GRADSTEP_OPINFO_SAMPLES", sweep.DEFAULT_SAMPLES)) or None


@functools.cache
def fast_op(name: str):
    (op,) = [op for op in sweep.autograd_ops([name]) if sweep.op_name(op) == name]
    return op


def first_case(name: str) -> sweep.Case:
    return sweep.case(fast_op(name), "float64", 0)


def report(outcomes: list[sweep.Outcome]) -> str:
    lines = []
    for o in outcomes:
        if not o.agrees:
            lines.append(f"{o.case.label}: " + "; ".join(o.problems[:5]))
            lines += [f"    plain torch raised {e}" for e in o.torch_errors]
    return "\n".join(lines)


@pytest.mark.parametrize("name", FAST_OPS)
def test_first_float64_sample_agrees_with_torch(name):
    outcome = sweep.check(first_case(name))
    assert outcome.agrees, report([outcome]) + "\n\nsnippet:\n" + outcome.case.snippet()


def test_snippet_runs_backward_twice_then_double_backward():
    """The comparison is not vacuous: each snippet makes the calls it is meant to, and they reach the inputs."""
    run = truth.run_plain(first_case("sin").snippet())
    assert [c.api for c in run.calls] == ["Tensor.backward"] * 2 + ["torch.autograd.grad", "Tensor.backward"]
    assert truth.FREED_MARK in run.calls[1].error["message"]  # sin saved its input, and freed it
    assert run.calls[3].error is None and run.error is None
    first, double = run.calls[0].grads, run.calls[3].grads
    assert first and all(g is not None for g in first.values())
    assert all(g is not None for g in double.values())


def shifted(values):
    return [shifted(v) for v in values] if isinstance(values, list) else values + 1.0


def test_a_doctored_trace_is_caught(monkeypatch):
    """A trace whose first .grad is off by one everywhere disagrees, and says it is the grads."""
    import gradstep.tracer

    real = gradstep.tracer.record

    def doctored(code: str) -> dict:
        trace = real(code)
        step = truth.call_steps(trace)[0]
        doctor = next(t for t in step["tensors"] if t.get("grad") and t["grad"].get("values"))
        off = doctor | {"grad": doctor["grad"] | {"values": shifted(doctor["grad"]["values"])}}
        step["tensors"] = [off if t is doctor else t for t in step["tensors"]]  # records are shared: copied
        return trace

    monkeypatch.setattr(gradstep.tracer, "record", doctored)
    outcome = sweep.check(first_case("mul"))
    assert outcome.cause is not None and outcome.cause.startswith("grads:")


def fake_check(case: sweep.Case) -> sweep.Outcome:
    """Case 1 crashes its worker (as a fault in the tracer's C reader would), case 2 hangs."""
    if case.index == 1:
        faulthandler.disable()  # pytest's would print this worker's stack
        os.kill(os.getpid(), signal.SIGSEGV)
    if case.index == 2:
        time.sleep(60)
    return sweep.Outcome(case)


def test_sweep_outlives_a_crashing_and_a_hanging_case(monkeypatch):
    monkeypatch.setattr(sweep, "check", fake_check)  # the forked workers inherit it
    cases = tuple(sweep.Case("fake", "", "float64", k, False) for k in range(4))
    outcomes = {o.case.index: o for o in sweep.sweep([sweep.Job(cases)], workers=2, timeout=2.0)}
    assert sorted(outcomes) == [0, 1, 2, 3]
    assert outcomes[0].agrees and outcomes[3].agrees
    assert outcomes[1].cause == f"worker crashed (exit code {-signal.SIGSEGV})"
    assert outcomes[2].cause == "timed out after 2 s"


def slow_ops() -> list:
    return sweep.autograd_ops()


@pytest.mark.slow
@pytest.mark.parametrize("op", slow_ops(), ids=sweep.op_name)
def test_every_sample_agrees_with_torch(op):
    """Each of the op's cases in a forked worker: a tracer crash fails this op, not the session."""
    if not sweep.op_dtypes(op):
        pytest.skip("no float64 or complex128 backward on the CPU")
    outcomes = list(sweep.sweep(sweep.jobs_of([op], SLOW_SAMPLES)))
    assert all(o.agrees for o in outcomes), report(outcomes)
