"""One "same gradient" rule: the server's and the page's agree on a shared case table, with the
same tolerances; and the across-runs tolerance holds for a real rerun in plain torch."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from gradstep import grad_equality
from gradstep.tracer.grads import GradRecords
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
TABLE = json.loads((ROOT / "tests" / "frontend" / "same_grad_cases.json").read_text())


@pytest.mark.parametrize("case", TABLE["cases"], ids=lambda c: c["why"])
def test_case_table(case):
    tolerance = getattr(grad_equality, case["tolerance"])
    assert grad_equality.same_grad(case["a"], case["b"], tolerance) is case["same"]
    assert grad_equality.same_grad(case["b"], case["a"], tolerance) is case["same"]


def test_the_page_states_the_same_tolerances():
    js = (ROOT / "frontend" / "grad-equality.js").read_text()
    for name in ("SAME_RUN", "ACROSS_RUNS"):
        stated = re.search(rf"export const {name} = ([0-9.e+-]+);", js)
        assert stated and float(stated.group(1)) == getattr(grad_equality, name)


def test_a_rerun_with_float_noise_is_the_same_and_a_one_percent_change_is_not():
    torch.manual_seed(0)
    w, x = torch.randn(64, 8), torch.randn(8, requires_grad=True)
    (w @ x).pow(2).sum().backward()
    noisy = x.grad.clone()
    x64 = x.detach().double().requires_grad_()
    (w.double() @ x64).pow(2).sum().backward()  # the same math, summed in another precision
    rerun = x64.grad.float()
    assert not torch.equal(noisy, rerun)  # the noise is real
    a, b, changed = GradRecords(max_values=64).records([noisy, rerun, noisy * 1.01])
    assert grad_equality.same_grad(a, b, grad_equality.ACROSS_RUNS)
    assert not grad_equality.same_grad(a, changed, grad_equality.ACROSS_RUNS)


_JSON_VALUE = st.one_of(st.floats(allow_nan=False), st.integers(), st.sampled_from(["nan", "inf", "-inf"]))


@given(st.recursive(_JSON_VALUE, lambda inner: st.lists(inner, max_size=4), max_leaves=40))
def test_flat_values_reads_nested_lists_left_to_right_even_ragged_ones(values):
    def reference(v):  # the plain recursive reading
        return [x for item in v for x in reference(item)] if isinstance(v, list) else [v]

    assert grad_equality.flat_values(values) == reference(values)


@given(st.lists(st.lists(_JSON_VALUE, min_size=2, max_size=2), max_size=6), st.booleans())
def test_within_one_run_the_same_means_each_value_equal(rows, change):
    a = {"shape": [len(rows), 2], "has_grad_fn": False, "values": rows, "norm": 1.0}
    b = {**a, "values": [[*r[:1], "nan" if change else r[1]] for r in rows]}
    changed = change and any(r[1] != "nan" for r in rows)
    assert grad_equality.same_grad(a, b, grad_equality.SAME_RUN) is not changed
