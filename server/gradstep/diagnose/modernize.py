"""The rewrites that bring code written for PyTorch before 0.4 (2018) up to date, one per idiom,
and all of them at once.

Old code rarely has one old idiom: a training loop with ``backward(retain_variables=True)`` also
prints ``loss.data[0]`` and steps with ``w.data -= …``. A fix for the first alone would stop at the
next, so each old-idiom rule also offers the whole update (``update_all``), verified by one run.
"""

from __future__ import annotations

import ast

from gradstep.diagnose.candidate import CandidateFix, fix_of
from gradstep.diagnose.source import Edit, Source, keyword

MAX_WRITES = 8  # .data writes rewritten in one fix


def imports_torch(src: Source) -> bool:
    """``torch`` is the torch module in the snippet (``import torch``)."""
    return any(
        isinstance(n, ast.Import) and any(a.name == "torch" and a.asname is None for a in n.names)
        for n in src.walk()
    )


def _spans(node: ast.AST, line: int | None) -> bool:
    return line is None or node.lineno <= line <= node.end_lineno


# -- retain_variables= -> retain_graph= ---------------------------------------------------------


def retain_graph(src: Source, line: int | None = None) -> list[Edit]:
    return [
        src.replace(kw, f"retain_graph={src.text(kw.value)}")
        for call in src.walk()
        if isinstance(call, ast.Call) and _spans(call, line)
        for kw in [keyword(call, "retain_variables")]
        if kw is not None
    ]


# -- Variable(x, volatile=True) -> x --------------------------------------------------------------


def volatile_calls(src: Source, line: int | None = None) -> list[tuple[ast.Call, ast.keyword]]:
    return [
        (call, kw)
        for call in src.walk()
        if isinstance(call, ast.Call) and _spans(call, line)
        for kw in [keyword(call, "volatile")]
        if kw is not None
    ]


def without_volatile(src: Source, call: ast.Call, kw: ast.keyword) -> Edit:
    """``Variable(x, volatile=True)`` -> ``x``; any other call loses the keyword."""
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    if name == "Variable" and len(call.args) == 1 and call.keywords == [kw]:
        return src.replace(call, src.text(call.args[0]))
    items = sorted([*call.args, *call.keywords], key=lambda n: (n.lineno, n.col_offset))
    at = items.index(kw)
    if at > 0:
        (line, col), (end_line, end_col) = src.end(items[at - 1]), src.end(kw)
    elif len(items) > 1:
        (line, col), (end_line, end_col) = src.start(kw), src.start(items[1])
    else:
        (line, col), (end_line, end_col) = src.start(kw), src.end(kw)
    return Edit(line, col, end_line, end_col, "")


# -- loss.data[0] -> loss.item() ------------------------------------------------------------------


def item(src: Source, line: int | None = None) -> list[Edit]:
    """``x.data[0]`` -> ``x.item()`` everywhere; at ``line`` (where torch said the tensor is 0-dim)
    any ``x[0]`` too."""
    subs = [
        n
        for n in src.walk()
        if isinstance(n, ast.Subscript)
        and isinstance(n.ctx, ast.Load)
        and isinstance(n.slice, ast.Constant)
        and n.slice.value == 0
        and _spans(n, line)
        and (line is not None or _through_data(n))
    ]
    outer = [s for s in subs if not any(o is not s and _inside(s, o) for o in subs)]
    return [src.replace(s, _item_of(src, s)) for s in outer]


def _through_data(sub: ast.Subscript) -> bool:
    return isinstance(sub.value, ast.Attribute) and sub.value.attr == "data"


def _inside(inner: ast.AST, outer: ast.AST) -> bool:
    return any(n is inner for n in ast.walk(outer))


def _item_of(src: Source, sub: ast.Subscript) -> str:
    value = sub.value.value if _through_data(sub) else sub.value
    text = src.text(value)
    simple = isinstance(value, ast.Name | ast.Attribute | ast.Call | ast.Subscript)
    return f"{text}.item()" if simple else f"({text}).item()"


# -- w.data -= v -> with torch.no_grad(): w -= v -------------------------------------------------


class _NoData(ast.NodeTransformer):
    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        return node.value if node.attr == "data" and isinstance(node.ctx, ast.Load) else node


