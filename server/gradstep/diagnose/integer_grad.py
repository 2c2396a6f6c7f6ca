"""``requires_grad`` on an integer tensor: only floating point (and complex) tensors have gradients.

Fix: create it with a float dtype (``dtype=torch.float32`` in the call that
asks for ``requires_grad=True``), or convert it with ``.float()`` first.
"""

from __future__ import annotations

import ast

from gradstep.diagnose import facts
from gradstep.diagnose.calls import set_keyword
from gradstep.diagnose.candidate import Candidate, fix_of, present
from gradstep.diagnose.source import Source, keyword

KIND = "requires_grad_on_integer"


def _edits(src: Source, line: int) -> tuple[list, str] | None:
    """The rewrite for what asked for gradients at ``line``, and a title for it."""
    for node in src.walk():
        if not isinstance(node, ast.stmt) or not (node.lineno <= line <= node.end_lineno):
            continue
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            kw = keyword(call, "requires_grad")
            if kw is not None and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                return [
                    set_keyword(src, call, "dtype", "torch.float32")
                ], "Create it as float: dtype=torch.float32"
        name = _turned_on_later(node)
        if name is not None:
            return [
                src.insert_before(node, f"{name} = {name}.float()")
            ], f"Convert it first: {name} = {name}.float()"
    return None


def _turned_on_later(node: ast.stmt) -> str | None:
    """``x`` for ``x.requires_grad_()`` or ``x.requires_grad = …``: the tensor to convert before it."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        target, attr = node.value.func, "requires_grad_"
    elif isinstance(node, ast.Assign) and len(node.targets) == 1:
        target, attr = node.targets[0], "requires_grad"
    else:
        return None
    if isinstance(target, ast.Attribute) and target.attr == attr and isinstance(target.value, ast.Name):
        return target.value.id
    return None


def find(trace: dict, src: Source) -> list[Candidate]:
    error = trace.get("error")
    if not error or not facts.is_integer_requires_grad(error["message"]):
        return []
    line = error.get("line")
    message = (
        "Only floating point (and complex) tensors can require gradients: a gradient is a small change, and an "
        "integer tensor cannot change by a fraction. "
        + (f"The tensor at line {line} has an integer dtype (integer literals make int64)." if line else "")
    )
    fix = None
    found = _edits(src, line) if line is not None else None
    if found is not None:
        edits, title = found
        fix = fix_of(
            src,
            edits,
            "float",
            title,
            "A float32 tensor holds the same values and can carry gradients (checked: the fixed snippet "
            "runs). Use float64 if you need the precision.",
        )
    return [Candidate(KIND, "error", line, message, present(fix))]
