"""Pieces several rules need, written once: where a rule looks in the trace (the call lines, the
calls that failed with a given error) and in the source (the ``with`` block a statement runs in,
a name's dotted path). Edits to the source are ``Source``'s (source.py); facts about one step or
gradient are facts.py's.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

from gradstep.diagnose import facts
from gradstep.diagnose.source import Source, call_name
from gradstep.trace_dicts import StepDict, TraceDict

MAX_CALL_LINES = 16  # each line a rule looks at costs it a walk of the syntax tree


def call_lines(trace: TraceDict, *, ran: bool = False) -> list[int | None]:
    """The lines of the backward/grad calls (``ran``: only calls that did not fail), each once, in
    the order they first ran; at most ``MAX_CALL_LINES``."""
    steps = facts.calls(trace)
    lines = dict.fromkeys(s.get("line") for s in steps if not (ran and s.get("error")))
    return list(lines)[:MAX_CALL_LINES]


def calls_failing_with(trace: TraceDict, mark: str) -> Iterator[StepDict]:
    """The backward/grad call steps whose error message contains ``mark``, in run order."""
    for step in facts.calls(trace):
        error = step.get("error")
        if error and mark in error["message"]:
            yield step


def is_call_of(expr: ast.AST, names: tuple[str, ...]) -> bool:
    """``expr`` calls a function whose last name is one of ``names`` (``torch.no_grad()``, ``no_grad()``)."""
    return isinstance(expr, ast.Call) and call_name(expr).rsplit(".", 1)[-1] in names


def enclosing_with(
    src: Source,
    node: ast.AST,
    is_context: Callable[[ast.expr], bool],
    *,
    stop: ast.AST | None = None,
    decorated: bool = False,
) -> ast.With | ast.AsyncWith | ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The innermost ``with`` block holding ``node`` one of whose context managers passes
    ``is_context``; looked for up to ``stop`` (not included), else up to the module. ``decorated``:
    a function holding ``node`` whose decorator passes it counts too (``@torch.no_grad()``)."""
    at = src.parents.get(node)
    while at is not None and at is not stop:
        if isinstance(at, ast.With | ast.AsyncWith) and any(is_context(i.context_expr) for i in at.items):
            return at
        if (
            decorated
            and isinstance(at, ast.FunctionDef | ast.AsyncFunctionDef)
            and any(is_context(d) for d in at.decorator_list)
        ):
            return at
        at = src.parents.get(at)
    return None


def dotted_name(node: ast.AST) -> str | None:
    """``w`` for ``w``, ``model.fc`` for that attribute path; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None