def _data(node: ast.AST) -> ast.expr | None:
    """``x`` for ``x.data``."""
    return node.value if isinstance(node, ast.Attribute) and node.attr == "data" else None


def _store(x: ast.expr) -> ast.expr | None:
    strip = _NoData().visit
    if isinstance(x, ast.Name):
        return ast.Name(x.id, ast.Store())
    if isinstance(x, ast.Attribute):
        return ast.Attribute(strip(x.value), x.attr, ast.Store())
    if isinstance(x, ast.Subscript):
        return ast.Subscript(strip(x.value), strip(x.slice), ast.Store())
    return None


def without_data(stmt: ast.stmt) -> ast.stmt | None:
    """The write without ``.data``: ``x.data -= v`` -> ``x -= v``, ``x.data = v`` -> ``x.copy_(v)``,
    ``x.data.zero_()`` -> ``x.zero_()``; None for any other statement."""
    strip = _NoData().visit
    if isinstance(stmt, ast.AugAssign) and (x := _data(stmt.target)) is not None:
        target = _store(x)
        return ast.AugAssign(target, stmt.op, strip(stmt.value)) if target is not None else None
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and (x := _data(stmt.targets[0])) is not None:
        return ast.Expr(ast.Call(ast.Attribute(strip(x), "copy_", ast.Load()), [strip(stmt.value)], []))
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call, func = stmt.value, stmt.value.func
        if isinstance(func, ast.Attribute) and func.attr.endswith("_") and not func.attr.startswith("_"):
            x = _data(func.value)
            if x is not None:
                args = [strip(a) for a in call.args]
                kws = [ast.keyword(k.arg, strip(k.value)) for k in call.keywords]
                return ast.Expr(ast.Call(ast.Attribute(strip(x), func.attr, ast.Load()), args, kws))
    return None


def data_writes(src: Source, before: int | None = None) -> list[tuple[ast.stmt, ast.stmt]]:
    """(statement, its rewrite) of each write through ``.data`` (that starts before line ``before``)."""
    if not imports_torch(src):
        return []
    writes = []
    for stmt in src.walk():
        if (
            isinstance(stmt, ast.stmt)
            and (before is None or stmt.lineno < before)
            and src.owns_its_lines(stmt)
        ):
            new = without_data(stmt)
            if new is not None:
                writes.append((stmt, new))
    return sorted(writes, key=lambda w: w[0].lineno)[:MAX_WRITES]


def under_no_grad(src: Source, writes: list[tuple[ast.stmt, ast.stmt]]) -> list[Edit]:
    """The writes in place under ``with torch.no_grad():``, one block for writes that follow each other."""
    groups: list[list[tuple[ast.stmt, ast.stmt]]] = []
    for stmt, new in writes:
        found = src.body_of(stmt)
        if groups and found is not None and found[1] > 0 and found[0][found[1] - 1] is groups[-1][-1][0]:
            groups[-1].append((stmt, new))
        else:
            groups.append([(stmt, new)])
    edits = []
    for group in groups:
        first, last = group[0][0], group[-1][0]
        indent = src.indent_of(first.lineno)
        body = "".join(f"\n{indent}    {ast.unparse(new)}" for _, new in group)
        (line, col), (end_line, end_col) = src.start(first), src.end(last)
        edits.append(Edit(line, col, end_line, end_col, f"with torch.no_grad():{body}"))
    return edits


# -- all of them -----------------------------------------------------------------------------------


def update_all(src: Source, own: CandidateFix | None) -> CandidateFix | None:
    """The fix that updates every old idiom in the snippet, where it differs from the rule's own fix."""
    edits = [
        *retain_graph(src),
        *(without_volatile(src, call, kw) for call, kw in volatile_calls(src)),
        *item(src),
        *under_no_grad(src, data_writes(src)),
    ]
    fix = fix_of(
        src,
        edits,
        "update_all",
        "Update every pre-0.4 idiom in the snippet",
        "retain_variables= becomes retain_graph=, volatile=True is dropped, x.data[0] becomes x.item(), writes "
        "through .data happen in place under torch.no_grad() (checked: the updated snippet runs).",
    )
    return None if fix is None or (own is not None and fix.code == own.code) else fix
