"""Numbers as torch prints them: the one number format of narration, tables and nodes.

``frontend/printing.js`` is its twin (same rule, same names in camelCase); tests check both
against ``torch._tensor_str`` on the same tensors.

The rule, per tensor (``torch._tensor_str._Formatter``, default print options): over its nonzero
finite values, the tensor prints

* ``sci`` (``1.6021e-02``: 4 decimals after the first digit) when the largest is more than 1000
  times the smallest, or above 1e8, or the smallest is below 1e-4;
* else ``int`` (``448.``) when every value is an integer (also when there is no nonzero finite
  value: ``0.``, ``nan``);
* else ``fixed`` (``0.5000``): 4 decimals, as torch, and more for values below 0.1, so that
  every value keeps at least 4 significant digits of its own. Here alone we depart from torch,
  which prints 0.0012345 next to 0.5 as ``0.0012``; we print ``0.001234``.

So the mode is decided per tensor (as torch: a column of numbers reads alike), the digits per
value. Non-finite values print as ``nan``, ``inf``, ``-inf``; a complex value as its real and
imaginary parts, each part of the tensor with its own mode (``2.+4.j``, ``1.0000e-05+2.j``).

The tracer stores each value rounded to exactly the digits shown here (``tracer/grads.py``) and
the mode it chose from the unrounded values (``Grad.format``): rounding can turn 0.99999994 into
1.0, which would otherwise read as ``int``. A lone number (a norm) prints as a 0-d tensor does.
"""

from __future__ import annotations

import math
from typing import Any, Literal

Mode = Literal["int", "fixed", "sci"]
DECIMALS = 4  # torch's default print precision
OWN_DIGITS = 4  # significant digits every value keeps of its own (fixed mode adds decimals)
NON_FINITE = ("nan", "inf", "-inf")  # how the trace writes (and torch prints) them
# torch's sci mode: the largest nonzero value over SCI_SPAN times the smallest, above SCI_ABOVE, or
# the smallest below SCI_BELOW
SCI_SPAN, SCI_ABOVE, SCI_BELOW = 1000.0, 1.0e8, 1.0e-4


def mode_of(numbers: list[Any]) -> Mode:
    """How torch prints a tensor holding ``numbers`` (floats; non-finite ones may be strings)."""
    nonzero = [abs(v) for v in numbers if isinstance(v, float | int) and math.isfinite(v) and v != 0]
    if not nonzero:
        return "int"
    lo, hi = min(nonzero), max(nonzero)
    if hi / lo > SCI_SPAN or hi > SCI_ABOVE or lo < SCI_BELOW:
        return "sci"
    return "int" if all(v == math.ceil(v) for v in nonzero) else "fixed"


def fixed_decimals(v: float) -> int:
    """Decimals of ``v`` in fixed mode: torch's 4, more below 0.1 to keep 4 digits of its own."""
    if v == 0 or not math.isfinite(v):
        return DECIMALS
    exponent = int(f"{v:.{OWN_DIGITS - 1}e}".rsplit("e", 1)[1])  # of v rounded to 4 digits
    return max(DECIMALS, OWN_DIGITS - 1 - exponent)


def fmt_value(v: Any, mode: Mode) -> str:
    """One real value of a tensor printed in ``mode``."""
    if isinstance(v, str):  # "nan", "inf", "-inf" as the trace writes them
        return v
    if v is None:  # JSON's null for a NaN the producer could not spell
        return "nan"
    v = float(v)
    if not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if mode == "sci":
        return f"{v:.{DECIMALS}e}"
    if mode == "int":
        return f"{v:.0f}."
    return f"{v:.{fixed_decimals(v)}f}"


def fmt_complex(pair: list, modes: list[Mode]) -> str:
    """A complex value ``[re, im]`` as torch prints it: ``1.0000+2.0000j``."""
    real = fmt_value(pair[0], modes[0])
    imag = fmt_value(pair[1], modes[1]) + "j"
    return real + imag if imag[0] in "+-" else f"{real}+{imag}"


def is_complex(dtype: str | None) -> bool:
    return bool(dtype) and dtype.startswith("complex")


def leaves(values: Any, complex_: bool = False) -> list:
    """The elements of nested ``values`` in order (a complex element is its ``[re, im]`` pair)."""
    if not isinstance(values, list) or (complex_ and _is_pair(values)):
        return [values]
    return [x for v in values for x in leaves(v, complex_)]


def _is_pair(values: list) -> bool:
    return len(values) == 2 and not isinstance(values[0], list)


def modes_of(values: Any, dtype: str | None = None) -> list[Mode]:
    """The modes torch would pick for ``values`` (when the trace carries none: derived numbers)."""
    if not is_complex(dtype):
        return [mode_of(leaves(values))]
    pairs = leaves(values, True)
    return [mode_of([p[0] for p in pairs]), mode_of([p[1] for p in pairs])]


def fmt_values(values: Any, dtype: str | None = None, modes: list[Mode] | None = None) -> str:
    """Nested ``values`` as torch prints them, brackets and all: ``[[1., 2.], [3., 4.]]``."""
    modes = modes or modes_of(values, dtype)
    complex_ = is_complex(dtype)

    def text(v: Any) -> str:
        if complex_ and isinstance(v, list) and _is_pair(v):
            return fmt_complex(v, modes)
        if isinstance(v, list):
            return "[" + ", ".join(text(x) for x in v) + "]"
        return fmt_value(v, modes[0])

    return text(values)


def fmt_number(v: Any) -> str:
    """A lone number (a norm, a scalar) as torch prints a 0-d tensor holding it."""
    return fmt_value(v, mode_of([v]))


def fmt_bytes(n: int) -> str:
    """A byte count as the page shows it (frontend/model.js fmtBytes)."""
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n / (1024 * 1024):.1f} MB"


QUOTE_MAX = 200  # characters of a run's own words inside one of the server's sentences


def quoted(words: str, limit: int = QUOTE_MAX) -> str:
    """A run's own words (an exception's message: torch's, Python's, or the code's) as the server's
    sentences hold them: in quotation marks, one line, at most ``limit`` characters (NOTE [the
    server's voice] in gradstep.voice: a quote is never the server's word)."""
    line = " ".join(words.split())
    return f"“{line[:limit]}…”" if len(line) > limit else f"“{line}”"
