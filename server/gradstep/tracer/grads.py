"""Gradient records: values for small tensors, the norm for all.

A record is recomputed only when the gradient tensor changed: a different
object, or the same one modified in place (accumulation bumps its version).

The numbers of all changed gradients come from a handful of tensor ops, not a few
per gradient (each op costs microseconds of dispatch, a model has hundreds of
gradients): gradients of one shape and dtype are stacked, and their norms are one
row-wise ``vector_norm`` (the same kernel, so the same bits, as each tensor's own
norm); the norms and the values then go through one float64 array, rounded in one
pass of numpy ops (less overhead per call than torch's, and the same IEEE arithmetic).
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np
import torch

from gradstep.tracer.graph import dtype_name

SIGNIFICANT = 6  # digits kept for values and norms (float32 carries ~7)
STACK_MAX = 4096  # elements: stacking bigger tensors copies more than it saves in dispatch
_FLOATS = frozenset((torch.float16, torch.bfloat16, torch.float32, torch.float64))
_HALVES = (torch.float16, torch.bfloat16)  # normed in float32
_STRIDED = torch.strided
_NO_VALUES = object()
_MAX_EXACT = 22  # powers of ten up to 1e22 are exact doubles
# By decimal places p in -22..22: 10**p where p >= 0 (multiply, then divide back), 10**-p below.
_MUL = np.array([1.0] * _MAX_EXACT + [float(10**p) for p in range(_MAX_EXACT + 1)])
_DIV = np.array([float(10**-p) for p in range(-_MAX_EXACT, 0)] + [1.0] * (_MAX_EXACT + 1))


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
        fresh = [grads[i] for i in todo]
        shapes = [t.shape for t in fresh]
        dtypes = [t.dtype for t in fresh]
        with torch.inference_mode():  # as no_grad, and a little less dispatch per op
            norms, values = _numbers(fresh, shapes, dtypes, self.max_values)
        names = {dtype: dtype_name(dtype) for dtype in set(dtypes)}
        for i, t, shape, dtype, norm, v in zip(todo, fresh, shapes, dtypes, norms, values, strict=True):
            rec: dict[str, Any] = {
                "shape": list(shape),
                "dtype": names[dtype],
                "has_grad_fn": t.grad_fn is not None,
                "norm": norm,
            }
            if v is not _NO_VALUES:
                rec["values"] = v
            out[i] = rec
            cache[id(t)] = (weakref.ref(t), t._version, rec)
        return out


def _numbers(
    tensors: list[torch.Tensor], shapes: list[torch.Size], dtypes: list[torch.dtype], max_values: int
) -> tuple[list[float | None], list[Any]]:
    """The rounded norm (None if not finite or not a dense float tensor) and values of each tensor."""
    count = len(tensors)
    norms: list[float | None] = [None] * count
    values: list[Any] = [_NO_VALUES] * count
    stacks: dict[tuple, list[int]] = {}  # (shape, dtype) -> positions stacked together
    alone: list[int] = []  # positions normed one by one
    elsewhere = False  # some are on another device than the CPU (a GPU)
    for k, (t, dtype) in enumerate(zip(tensors, dtypes, strict=True)):
        if dtype in _FLOATS and t.layout is _STRIDED:
            if t.is_cpu:
                if t.is_contiguous():
                    stacks.setdefault((shapes[k], dtype), []).append(k)
                else:
                    alone.append(k)
            elif not t.is_meta:  # a meta tensor has no numbers
                alone.append(k)
                elsewhere = True
    # A stack of one is an op more; a stack of big tensors, a copy that costs more than their dispatch.
    for key in [key for key, ks in stacks.items() if len(ks) == 1 or key[0].numel() > STACK_MAX]:
        alone += stacks.pop(key)
    if not stacks and not alone:
        return norms, values

    normed: list[int] = []  # positions, in the order of their norms in `parts`
    parts: list[torch.Tensor] = []  # norms first, then values
    shown: list[int] = []  # positions, in the order of their values in `parts`
    sizes: list[int] = []  # numbers of elements along `shown`
    value_parts: list[torch.Tensor] = []
    for (shape, dtype), ks in stacks.items():
        numel = shape.numel()
        rows = torch.stack([tensors[k] for k in ks]).reshape(len(ks), numel)
        parts.append(torch.linalg.vector_norm(rows.float() if dtype in _HALVES else rows, dim=1))
        normed += ks
        if numel <= max_values:
            value_parts.append(rows.reshape(-1))
            shown += ks
            sizes += [numel] * len(ks)
    if alone:
        lone = [tensors[k] for k in alone]
        found = torch._foreach_norm([t.float() if t.dtype in _HALVES else t for t in lone])
        parts.append(torch.stack([n.cpu() for n in found] if elsewhere else found))
        normed += alone
        for k, t in zip(alone, lone, strict=True):
            numel = t.numel()
            if numel <= max_values:
                value_parts.append(t.reshape(-1).cpu())
                shown.append(k)
                sizes.append(numel)
    singles = len(normed)
    # One float64 array; every float dtype converts to float64 exactly.
    flat = torch.empty(singles + sum(sizes), dtype=torch.float64)
    torch.cat(parts + value_parts, out=flat)
    rounded, finite = _round(flat.numpy(), singles, np.array(sizes, dtype=np.int64))
    rounded = rounded.tolist()

    if finite:
        for k, v in zip(normed, rounded, strict=False):
            norms[k] = v
    else:
        for k, v in zip(normed, rounded, strict=False):
            norms[k] = v if math.isfinite(v) else None
    pos = singles
    for k, n in zip(shown, sizes, strict=True):
        shape = shapes[k]
        values[k] = rounded[pos : pos + n] if len(shape) == 1 else _nest(rounded[pos : pos + n], list(shape))
        pos += n
    return norms, values


def _round(flat: np.ndarray, singles: int, sizes: np.ndarray) -> tuple[np.ndarray, bool]:
    """Round to SIGNIFICANT digits: the first ``singles`` entries each of its own magnitude, then
    runs of ``sizes`` entries (a tensor's values) each of its run's largest finite magnitude.
    Also says whether the first ``singles`` are all finite.

    Precision relative to each tensor's largest element (as allclose's atol would be): tiny
    entries next to big ones need no more digits than the big ones.
    """
    filled = sizes[sizes > 0]
    counts = np.ones(singles + len(filled), dtype=np.int64)
    counts[singles:] = filled
    mag = np.empty(len(counts))
    np.abs(flat[:singles], out=mag[:singles])
    if len(filled):
        values = flat[singles:]
        starts = np.cumsum(filled) - filled
        mag[singles:] = np.fmax.reduceat(np.abs(values), starts)  # fmax: NaN only if all are
        if np.isinf(mag[singles:]).any():  # the largest *finite* magnitude, then
            mag[singles:] = np.maximum.reduceat(np.where(np.isfinite(values), np.abs(values), 0.0), starts)
    # Digits to keep after the decimal point; a non-finite magnitude (a norm's) gives NaN or
    # -inf, not ok, as digits beyond exact powers of ten are: those entries stay as they are.
    places = (SIGNIFICANT - 1) - np.floor(np.log10(np.maximum(mag, 1e-300)))
    ok = np.abs(places) <= _MAX_EXACT
    every_ok = ok.all()
    if not every_ok:
        places[~ok] = 0
    at = places.astype(np.int64) + _MAX_EXACT
    # round(v * 10**p) / 10**p for p >= 0, round(v / 10**-p) * 10**-p below: as
    # round(v * mul / div) * div / mul, with mul or div 1 (both where not ok). rint rounds half
    # to even, as torch.round; non-finite values come through unchanged.
    mul, div = np.repeat(_MUL[at], counts), np.repeat(_DIV[at], counts)
    out = flat * mul
    out /= div
    np.rint(out, out=out)
    out *= div
    out /= mul
    if not every_ok:  # too big or small for exact powers of ten: kept as they are
        out = np.where(np.repeat(ok, counts), out, flat)
    return out, bool(np.isfinite(flat[:singles]).all())


def _nest(flat: list, shape: list[int]) -> Any:
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return flat
    step = len(flat) // shape[0] if shape[0] else 0
    return [_nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]
