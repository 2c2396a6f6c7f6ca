"""Gradient records: values for small tensors, the norm for all.

A record is recomputed only when the gradient tensor changed: a different
object, or the same one modified in place (accumulation bumps its version).
Norms are computed for all changed gradients in one ``_foreach_norm`` call.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch

from gradstep.tracer.graph import dtype_name

SIGNIFICANT = 6  # digits kept for values and norms (float32 carries ~7)
_FLOATS = frozenset((torch.float16, torch.bfloat16, torch.float32, torch.float64))
_STRIDED = torch.strided
_NO_VALUES = object()
_POW10 = torch.tensor([float(10**k) for k in range(23)], dtype=torch.float64)  # exact


class GradRecords:
    def __init__(self, max_values: int):
        self.max_values = max_values
        self._cache: dict[int, tuple[weakref.ref, int, dict]] = {}

    def records(self, grads: list[torch.Tensor | None]) -> list[dict | None]:
        out: list[dict | None] = [None] * len(grads)
        todo: list[int] = []
        cache = self._cache
        for i, g in enumerate(grads):
            if g is None:
                continue
            hit = cache.get(id(g))
            if hit is not None and hit[0]() is g and hit[1] == g._version:
                out[i] = hit[2]
            else:
                todo.append(i)
        if not todo:
            return out
        with torch.no_grad():
            fresh = [grads[i] for i in todo]
            dense: list[torch.Tensor] = []  # norms for these
            small: list[torch.Tensor] = []  # and values for these
            for t in fresh:
                if t.dtype in _FLOATS and t.layout is _STRIDED:
                    dense.append(t)
                    if t.numel() <= self.max_values:
                        small.append(t)
            norms = dict(zip(map(id, dense), _norms(dense), strict=True))
            values = dict(zip(map(id, small), _small_values(small), strict=True))
            for i, t in zip(todo, fresh, strict=True):
                rec: dict[str, Any] = {
                    "shape": list(t.shape),
                    "dtype": dtype_name(t.dtype),
                    "has_grad_fn": t.grad_fn is not None,
                    "norm": norms.get(id(t)),
                }
                v = values.get(id(t), _NO_VALUES)
                if v is not _NO_VALUES:
                    rec["values"] = v
                out[i] = rec
                cache[id(t)] = (weakref.ref(t), t._version, rec)
        return out


def _norms(tensors: list[torch.Tensor]) -> list[float | None]:
    if not tensors:
        return []
    half = (torch.float16, torch.bfloat16)
    norms = torch._foreach_norm([t.float() if t.dtype in half else t for t in tensors])
    rounded = _round_significant(torch.stack(norms).double()).tolist()
    return [v if math.isfinite(v) else None for v in rounded]


def _small_values(tensors: list[torch.Tensor]) -> list[Any]:
    """Values of small tensors as nested lists, rounded in one vectorised pass."""
    if not tensors:
        return []
    flat = torch.cat([t.reshape(-1) for t in tensors]).double()  # cat promotes mixed dtypes
    # Precision relative to each tensor's largest element (as allclose's atol would
    # be): tiny entries next to big ones need no more digits than the big ones.
    finite = torch.where(torch.isfinite(flat), flat.abs(), torch.zeros_like(flat))
    sizes = torch.tensor([t.numel() for t in tensors])
    scale = (
        torch.segment_reduce(finite, "max", lengths=sizes) if len(tensors) > 1 else finite.max().reshape(1)
    )
    flat = _round_significant(flat, magnitude=torch.repeat_interleave(scale, sizes)).tolist()
    out, pos = [], 0
    for t in tensors:
        n = t.numel()
        out.append(_nest(flat[pos : pos + n], list(t.shape)))
        pos += n
    return out


def _round_significant(
    v: torch.Tensor, digits: int = SIGNIFICANT, magnitude: torch.Tensor | None = None
) -> torch.Tensor:
    """Round to ``digits`` significant digits (of ``magnitude``, default each value's own)."""
    mag = v.abs() if magnitude is None else magnitude
    exp = torch.floor(torch.log10(mag.clamp_min(1e-300)))
    p = torch.nan_to_num(digits - 1 - exp, nan=0.0, posinf=99.0, neginf=-99.0).long()
    ok = torch.isfinite(v) & (p.abs() <= 22)  # exact powers of ten exist up to 1e22
    scale = _POW10[p.abs().clamp_max(22)]
    up = torch.round(v * scale) / scale
    down = torch.round(v / scale) * scale
    return torch.where(ok, torch.where(p >= 0, up, down), v)


def _nest(flat: list, shape: list[int]) -> Any:
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return flat
    step = len(flat) // shape[0] if shape[0] else 0
    return [_nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]
