"""An in-place change of a tensor that a node saved for its backward.

The trace says which node's saved tensor went stale (its version counter moved)
and at which step; the syntax tree says which statement changed that tensor in
place (``y.mul_(2)``, ``y += 1``, ``y[0] = 0``). Fixes: the out-of-place form
(``y = y * 2``), or a ``.clone()`` to change instead of the saved tensor.
"""

from __future__ import annotations

import ast

from gradstep.diagnose import facts, stale_graph
from gradstep.diagnose.candidate import Candidate, CandidateFix, fix_of, present
from gradstep.diagnose.non_scalar import outcome
from gradstep.diagnose.source import Source
from gradstep.diagnose.toolkit import calls_failing_with

KIND = "inplace_modified_saved_tensor"
# the curated snippets in snippets/ that show this mistake
SNIPPETS = ("inplace_modified_saved_tensor_fails",)
_BINOPS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Pow: "**",
    ast.MatMult: "@",
    ast.Mod: "%",
}


def _inplace_target(stmt: ast.stmt) -> str | None:
    """The name ``stmt`` changes in place: ``y.op_(...)``, ``y += v``, ``y[i] = v``."""
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        return stmt.target.id
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target = stmt.targets[0]
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            return target.value.id
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        func = stmt.value.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr.endswith("_")
            and not func.attr.startswith("_")
            and isinstance(func.value, ast.Name)
        ):
            return func.value.id
    return None


def _out_of_place(src: Source, stmt: ast.stmt, name: str) -> str | None:
    if isinstance(stmt, ast.AugAssign):
        op = _BINOPS.get(type(stmt.op))
        if op is None:
            return None
        return f"{name} = {name} {op} {src.text(stmt.value)}"
    if isinstance(stmt, ast.Expr):
        call = stmt.value
        text = src.text(call)
        func = call.func
        head = f"{name}.{func.attr}"
        if not text.startswith(head):
            return None
        return f"{name} = {name}.{func.attr[:-1]}{text[len(head) :]}"
    return None  # y[i] = v has no plain out-of-place form: clone instead


def _inplace_statement(src: Source, names: set[str], after: int | None, upto: int | None) -> ast.stmt | None:
    """The last in-place statement on one of ``names`` in lines (after, upto]: the change the trace saw."""
    found = [
        stmt
        for stmt in src.walk()
        if isinstance(stmt, ast.stmt)
        and (after is None or stmt.lineno > after)
        and (upto is None or stmt.lineno <= upto)
        and _inplace_target(stmt) in names
    ]
    return max(found, key=lambda s: (s.lineno, s.col_offset)) if found else None


def find(trace: dict, src: Source) -> list[Candidate]:
    for step in calls_failing_with(trace, facts.STALE_MARK):
        if stale_graph.explains(trace, src, step):
            return []  # an optimizer changed weights a loop's graph, built before it, saved: that rule says so
        failed = facts.failed_node(step)
        line = step.get("line")
        if failed is None:
            return [Candidate(KIND, "error", line, _message(None, None, None, line))]
        node = trace["nodes"][failed]
        stale = facts.state(step, failed).get("stale_saved") or []
        saved = {s["name"]: s for s in node.get("saved") or ()}
        names = {saved[w]["of"] for w in stale if w in saved and saved[w].get("of")}
        since = facts.first_step_where(trace, failed, "stale", step["index"] + 1)
        upto = since.get("line") if since is not None else line
        stmt = _inplace_statement(src, names, node.get("line"), upto) if names else None
        if stmt is None:  # changed through another name: a view of it (row = h[0]; row.mul_(3))
            stmt = _inplace_statement(src, _all_names(src), node.get("line"), upto)
        name = _inplace_target(stmt) if stmt is not None else None
        message = _message(
            node, ", ".join(stale) or None, stmt, line, name, via_view=bool(names) and name not in names
        )
        fixes = _fixes(src, stmt, name) if stmt is not None else []
        return [Candidate(KIND, "error", stmt.lineno if stmt is not None else line, message, fixes)]
    return []


def _all_names(src: Source) -> set[str]:
    return {n.id for n in src.walk() if isinstance(n, ast.Name)}


def _message(
    node: dict | None,
    which: str | None,
    stmt: ast.stmt | None,
    line: int | None,
    name: str | None = None,
    via_view: bool = False,
) -> str:
    if node is None:
        return (
            f"The backward at line {line} needs a tensor that was modified in place after a node saved it, so the "
            "saved value is no longer the one the gradient formula needs."
        )
    shared = ", a view of it," if via_view else ""
    where = (
        f"line {stmt.lineno} changes `{name}`{shared} in place"
        if stmt is not None
        else "a later in-place operation changed it"
    )
    return (
        f"{node['op']} (line {node.get('line')}) saved {which or 'a tensor'} for its backward, and {where}: its "
        f"version counter moved, so the backward at line {line} refuses to use the changed value (the gradient "
        "would be wrong)."
    )


def _fixes(src: Source, stmt: ast.stmt, name: str) -> list[CandidateFix]:
    out_of_place = None
    replacement = _out_of_place(src, stmt, name)
    if replacement is not None:
        out_of_place = fix_of(
            src,
            [src.replace(stmt, replacement)],
            "out_of_place",
            f"Use the out-of-place form: {replacement}",
            f"`{replacement}` computes a new tensor and rebinds `{name}` to it; the tensor the node saved "
            "stays as it was, so backward can use it. It costs one more tensor of that size.",
        )
    clone = fix_of(
        src,
        [src.insert_before(stmt, f"{name} = {name}.clone()")],
        "clone",
        f"Clone before changing it: {name} = {name}.clone()",
        f"`{name}.clone()` makes a copy (through CloneBackward0, so gradients still flow) and the in-place "
        "change then applies to the copy; the saved tensor keeps its version. It costs one more tensor of "
        "that size.",
        intent=_same_as_out_of_place,
    )
    return present(out_of_place, clone)


def _same_as_out_of_place(fixed: dict, original: dict, siblings: dict) -> bool:
    # both compute the same function, so where both ran their gradients must agree
    return "out_of_place" not in siblings or facts.same_grads(
        outcome(fixed), outcome(siblings["out_of_place"])
    )
