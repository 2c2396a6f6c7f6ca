"""What torch prints for a tensor, element by element: the expected strings of gradstep.printing.

Everything here asks torch (``torch._tensor_str``, the code behind ``print(tensor)``); the one
documented departure is applied through torch too: in fixed mode a value printed with fewer than
4 significant digits of its own gets the smallest precision at which torch prints it with 4.
"""

from __future__ import annotations

import re

import torch
from torch._tensor_str import _Formatter, _tensor_str, printoptions

OWN_DIGITS = 4


def torch_elements(t: torch.Tensor, precision: int = 4) -> list[str]:
    """Each element of ``t`` as ``print(t)`` shows it (padding dropped), in ``tolist`` order."""
    with printoptions(precision=precision):
        text = _tensor_str(t.detach(), 0)
    return [s for s in re.split(r"[\[\],\s]+", text) if s]


def significant(text: str) -> int:
    """Significant digits a printed real number shows: 0.001234 has 4, 1.6021e-02 has 5."""
    mantissa = text.lstrip("-").split("e")[0].replace(".", "")
    return len(mantissa.lstrip("0"))


def printed(t: torch.Tensor) -> list[str]:
    """Each element of the real tensor ``t`` as gradstep shows it: as torch prints it, with more
    decimals in fixed mode where torch's 4 leave a value fewer than 4 significant digits."""
    t = t.detach()
    if t.is_complex():
        raise ValueError("printed() takes a real tensor; print .real and .imag apart")
    base = torch_elements(t)
    formatter = _Formatter(t.reshape(-1)) if t.numel() else None
    if formatter is None or formatter.sci_mode or formatter.int_mode:
        return base
    out = []
    for i, (text, v) in enumerate(zip(base, t.reshape(-1).tolist(), strict=True)):
        precision = 4
        while v != 0 and v == v and abs(v) != float("inf") and significant(text) < OWN_DIGITS:
            precision += 1
            text = torch_elements(t, precision)[i]
        out.append(text)
    return out


def printed_number(v: float | torch.Tensor) -> str:
    """A lone number as torch prints a 0-d float tensor holding it (with the fixed-mode widening)."""
    t = v if isinstance(v, torch.Tensor) else torch.tensor(v, dtype=torch.float64)
    return printed(t.reshape(()))[0]
