"""Numbers as torch prints them: gradstep.printing and its twin frontend/printing.js against torch.

The expected strings come from torch's own printing of the same tensors (server/testkit/torch_print.py),
with the one documented widening (fixed mode keeps 4 significant digits of each value's own).
Values go through the tracer's records first (tracer/grads.py rounds them to the printed digits
and records torch's mode), as every front end receives them.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
import torch
from gradstep.printing import fmt_number, fmt_values, leaves, mode_of, modes_of
from gradstep.tracer import record
from gradstep.tracer.grads import GradRecords
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testkit.torch_print import printed, printed_number, torch_elements
from torch._tensor_str import _Formatter

ROOT = Path(__file__).resolve().parents[2]
MAX_VALUES = 64
HALVES = (torch.float16, torch.bfloat16)


def elements(text: str) -> list[str]:
    """The numbers of a printed (nested) tensor: '[[1., 2.], [3., 4.]]' -> ['1.', '2.', '3.', '4.']."""
    return [s for s in re.split(r"[\[\],\s]+", text) if s]


def shown(rec: dict) -> list[str]:
    return elements(fmt_values(rec["values"], rec["dtype"], rec["format"]))


def torch_norm(t: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(t.float() if t.dtype in HALVES else t)


def torch_mode(t: torch.Tensor) -> str:
    f = _Formatter(t.reshape(-1))
    return "sci" if f.sci_mode else "int" if f.int_mode else "fixed"


def complex_printed(t: torch.Tensor) -> list[str]:
    """Elements of a complex tensor: torch's own where no part is widened, else its parts joined
    as torch joins them (the imaginary part's sign, or +)."""
    real, imag = printed(t.real), printed(t.imag)
    if real == torch_elements(t.real) and imag == torch_elements(t.imag):
        return torch_elements(t)
    return [re_ + (im if im[0] in "+-" else "+" + im) + "j" for re_, im in zip(real, imag, strict=True)]


def _traced_grad(code: str, name: str) -> dict:
    tr = record(code)
    return next(t for t in tr["steps"][-1]["tensors"] if t["name"] == name)["grad"]


# ------------------------------------------------------------------ the issue's examples

ISSUE = """
import torch
x = torch.tensor([0.016021, 0.0012345, 1.09, 3209.9], requires_grad=True)
(x * x / 2).sum().backward()
"""

COMPLEX = """
import torch
z = torch.tensor([1+2j, 3-1j], requires_grad=True)
(z * z.conj()).real.sum().backward()
"""


def _plain(code: str) -> dict:
    scope: dict = {}
    exec(compile(code, "<plain>", "exec"), scope)
    return scope


def test_a_grad_spanning_magnitudes_shows_each_value_as_torch_prints_it():
    grad = _plain(ISSUE)["x"].grad
    got = _traced_grad(ISSUE, "x")
    assert shown(got) == torch_elements(grad)  # sci mode: exactly torch's, 5 digits of each value
    assert fmt_number(got["norm"]) == printed_number(torch_norm(grad))


def test_a_complex_grad_records_its_values_and_prints_them_as_torch():
    grad = _plain(COMPLEX)["z"].grad
    got = _traced_grad(COMPLEX, "z")
    assert got["dtype"] == "complex64"
    assert got["values"] == [[v.real, v.imag] for v in grad.tolist()]
    assert shown(got) == torch_elements(grad)
    assert fmt_number(got["norm"]) == printed_number(torch_norm(grad))


def test_fixed_mode_widens_only_values_below_a_tenth():
    t = torch.tensor([0.0012345, 0.5, 1.0625])
    got = GradRecords(MAX_VALUES).records([t])[0]
    assert torch_mode(t) == "fixed"
    want = torch_elements(t)
    assert shown(got)[1:] == want[1:]  # torch's own 4 decimals
    assert shown(got)[0] == torch_elements(t, precision=6)[0] != want[0]  # 4 digits of its own


def test_a_value_rounding_to_an_integer_keeps_the_mode_torch_chose():
    t = torch.tensor([0.99999994, 3.0])  # rounds to [1.0, 3.0]: integers, but torch prints 1.0000
    got = GradRecords(MAX_VALUES).records([t])[0]
    assert got["values"] == [1.0, 3.0] and got["format"] == [torch_mode(t)] == ["fixed"]
    assert shown(got) == torch_elements(t)


def test_non_finite_values_are_written_and_shown_as_torch_prints_them():
    t = torch.tensor([math.nan, -math.inf, 2.5, math.inf])
    got = GradRecords(MAX_VALUES).records([t])[0]
    spelled = [s for s in torch_elements(t) if s in ("nan", "inf", "-inf")]
    assert [v for v in got["values"] if isinstance(v, str)] == spelled  # JSON has no number for them
    assert got["values"][2] == t[2].item()
    assert shown(got) == torch_elements(t)
    assert b"NaN" not in orjson.dumps(got)


# ------------------------------------------------------------------ random tensors

_DTYPES = st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16])
_SPECIALS = st.sampled_from([0.0, -0.0, math.nan, math.inf, -math.inf, 1e-30, 0.5, 2.5, 3.0, 1e9])


