"""When two recorded gradients are "the same": one rule for the narration, the diagnoses and the
page (``frontend/grad-equality.js`` mirrors it; ``tests/frontend/same_grad_cases.json`` holds the
cases both must agree on).

The trace rounds each value to the digits torch prints (at least 4 significant digits) and each
norm to 9. Within one run a recorded value is exact, so any difference is a change: tolerance 0.
Across two runs (a snippet and its fix) float noise may move the last printed digit by one unit.
"""

from __future__ import annotations

from itertools import chain
from typing import Any

from gradstep.trace_dicts import GradDict

SAME_RUN = 0.0
ACROSS_RUNS = 1.01e-3  # one unit of a 4th significant digit, relative to the value


def flat_values(values: Any) -> list:
    """A grad's nested ``values`` (JSON data) as one flat list."""
    if not isinstance(values, list):
        return [values]
    out = values
    while out and set(map(type, out)) == {list}:  # a whole level of lists: joined in C, not per value
        out = list(chain.from_iterable(out))
    if list in map(type, out):  # ragged (lists beside numbers): not a tensor's, but flattened all the same
        return _flattened(out)
    return list(out)


def _flattened(values: list) -> list:
    out: list = []
    for v in values:
        out.extend(_flattened(v) if isinstance(v, list) else [v])
    return out


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _close(x: Any, y: Any, tolerance: float, scale: float) -> bool:
    if not (_number(x) and _number(y)):
        return x == y  # "nan", "inf", "-inf": only themselves
    return abs(x - y) <= tolerance * (max(abs(x), abs(y)) + 0.1 * scale)


def same_grad(a: GradDict | None, b: GradDict | None, tolerance: float = SAME_RUN) -> bool:
    """Both absent, or the same shape, grad_fn-ness and values (the norm where either has no values)
    up to ``tolerance`` relative to each value (plus a tenth of it relative to the largest)."""
    if a is b:  # the tracer reuses a tensor's record while nothing in it changed
        return True
    if a is None or b is None:
        return False
    if a["shape"] != b["shape"] or a["has_grad_fn"] != b["has_grad_fn"]:
        return False
    va, vb = a.get("values"), b.get("values")
    if va is not None and vb is not None:
        if tolerance == 0:  # nested alike (the same shape): equal exactly when their flat values are
            return va == vb
        xs, ys = flat_values(va), flat_values(vb)
        if len(xs) != len(ys):
            return False
        both = xs + ys
        if set(map(type, both)) <= {float, int}:  # no "nan"/"inf" (nor a bool): the max in C
            scale = max(map(abs, both), default=0.0)
        else:
            scale = max((abs(v) for v in both if _number(v)), default=0.0)
        return all(_close(x, y, tolerance, scale) for x, y in zip(xs, ys, strict=True))
    na, nb = a["norm"], b["norm"]
    if na is None or nb is None:
        return na is nb
    return _close(na, nb, tolerance, 0.0)


def same_grads(a: dict[str, GradDict], b: dict[str, GradDict], tolerance: float = ACROSS_RUNS) -> bool:
    """Two runs' name -> .grad maps: the same names, each the same gradient (none: not the same)."""
    return bool(a) and a.keys() == b.keys() and all(same_grad(a[k], b[k], tolerance) for k in a)
