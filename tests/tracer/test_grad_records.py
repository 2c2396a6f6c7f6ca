"""Gradient records (gradstep.tracer.grads) against plain torch and the documented rounding rule.

docs/trace-format.md: values are rounded to exactly the digits torch prints them with (each
tensor in the mode torch picks for it, fixed mode widened to 4 significant digits of each value's
own; server/testkit/torch_print.py asks torch), with that mode in ``format``; non-finite values are the
strings torch prints; a norm keeps 9 significant digits and at least 4 decimals, and is null when
not finite or not a dense float or complex tensor. Expected numbers come from torch on the same
tensors. Records are built in batches (same-shape gradients stacked, one array for all numbers),
so each test also checks a record does not depend on the batch it came in.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from gradstep.tracer import Limits, record
from gradstep.tracer.grads import NORM_DIGITS, STACK_MAX, GradRecords
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testkit.torch_print import printed, printed_number
from torch._tensor_str import _Formatter

MAX_VALUES = Limits().max_values
HALVES = (torch.float16, torch.bfloat16)
NON_FINITE = ("nan", "inf", "-inf")
EXACT_POWERS = 22  # beyond 1e22 (and below 1e-22) powers of ten are not exact: values stay as they are


def _records(tensors: list[torch.Tensor | None], max_values: int = MAX_VALUES) -> list[dict | None]:
    return GradRecords(max_values).records(tensors)


def _alone(t: torch.Tensor, max_values: int = MAX_VALUES) -> dict:
    return _records([t], max_values)[0]


def _norm_rule_broken(got: float, exact: float) -> str | None:
    """Why ``got`` is not ``exact`` rounded to NORM_DIGITS significant digits, or 4 decimals when
    that keeps more, or ``exact`` itself where that rounding would print unlike torch prints the
    norm (None if it is)."""
    if exact == 0.0:
        return None if got == exact else f"{got} != {exact}"
    unit = min(10.0 ** (math.floor(math.log10(abs(exact))) - (NORM_DIGITS - 1)), 1e-4)
    places = -round(math.log10(unit))
    if got == exact and places <= EXACT_POWERS:
        rounded = round(exact, places)
        if rounded != exact and printed_number(rounded) != printed_number(exact):
            return None  # rounded, it would print unlike torch: kept whole
    # (got is the double nearest the rounded decimal: up to an ulp from it, which past 2**53 / 1e4
    # is more than the 4 decimals themselves)
    if abs(got - exact) > unit / 2 * (1 + 1e-6) + math.ulp(exact):
        return f"{got} is more than half of {unit} from {exact}"
    if places <= EXACT_POWERS and round(got, places) != got:  # round() is correctly rounded
        return f"{got} has more digits than {unit}"
    return None


def _value_rule_broken(got: Any, exact: float, text: str) -> str | None:
    """Why ``got`` is not the value torch prints as ``text`` (None if it is)."""
    if text in NON_FINITE:
        return None if got == text else f"{got!r} for {text}"
    if not isinstance(got, float):
        return f"{got!r} for {text}"
    if got == float(text) and math.copysign(1, got) == math.copysign(1, float(text)):
        return None
    digits = len(text.split("e")[0].split(".")[-1]) - (int(text.split("e")[1]) if "e" in text else 0)
    if abs(digits) > EXACT_POWERS and got == exact:
        return None
    return f"{got!r} is not {text} (torch's print of {exact!r})"


def _flat(values: Any) -> list:
    return [x for v in values for x in _flat(v)] if isinstance(values, list) else [values]


def _nesting(values: Any) -> Any:
    return [_nesting(v) for v in values] if isinstance(values, list) else None


def _mode(t: torch.Tensor) -> str:
    f = _Formatter(t.reshape(-1))
    return "sci" if f.sci_mode else "int" if f.int_mode else "fixed"


def _mismatch(t: torch.Tensor, rec: dict | None) -> str | None:
    """How a record disagrees with torch on ``t`` (None if it agrees)."""
    if rec is None:
        return "no record"
    if rec["shape"] != list(t.shape) or rec["dtype"] != str(t.dtype).removeprefix("torch."):
        return f"shape/dtype {rec['shape']} {rec['dtype']}"
    if rec["has_grad_fn"] != (t.grad_fn is not None):
        return "has_grad_fn"
    if t.dtype not in (*HALVES, torch.float32, torch.float64) or t.layout != torch.strided:
        return None if rec["norm"] is None and "values" not in rec else "numbers for a non-dense tensor"
    norm = float(torch.linalg.vector_norm(t.float() if t.dtype in HALVES else t))
    if not math.isfinite(norm):
        if rec["norm"] is not None:
            return f"norm {rec['norm']} for a non-finite norm"
    elif rec["norm"] is None:
        return f"no norm for {norm}"
    elif bad := _norm_rule_broken(rec["norm"], norm):
        return f"norm: {bad}"
    if t.numel() > MAX_VALUES:
        return None if "values" not in rec and "format" not in rec else "values of a big tensor"
    exact = t.double()
    if _nesting(rec["values"]) != _nesting(exact.tolist()):
        return "values nested unlike tensor.tolist()"
    if t.numel() and rec["format"] != [_mode(t)]:
        return f"format {rec['format']}, torch prints it {_mode(t)}"
    for got, e, text in zip(_flat(rec["values"]), exact.reshape(-1).tolist(), printed(t), strict=True):
        if bad := _value_rule_broken(got, e, text):
            return f"value: {bad}"
    return None


# ------------------------------------------------------------------ the documented rule


def test_values_keep_the_digits_torch_prints_of_each_value():
    t = torch.tensor([0.016021, 0.0012345, 1.09, 3209.9])
    got = _alone(t)
    assert got["format"] == ["sci"]
    assert got["values"] == [float(text) for text in printed(t)]


def test_norm_keeps_nine_significant_digits_of_its_own():
    t = torch.tensor([3.0, 4.0e-3, 1.23456789e-1], dtype=torch.float64)
    norm = float(torch.linalg.vector_norm(t))
    assert _norm_rule_broken(_alone(t)["norm"], norm) is None
    assert _alone(t)["norm"] != round(norm, 4)


def test_a_float32_norm_is_that_float32():
    torch.manual_seed(7)
    for t in (torch.randn(5) * 1e5, torch.randn(3) * 1e-6, torch.randn(9)):
        norm = torch.linalg.vector_norm(t)
        assert torch.tensor(_alone(t)["norm"], dtype=torch.float32) == norm


def test_non_finite_values_are_torchs_words_and_the_rest_round_as_printed():
    t = torch.tensor(
        [float("inf"), 3.14159265, float("nan"), 0.000123456789, float("-inf")], dtype=torch.float64
    )
    got = _alone(t)
    assert _mismatch(t, got) is None
    assert [v for v in got["values"] if isinstance(v, str)] == [s for s in printed(t) if s in NON_FINITE]
    assert got["norm"] is None  # torch: inf


def test_an_all_nan_grad_keeps_its_nans_and_has_no_norm():
    t = torch.full((4,), float("nan"))
    got = _alone(t)
    assert got["values"] == printed(t)
    assert got["norm"] is None


def test_huge_and_tiny_magnitudes_stay_within_the_rule():
    tensors = [
        torch.tensor([1.0e30, 1.23456789e29, -7.0e25], dtype=torch.float64),
        torch.tensor([1.0e-20, 3.33333333e-21], dtype=torch.float64),
        torch.tensor([1.0e300, 2.5e299], dtype=torch.float64),
        torch.tensor([1.0e-300, 5.0e-310, 0.0], dtype=torch.float64),
        torch.tensor([1.0e-20, 3.0e-21]),
    ]
    for t, rec in zip(tensors, _records(tensors), strict=True):
        assert _mismatch(t, rec) is None, (t, rec)


def test_an_all_zero_grad_keeps_its_zeros_and_signs():
    t = torch.tensor([0.0, -0.0, 0.0])
    got = _alone(t)
    assert got["values"] == [0.0, 0.0, 0.0]
    assert [math.copysign(1, v) for v in got["values"]] == [1, -1, 1]
    assert got["norm"] == 0.0


# ------------------------------------------------------------------ batches


def test_same_shape_grads_each_get_their_own_torch_norm_and_values():
    torch.manual_seed(0)
    tensors = [torch.randn(7, 5) * 10.0 ** (k % 9 - 4) for k in range(40)]
    got = _records(tensors)
    for t, rec in zip(tensors, got, strict=True):
        assert _mismatch(t, rec) is None, rec
        assert rec == _alone(t)


def test_half_and_bfloat16_norms_are_float32_norms_rounded():
    torch.manual_seed(1)
    tensors = [(torch.randn(9) * 300).to(dtype) for dtype in HALVES for _ in range(3)]
    tensors += [(torch.randn(11) * 300).to(torch.bfloat16), (torch.randn(200) * 300).to(torch.float16)]
    for t, rec in zip(tensors, _records(tensors), strict=True):
        assert _mismatch(t, rec) is None, rec


def test_mixed_dtypes_of_one_shape_in_one_batch_keep_their_own_precision():
    torch.manual_seed(2)
    base = torch.randn(3, 4, dtype=torch.float64) * 1234.5678
    tensors = [
        base.to(d) for d in (torch.float64, torch.float32, torch.float16, torch.bfloat16) for _ in range(2)
    ]
    for t, rec in zip(tensors, _records(tensors), strict=True):
        assert _mismatch(t, rec) is None, rec
        assert rec == _alone(t)


def test_grads_past_max_values_in_a_batch_get_a_norm_and_no_values():
    torch.manual_seed(3)
    tensors = [torch.randn(10, 10) for _ in range(3)] + [torch.randn(STACK_MAX + 1) for _ in range(2)]
    for t, rec in zip(tensors, _records(tensors), strict=True):
        assert "values" not in rec
        assert _mismatch(t, rec) is None, rec


def test_non_contiguous_grads_match_torch():
    torch.manual_seed(4)
    tensors = [torch.randn(6, 4).t(), torch.randn(5, 4).t(), torch.ones(1).expand(7), torch.randn(8, 3)[::2]]
    for t, rec in zip(tensors, _records(tensors), strict=True):
        assert _mismatch(t, rec) is None, rec


def test_scalar_grads_carry_bare_numbers():
    tensors = [torch.tensor(2.718281828), torch.tensor(-1.0e-3), torch.tensor(12345.678, dtype=torch.float64)]
    got = _records(tensors)
    assert all(isinstance(rec["values"], float) for rec in got)
    for t, rec in zip(tensors, got, strict=True):
        assert _mismatch(t, rec) is None, rec


def test_values_nest_like_tensor_tolist():
    t = torch.arange(12.0).reshape(2, 3, 2) / 7
    got = _records([t, t.clone()])[0]["values"]
    assert [len(got), len(got[0]), len(got[0][0])] == [2, 3, 2]
    assert _mismatch(t, _alone(t)) is None


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 2)])
def test_a_lone_empty_grad_gets_empty_values_and_a_zero_norm(shape):
    t = torch.zeros(shape)
    got = _alone(t)
    assert got["values"] == t.tolist()
    assert got["norm"] == float(torch.linalg.vector_norm(t))


def test_empty_grads_next_to_others_get_empty_values():
    tensors = [torch.zeros(0), torch.zeros(0), torch.ones(3, 0), torch.tensor([1.5, 2.25])]
    got = _records(tensors)
    assert [rec["values"] for rec in got] == [t.tolist() for t in tensors]


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_sparse_grads_are_recorded_as_their_dense_tensors():
    torch.manual_seed(0)
    dense = [torch.randn(3, 3) * torch.eye(3), torch.randn(2, 2)]
    for t, rec in zip(dense, _records([dense[0].to_sparse(), dense[1].to_sparse_csr()]), strict=True):
        assert rec == _alone(t)


def test_a_big_sparse_grad_has_the_dense_norm_and_no_values():
    torch.manual_seed(0)
    t = torch.zeros(50, 4)
    t[[3, 17]] = torch.randn(2, 4)
    rec = _alone(t.to_sparse(), max_values=16)
    assert rec["norm"] == pytest.approx(torch.linalg.vector_norm(t).item(), rel=1e-6)  # float32 sums
    assert "values" not in rec


def _pairs(real: Any, imag: Any) -> Any:
    if isinstance(real, list):
        return [_pairs(a, b) for a, b in zip(real, imag, strict=True)]
    return [real, imag]


def test_complex_grads_carry_re_im_pairs_with_a_mode_for_each_part():
    torch.manual_seed(6)
    z = torch.complex(torch.randn(2, 3), torch.randn(2, 3) * 1e-5)
    tensors = [z, torch.tensor(1.5 - 2j, dtype=torch.complex128), torch.randn(3) + 0j, torch.randn(70) * 1j]
    for t, rec in zip(tensors, _records(tensors), strict=True):
        assert _norm_rule_broken(rec["norm"], float(torch.linalg.vector_norm(t))) is None
        if t.numel() > MAX_VALUES:
            assert "values" not in rec
            continue
        real, imag = t.real.contiguous(), t.imag.contiguous()
        assert rec["format"] == [_mode(real), _mode(imag)]
        # each part rounded as a real tensor of its own is
        assert rec["values"] == _pairs(_alone(real)["values"], _alone(imag)["values"])


def test_meta_grads_have_no_norm_and_no_values():
    t = torch.ones(3, device="meta")
    with pytest.raises((RuntimeError, NotImplementedError)):
        float(torch.linalg.vector_norm(t))  # torch has no number for it either
    got = _records([t, torch.ones(3)])
    assert got[0]["norm"] is None and "values" not in got[0]
    assert got[1]["values"] == [1.0, 1.0, 1.0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_grads_match_torch_next_to_cpu_ones():
    torch.manual_seed(5)
    tensors = [torch.randn(5, device="cuda"), torch.randn(300, device="cuda"), torch.randn(5), torch.randn(5)]
    for t, rec in zip(tensors, _records(tensors), strict=True):
        assert _mismatch(t.cpu(), rec) is None, rec


def test_a_grad_changed_in_place_gets_a_new_record():
    t = torch.tensor([1.0, 2.0])
    records = GradRecords(MAX_VALUES)
    first = records.records([t])[0]
    assert records.records([t])[0] is first
    t.mul_(3)
    assert records.records([t])[0]["values"] == t.tolist()


# ------------------------------------------------------------------ random batches

_DTYPES = st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16])
_SPECIALS = st.sampled_from([0.0, -0.0, math.nan, math.inf, -math.inf, 1e-30, 65504.0, 0.5, 2.5])


@st.composite
def _tensor(draw, shapes: list[tuple[int, ...]]) -> torch.Tensor:
    shape = draw(st.sampled_from(shapes))
    dtype = draw(_DTYPES)
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    t = torch.randn(shape, dtype=torch.float64, generator=gen) * 10.0 ** draw(st.integers(-12, 12))
    if t.numel() and draw(st.booleans()):
        t.view(-1)[draw(st.integers(0, t.numel() - 1))] = draw(_SPECIALS)
    t = t.to(dtype)
    return t.mT if t.dim() >= 2 and draw(st.booleans()) else t


@st.composite
def _batch(draw) -> list[torch.Tensor | None]:
    dims = st.lists(st.integers(0, 6), max_size=3).map(tuple)
    shapes = draw(st.lists(dims | st.just((70,)), min_size=1, max_size=3))  # few shapes: stacks
    return draw(st.lists(_tensor(shapes) | st.none(), max_size=10))


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(_batch())
def test_every_record_of_a_random_batch_agrees_with_torch_and_with_its_record_alone(batch):
    for t, rec in zip(batch, _records(batch), strict=True):
        if t is None:
            assert rec is None
            continue
        assert _mismatch(t, rec) is None, (t, rec)
        assert repr(rec) == repr(_alone(t))  # repr: NaN != NaN


# ------------------------------------------------------------------ in a trace


def test_backward_through_an_empty_leaf_is_traced_to_the_end():
    code = "import torch\nx = torch.zeros(0, requires_grad=True)\nx.sum().backward()\n"
    x = torch.zeros(0, requires_grad=True)
    x.sum().backward()
    tr = record(code)
    assert tr["notes"] == []
    grad = next(t for t in tr["steps"][-1]["tensors"] if t["name"] == "x")["grad"]
    assert grad["values"] == x.grad.tolist()
    assert grad["norm"] == float(torch.linalg.vector_norm(x.grad))
