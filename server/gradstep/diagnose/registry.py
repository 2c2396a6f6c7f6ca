"""The rules, registered once: a rule is a module of this package with ``KIND`` (the
``Diagnosis.kind`` it reports), ``find(trace, src)`` and, where curated snippets show its
mistake, ``SNIPPETS`` (their file names in snippets/, without ``.py``).

Adding a rule is adding its module and one line here. The order is the order the rules run in,
so the order their diagnoses are listed in (``find`` keeps the first ``MAX_CANDIDATES``): a rule
that defers to another (``freed_graph`` to ``hidden_state``) says so in its own ``find``, not by
its place here. tests/diagnose pins that every rule module is listed, and that the kinds are the
ones docs/trace-format.md lists.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

NAMES = (
    "hidden_state",
    "stale_graph",
    "freed_graph",
    "non_scalar",
    "inplace",
    "zero_grad",
    "non_leaf_grad",
    "integer_grad",
    "leaf_inplace",
    "no_graph",
    "graph_cut",
    "running_total",
    "nonfinite_grad",
    "step_order",
    "needless_retain",
    # code written for PyTorch before 0.4 (2018), each saying what the idiom became
    "retain_variables",
    "volatile",
    "zero_dim_index",
    "data_write",
)

RULES: tuple[ModuleType, ...] = tuple(import_module(f"{__package__}.{name}") for name in NAMES)
KINDS: tuple[str, ...] = tuple(rule.KIND for rule in RULES)
