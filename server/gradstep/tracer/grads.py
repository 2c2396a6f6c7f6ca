"""Gradient records: values for small tensors, the norm for all.

A record is recomputed only when the gradient tensor changed: a different
object, or the same one modified in place (accumulation bumps its version).

The numbers of all changed gradients come from a handful of tensor ops, not a few
per gradient (each op costs microseconds of dispatch, a model has hundreds of
gradients): gradients of one shape and dtype are stacked, and their norms are one
row-wise ``vector_norm`` (the same kernel, so the same bits, as each tensor's own
norm); the norms and the values then go through one float64 array, rounded in one
pass of numpy ops (less overhead per call than torch's, and the same IEEE arithmetic).

Values are rounded to exactly the digits torch prints (gradstep.printing has the rule): each
tensor's print mode (sci, int, fixed) is decided on its unrounded values, as torch does, and
recorded with them. Norms keep 9 significant digits, and at least the 4 decimals torch prints:
every float32 stays itself, so the reader prints a norm as torch prints that float32 (an integer
only if it is one).
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np
import torch

from gradstep.printing import DECIMALS, OWN_DIGITS, SCI_ABOVE, SCI_BELOW, SCI_SPAN
from gradstep.tracer.graph import dtype_name

NORM_DIGITS = 9  # significant digits of a norm: enough to tell every float32 apart
STACK_MAX = 4096  # elements: stacking bigger tensors copies more than it saves in dispatch
_FLOATS = frozenset((torch.float16, torch.bfloat16, torch.float32, torch.float64))
_COMPLEX = frozenset((torch.complex64, torch.complex128))
_HALVES = (torch.float16, torch.bfloat16)  # normed in float32
_STRIDED = torch.strided
_NO_VALUES = object()
_MODES = ("int", "fixed", "sci")  # torch's print modes, by code
_FORMATS = (["int"], ["fixed"], ["sci"])  # a real tensor's Grad.format, shared (records are read-only)
_INT, _FIXED, _SCI = 0, 1, 2
_NON_FINITE = {math.inf: "inf", -math.inf: "-inf"}  # and NaN: "nan" (as torch prints them)
_MAX_EXACT = 22  # powers of ten up to 1e22 are exact doubles
_FAR = 1000  # decimal places beyond any double's
# Decimal places by mode code: max(lower, upper - exponent). int: none to round (kept: 0 places);
# fixed: DECIMALS, or OWN_DIGITS significant digits when that is more; sci: DECIMALS after the first.
_LOWER = np.array([0, DECIMALS, -_FAR])
_UPPER = np.array([-_FAR, OWN_DIGITS - 1, DECIMALS])
# By biased binary exponent b (m in [2**(b-1023), 2**(b-1022))): floor(log10(m)) is _GUESS[b], or
# one more when m >= _NEXT_POWER[b] (a power of ten correctly rounded, as float() parses it).
_GUESS = np.floor((np.arange(2048) - 1023) * math.log10(2)).astype(np.int64)
_NEXT_POWER = np.array([float(f"1e{g + 1}") for g in _GUESS.tolist()])
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
            dense, only_norm = _strided(fresh, self.max_values)
            norms, values = _numbers(
                dense, [d.shape for d in dense] if only_norm else shapes, dtypes, self.max_values
            )
        for k in only_norm:
            values[k] = _NO_VALUES
        names = {dtype: dtype_name(dtype) for dtype in set(dtypes)}
        for i, t, shape, dtype, norm, v in zip(todo, fresh, shapes, dtypes, norms, values, strict=True):
            rec: dict[str, Any] = {
                "shape": list(shape),
                "dtype": names[dtype],
                "has_grad_fn": t.grad_fn is not None,
                "norm": norm,
            }
            if v is not _NO_VALUES:
                rec["values"], rec["format"] = v
            out[i] = rec
            cache[id(t)] = (weakref.ref(t), t._version, rec)
        return out


def _strided(tensors: list[torch.Tensor], max_values: int) -> tuple[list[torch.Tensor], list[int]]:
    """Sparse gradients (an embedding's, a sparse matmul's) as tensors ``_numbers`` can read: a small
    one made dense, a big one as its stored values (the same norm; their values are not shown)."""
    if all(t.layout is _STRIDED for t in tensors):
        return tensors, []
    out, only_norm = [], []
    for k, t in enumerate(tensors):
        if t.layout is _STRIDED:
            out.append(t)
        elif t.numel() <= max_values:
            out.append(t.to_dense())
        else:
            out.append((t.coalesce() if t.layout is torch.sparse_coo else t).values())
            only_norm.append(k)
    return out, only_norm


def _numbers(
    tensors: list[torch.Tensor], shapes: list[torch.Size], dtypes: list[torch.dtype], max_values: int
) -> tuple[list[float | None], list[Any]]:
    """The rounded norm (None if not finite or not a dense float or complex tensor) of each tensor,
    and its values with their print modes (``(values, modes)``, or _NO_VALUES)."""
    count = len(tensors)
    norms: list[float | None] = [None] * count
    values: list[Any] = [_NO_VALUES] * count
    stacks: dict[tuple, list[int]] = {}  # (shape, dtype) -> positions stacked together
    alone: list[int] = []  # positions normed one by one
    elsewhere = False  # some are on another device than the CPU (a GPU)
    for k, (t, dtype) in enumerate(zip(tensors, dtypes, strict=True)):
        if t.layout is not _STRIDED:
            continue
        if dtype in _FLOATS:
            if t.is_cpu:
                if t.is_contiguous():
                    stacks.setdefault((shapes[k], dtype), []).append(k)
                else:
                    alone.append(k)
            elif not t.is_meta:  # a meta tensor has no numbers
                alone.append(k)
                elsewhere = True
        elif dtype in _COMPLEX and not t.is_meta:  # rare: one by one
            alone.append(k)
            elsewhere = elsewhere or not t.is_cpu
    # A stack of one is an op more; a stack of big tensors, a copy that costs more than their dispatch.
    for key in [key for key, ks in stacks.items() if len(ks) == 1 or key[0].numel() > STACK_MAX]:
        alone += stacks.pop(key)
    if not stacks and not alone:
        return norms, values

    normed: list[int] = []  # positions, in the order of their norms in `parts`
    parts: list[torch.Tensor] = []  # norms first, then values
    shown: list[int] = []  # positions, in the order of their values in `parts`
    sizes: list[int] = []  # numbers of elements of each run of values (a complex tensor has two)
    paired: set[int] = set()  # positions of complex tensors among `shown`
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
                row = t.reshape(-1).cpu()
                if row.is_complex():  # real parts, then imaginary parts: each prints in its own mode
                    row = row.resolve_conj()
                    value_parts += [row.real, row.imag]
                    sizes += [numel, numel]
                    paired.add(k)
                else:
                    value_parts.append(row)
                    sizes.append(numel)
                shown.append(k)
    singles = len(normed)
    # One float64 array; every float dtype converts to float64 exactly.
    flat = torch.empty(singles + sum(sizes), dtype=torch.float64)
    torch.cat(parts + value_parts, out=flat)
    rounded, codes, finite, values_finite = _round(flat.numpy(), singles, np.array(sizes, dtype=np.int64))
    numbers = rounded.tolist()

    if finite:
        for k, v in zip(normed, numbers, strict=False):
            norms[k] = v
    else:
        for k, v in zip(normed, numbers, strict=False):
            norms[k] = v if math.isfinite(v) else None
    pos, run = singles, 0
    for k in shown:
        n = sizes[run]
        if k in paired:  # real parts, then imaginary parts
            real, imag = numbers[pos : pos + n], numbers[pos + n : pos + 2 * n]
            if not values_finite:
                real, imag = _spelled(real), _spelled(imag)
            pairs = [[re, im] for re, im in zip(real, imag, strict=True)]
            values[k] = (_nest(pairs, list(shapes[k])), [_MODES[codes[run]], _MODES[codes[run + 1]]])
            pos, run = pos + 2 * n, run + 2
            continue
        flat_values = numbers[pos : pos + n] if values_finite else _spelled(numbers[pos : pos + n])
        shape = shapes[k]
        values[k] = (
            flat_values if len(shape) == 1 else _nest(flat_values, list(shape)),
            _FORMATS[codes[run]],
        )
        pos, run = pos + n, run + 1
    return norms, values


def _spelled(numbers: list[float]) -> list:
    """Non-finite values as torch prints them ("nan", "inf", "-inf"): JSON has no number for them."""
    return [v if math.isfinite(v) else _NON_FINITE.get(v, "nan") for v in numbers]


def _round(flat: np.ndarray, singles: int, sizes: np.ndarray) -> tuple[np.ndarray, list[int], bool, bool]:
    """The first ``singles`` entries (norms) rounded to NORM_DIGITS significant digits (or DECIMALS
    decimals, when that is more), then runs
    of ``sizes`` entries (a tensor's values) each rounded as torch prints it in its run's mode.
    Also returns each run's mode (its code, an index in _MODES), and whether the norms, and the
    values, are all finite.

    The mode of a run is torch's (torch._tensor_str._Formatter), over its nonzero finite values:
    sci when max/min > 1000, max > 1e8 or min < 1e-4 (4 decimals after the first digit), else
    int when all are integers (kept as they are), else fixed (4 decimals, more below 0.1 to keep
    OWN_DIGITS significant digits).
    """
    finite = np.isfinite(flat)
    norms_finite, values_finite = bool(finite[:singles].all()), bool(finite[singles:].all())
    mag = np.abs(flat)
    filled = sizes > 0
    counts = sizes[filled]
    codes = np.full(len(sizes), _INT, dtype=np.int64)  # an empty run has no number: int, as torch
    # Decimal places of each entry: max(lower, upper - exponent), by run (a norm is a run of one).
    lower = np.full(singles + len(counts), DECIMALS)  # a norm: also the 4 decimals fixed mode prints
    upper = np.full(singles + len(counts), NORM_DIGITS - 1)
    if len(counts):
        starts = np.cumsum(counts) - counts
        values, vmag = flat[singles:], mag[singles:]
        nonzero = vmag > 0
        if not values_finite:
            nonzero &= finite[singles:]
        lo = np.minimum.reduceat(np.where(nonzero, vmag, np.inf), starts)
        hi = np.maximum.reduceat(vmag if values_finite else np.where(nonzero, vmag, 0.0), starts)
        fractional = np.ceil(values) != values  # zeros are integers; NaN and inf are not
        if not values_finite:
            fractional &= nonzero
        fractional = np.logical_or.reduceat(fractional, starts)
        sci = (hi > 0) & (
            (hi / lo > SCI_SPAN) | (hi > SCI_ABOVE) | (lo < SCI_BELOW)
        )  # a run of zeros: 0 / inf
        run_codes = np.where(sci, _SCI, np.where(fractional, _FIXED, _INT))
        codes[filled] = run_codes
        lower[singles:] = _LOWER[run_codes]
        upper[singles:] = _UPPER[run_codes]
        counts = np.concatenate((np.ones(singles, dtype=np.int64), counts))
        lower, upper = np.repeat(lower, counts), np.repeat(upper, counts)
    exponent = _exponent10(mag)
    places = np.maximum(lower, upper - exponent)
    _fewer_where_carried(flat, places, upper, exponent)
    # A zero or non-finite entry gets places far beyond exact powers of ten (as do huge and tiny
    # ones): not ok, those entries stay as they are.
    ok = np.abs(places) <= _MAX_EXACT
    every_ok = ok.all()
    at = places + _MAX_EXACT
    if not every_ok:
        at[~ok] = _MAX_EXACT
    # round(v * 10**p) / 10**p for p >= 0, round(v / 10**-p) * 10**-p below: as
    # round(v * mul / div) * div / mul, with mul or div 1 (both where not ok). rint rounds half
    # to even, as Python's formatting does on exact ties; non-finite values come through unchanged.
    mul, div = _MUL[at], _DIV[at]
    out = flat * mul
    out /= div
    np.rint(out, out=out)
    out *= div
    out /= mul
    if not every_ok:  # zero, non-finite, or too big or small for exact powers of ten: kept as they are
        out = np.where(ok, out, flat)
    if singles:
        _print_as_unrounded(flat[:singles], out[:singles], places[:singles])
    return out, codes.tolist(), norms_finite, values_finite


def _fewer_where_carried(
    flat: np.ndarray, places: np.ndarray, upper: np.ndarray, exponent: np.ndarray
) -> None:
    """A fixed-mode value just below a power of ten that rounds up to it with one decimal fewer
    already has 4 significant digits there: 0.09997 shows as 0.1000, as torch's 4 decimals print it,
    not 0.09997 (more decimals are added only while torch's text has fewer than 4 digits)."""
    widened = (upper == OWN_DIGITS - 1) & (places > DECIMALS) & (np.abs(places) < _MAX_EXACT)
    if not widened.any():
        return
    at = np.nonzero(widened)[0]
    fewer = places[at] - 1 + _MAX_EXACT
    rounded = np.rint(np.abs(flat[at]) * _MUL[fewer] / _DIV[fewer]) * _DIV[fewer] / _MUL[fewer]
    carried = at[rounded >= 10.0 ** (exponent[at] + 1)]
    places[carried] -= 1


def _print_as_unrounded(raw: np.ndarray, kept: np.ndarray, places: np.ndarray) -> None:
    """A norm keeps 9 digits but prints with fewer (4 decimals, or 4 after the first digit in sci
    mode), and rounding twice can cross a tie that rounding once does not: 1068.4741496 kept as
    1068.47415 prints 1068.4742 where torch prints 1068.4741. Only a kept norm whose digits past
    the printed ones are a 5 and zeros can. Where the kept norm would print unlike the true one,
    the true norm is kept instead: it prints as torch, and is within half a unit of every digit."""
    mag = np.abs(raw)
    exponent = _exponent10(mag)
    sci = _lone_sci(mag)
    printed = np.where(sci, DECIMALS - exponent, np.maximum(DECIMALS, OWN_DIGITS - 1 - exponent))
    # Rounding can also change how it prints: 3.0000000001 kept as 3.0 prints "3." (an integer),
    # 9.99999999e-05 kept as 0.0001 in fixed mode, where torch prints the true norm's mode.
    moved = (_lone_sci(np.abs(kept)) != sci) | ((kept == np.rint(kept)) & (raw != np.rint(raw)))
    moved &= np.isfinite(raw)
    kept[moved] = raw[moved]
    extra = places - printed  # digits kept past the printed ones
    maybe = (extra > 0) & (extra < 16) & np.isfinite(raw) & (mag > 0) & (np.abs(places) <= _MAX_EXACT)
    if not maybe.any():
        return
    at = np.nonzero(maybe)[0]
    digits = np.rint(np.abs(kept[at]) * _MUL[places[at] + _MAX_EXACT] / _DIV[places[at] + _MAX_EXACT])
    unit = 10.0 ** extra[at]
    for k in at[np.fmod(digits, unit) == unit / 2]:  # rare: decided as the formatter prints
        spec = f".{DECIMALS}e" if sci[k] else f".{printed[k]}f"
        if format(float(raw[k]), spec) != format(float(kept[k]), spec):
            kept[k] = raw[k]


def _lone_sci(mag: np.ndarray) -> np.ndarray:
    """Whether torch prints each lone number (a 0-d tensor) of magnitude ``mag`` in sci mode."""
    return (mag > SCI_ABOVE) | ((mag < SCI_BELOW) & (mag > 0))


def _exponent10(mag: np.ndarray) -> np.ndarray:
    """floor(log10(m)) of each nonnegative float64 m, from its binary exponent (a few times faster
    than log10); zero and denormals get -308, inf 309 and NaN 308."""
    biased = mag.view(np.int64) >> 52  # the binary exponent, biased by 1023
    return _GUESS[biased] + (mag >= _NEXT_POWER[biased])


def _nest(flat: list, shape: list[int]) -> Any:
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return flat
    step = len(flat) // shape[0] if shape[0] else 0
    return [_nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]