@st.composite
def _real(draw) -> torch.Tensor:
    shape = draw(st.sampled_from([(), (1,), (5,), (3, 4), (64,), (2, 3, 2)]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    t = torch.randn(shape, dtype=torch.float64, generator=gen)
    spread = draw(st.sampled_from([0, 1, 3, 6]))  # decades the values span
    t = t * 10.0 ** (torch.randint(0, spread + 1, shape, generator=gen) + draw(st.integers(-8, 8)))
    if draw(st.booleans()):
        t = t.round()  # integers: int mode
    if t.numel() and draw(st.booleans()):
        t.view(-1)[draw(st.integers(0, t.numel() - 1))] = draw(_SPECIALS)
    return t.to(draw(_DTYPES))


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_real(), min_size=1, max_size=6))
def test_recorded_values_and_norms_print_as_torch_prints_the_tensor(batch):
    for t, rec in zip(batch, GradRecords(MAX_VALUES).records(batch), strict=True):
        assert rec["format"] == [torch_mode(t)], (t, rec)
        assert shown(rec) == printed(t), (t, rec)
        norm = torch_norm(t)
        if math.isfinite(float(norm)):
            assert fmt_number(rec["norm"]) == printed_number(norm), (t, rec)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(_real(), _real())
def test_complex_values_print_each_part_in_its_own_mode_as_torch(real, imag):
    if real.shape != imag.shape:
        imag = imag.reshape(-1)[: real.numel()].reshape(real.shape) if imag.numel() >= real.numel() else None
    if imag is None:
        return
    t = torch.complex(real.double(), imag.double()).to(torch.complex64)
    rec = GradRecords(MAX_VALUES).records([t])[0]
    assert rec["format"] == [torch_mode(t.real), torch_mode(t.imag)]
    assert shown(rec) == complex_printed(t), (t, rec)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(_real())
def test_the_mode_of_unrounded_values_is_torchs(t):
    t = t.double()
    assert mode_of(t.reshape(-1).tolist()) == torch_mode(t)
    assert elements(fmt_values(t.tolist())) == printed(t)


def test_a_lone_number_prints_as_a_0d_tensor():
    for v in (448.0, 0.99999994, 1e-5, 123456789.0, 3.0e8, 0.0, -0.0, 0.05, -2.5):
        assert fmt_number(v) == printed_number(v), v


# ------------------------------------------------------------------ the JS twin


def _cases() -> tuple[list[torch.Tensor], list[dict]]:
    gen = torch.Generator().manual_seed(0)
    tensors: list[torch.Tensor] = []
    for k in range(120):
        shape = [(), (4,), (2, 3), (64,)][k % 4]
        t = torch.randn(shape, dtype=torch.float64, generator=gen) * 10.0 ** (k % 17 - 8)
        if k % 5 == 0:
            t = t * 10.0 ** torch.randint(0, 5, shape, generator=gen)  # spans decades: sci
        if k % 7 == 0:
            t = t.round()
        if k % 11 == 0 and t.numel():
            t.view(-1)[0] = [math.nan, math.inf, -0.0, 0.0][k % 4]
        tensors.append(t if k % 3 else t.float())
    z = _plain(COMPLEX)["z"].grad
    tensors += [z, torch.complex(torch.randn(5, generator=gen), torch.randn(5, generator=gen) * 1e-6)]
    return tensors, GradRecords(MAX_VALUES).records(tensors)


def _node(cases: list[dict]) -> list[dict]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("needs node")
    out = subprocess.run(
        [node, str(ROOT / "server" / "testkit" / "printing_node.mjs")],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def test_the_js_twin_prints_recorded_values_and_norms_as_torch():
    tensors, records = _cases()
    answers = _node([{**r, "values": r.get("values")} for r in records])
    for t, rec, js in zip(tensors, records, answers, strict=True):
        want = complex_printed(t) if t.is_complex() else printed(t)
        assert elements(js["values"]) == want == shown(rec), (t, rec, js)
        if rec["norm"] is None:  # not finite: the trace has no number for it
            assert not math.isfinite(float(torch_norm(t)))
            continue
        assert js["norm"] == fmt_number(rec["norm"]) == printed_number(torch_norm(t)), (t, rec, js)


def test_the_js_twin_derives_torchs_mode_from_unrounded_values():
    tensors = [t for t in _cases()[0] if t.dtype == torch.float64 and bool(t.isfinite().all())]
    cases: list[dict[str, Any]] = [{"values": t.tolist(), "dtype": "float64", "norm": None} for t in tensors]
    for t, js in zip(tensors, _node(cases), strict=True):
        assert js["modes"] == modes_of(t.tolist()) == [torch_mode(t)], t
        assert elements(js["derived"]) == printed(t), t


def test_leaves_keep_complex_pairs_whole():
    pairs = [[[1.0, 2.0]], [[3.0, -4.0]]]
    assert leaves(pairs, True) == [[1.0, 2.0], [3.0, -4.0]]
    assert leaves(pairs) == [1.0, 2.0, 3.0, -4.0]


@pytest.mark.parametrize("below", [0.09997, 0.009997, 0.0009997, 0.099997])
def test_a_value_that_rounds_up_to_a_power_of_ten_shows_as_torch_prints_it(below):
    # torch's 4 decimals print 0.09997 as 0.1000: already 4 significant digits, so no widening
    t = torch.tensor([below, 0.5, -0.25], dtype=torch.float64)
    rec = GradRecords(MAX_VALUES).records([t])[0]
    assert rec["format"] == [torch_mode(t)] == ["fixed"]
    assert shown(rec) == printed(t)
