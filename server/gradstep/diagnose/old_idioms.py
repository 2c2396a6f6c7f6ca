"""Rules for code written for PyTorch before 0.4 (2018), each saying what the idiom became:
``retain_variables=`` (``retain_graph=``), ``Variable(…, volatile=True)`` (``torch.no_grad()``),
``loss.data[0]`` (``.item()``), writes through ``.data`` (in place under ``torch.no_grad()``)."""

from __future__ import annotations

from gradstep.diagnose import data_write, retain_variables, volatile, zero_dim_index

RULES = (retain_variables, volatile, zero_dim_index, data_write)
