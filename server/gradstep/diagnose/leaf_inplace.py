"""An in-place change of a leaf that requires grad (or of a view of one) while autograd records.

The typical case is hand-written SGD, ``w -= lr * w.grad`` outside
``torch.no_grad()``; also ``w[0] = 0`` or ``w.mul_(2)`` on a parameter. torch
raises; the trace carries its message and the statement's line. Fix: make the
change under ``torch.no_grad()``, so it is not recorded and ``w`` stays a leaf
(checked in the fixed run). The tempting ``w = w - lr * w.grad`` is not offered:
it rebinds ``w`` to a non-leaf whose ``.grad`` stays None.
"""

from __future__ import annotations

import ast

from gradstep.diagnose.candidate import Candidate, CandidateFix, fix_of, present
from gradstep.diagnose.source import Source, torch_alias

KIND = "inplace_on_leaf"
# the curated snippets in snippets/ that show this mistake
SNIPPETS = ("sgd_update_outside_no_grad_fails",)
LEAF_MARK = "leaf Variable that requires grad is being used in an in-place operation"
VIEW_MARK = "a view of a leaf Variable"


def simple_statement_at(src: Source, line: int) -> ast.stmt | None:
    """The innermost statement spanning ``line`` that holds no other statement."""
    found = [
        n
        for n in src.walk()
        if isinstance(n, ast.stmt)
        and n.lineno <= line <= n.end_lineno
        and not any(isinstance(c, ast.stmt) for c in ast.iter_child_nodes(n))
    ]
    return min(found, key=lambda s: s.end_lineno - s.lineno) if found else None


def _changed(stmt: ast.stmt) -> str | None:
    """The name the statement changes in place: ``w -= …``, ``w[i] = …``, ``w.op_(…)``, ``w.view(…).op_(…)``."""
    target: ast.AST | None = None
    if isinstance(stmt, ast.AugAssign):
        target = stmt.target
    elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target = stmt.targets[0]
    elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        func = stmt.value.func
        if isinstance(func, ast.Attribute) and func.attr.endswith("_") and not func.attr.startswith("_"):
            target = func.value
    while isinstance(target, (ast.Subscript, ast.Attribute, ast.Call)):
        target = target.func if isinstance(target, ast.Call) else target.value
    return target.id if isinstance(target, ast.Name) else None


def _reads_grad(stmt: ast.stmt) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "grad" for n in ast.walk(stmt))


def find(trace: dict, src: Source) -> list[Candidate]:
    error = trace.get("error")
    line = error.get("line") if error else None
    if not error or LEAF_MARK not in error["message"] or line is None:
        return []
    stmt = simple_statement_at(src, line)
    name = _changed(stmt) if stmt is not None else None
    what = f"`{name}`" if name else "a tensor"
    if VIEW_MARK in error["message"]:
        what = f"a view of {what} (indexing, .view, .t() and slicing give views that share its memory)"
    update = stmt is not None and _reads_grad(stmt)
    message = (
        f"Line {line} changes {what} in place, and it is a leaf that requires grad: autograd would have to record "
        "the change as part of the graph that computes it, which would make the leaf its own result, so torch "
        "refuses."
        + (
            " An update with the gradient is not part of the model's computation: it belongs under "
            "torch.no_grad(). (Writing `w = w - lr * w.grad` instead runs, but makes `w` a new non-leaf tensor "
            "whose .grad stays None.)"
            if update
            else " A change that is not part of the computation (an initialisation, an update) belongs under "
            "torch.no_grad()."
        )
    )
    torch_name = torch_alias(src)
    fix = (
        _no_grad_fix(src, stmt, name, torch_name, line)
        if stmt is not None and torch_name is not None
        else None
    )
    return [Candidate(KIND, "error", line, message, present(fix))]


def _no_grad_fix(
    src: Source, stmt: ast.stmt, name: str | None, torch_name: str, line: int
) -> CandidateFix | None:
    def intent(fixed: dict, original: dict, siblings: dict) -> bool:
        # the tensor is still a leaf that requires grad wherever the fixed run shows it
        if name is None:
            return True
        shown = [t for s in fixed.get("steps") or () for t in s.get("tensors") or () if t["name"] == name]
        return all(t["requires_grad"] and t["is_leaf"] for t in shown)

    subject = f"`{name}`" if name else "the tensor"
    return fix_of(
        src,
        [src.wrap(stmt, f"with {torch_name}.no_grad():")],
        "no_grad",
        f"Make the change under {torch_name}.no_grad()",
        f"Inside `with {torch_name}.no_grad():` autograd records nothing, so line {line} changes {subject}'s values "
        f"in place and {subject} stays the same leaf, with requires_grad=True (checked: the fixed run raises nothing "
        "and shows it as a leaf that requires grad). This is what optimizers do in their step().",
        intent=intent,
    )
