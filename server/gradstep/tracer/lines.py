"""Line markers: the snippet's own statements report themselves as they run.

``sys.settrace`` would also call back on every Python call inside torch (a
model's forward, ``copy.deepcopy`` of its layers...), which costs more than the
model itself. Instead the snippet's AST gets a call before every statement,
and every function body reports its entry and exit, so attribution of work to
lines matches what a line tracer would see at a fraction of the cost.
"""

from __future__ import annotations

import ast

LINE = "__gradstep_line__"
ENTER = "__gradstep_enter__"
EXIT = "__gradstep_exit__"
LOOP = "__gradstep_loop__"  # a loop starts (LOOP_START), starts an iteration (LOOP_NEXT), ends (LOOP_END)
LOOP_START, LOOP_NEXT, LOOP_END = 0, 1, 2


def instrument(tree: ast.Module) -> ast.Module:
    tree.body = _Markers(_compiled_names(tree))._body(tree.body)
    return ast.fix_missing_locations(tree)


def _is_compile(func: ast.expr) -> bool:
    """``torch.compile`` / ``compile`` (as imported from torch), called or as a decorator."""
    if isinstance(func, ast.Call):
        func = func.func
    return (isinstance(func, ast.Attribute) and func.attr == "compile") or (
        isinstance(func, ast.Name) and func.id == "compile"
    )


def _compiled_names(tree: ast.Module) -> set[str]:
    """Functions the snippet hands to ``torch.compile(f)``: dynamo gives up on a frame that
    calls the markers, so their bodies stay as written (their work is the calling line's)."""
    return {
        node.args[0].id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and _is_compile(node.func)
        and node.args
        and isinstance(node.args[0], ast.Name)
    }


_REBINDS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)  # may let go of a graph


def _call(name: str, *args: int | tuple[str, ...]) -> ast.Expr:
    return ast.Expr(ast.Call(ast.Name(name, ast.Load()), [ast.Constant(a) for a in args], []))


def _bound_names(stmt: ast.stmt) -> tuple[str, ...]:
    """The plain names an assignment binds (``w = ...``, ``a, b = ...``): the recorder notes which
    tensor each one names after the statement, so a leaf no name reaches later keeps the line
    that named it."""
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        targets = [stmt.target]
    else:
        return ()
    out: list[str] = []
    stack = list(targets)
    while stack:
        target = stack.pop(0)
        if isinstance(target, ast.Name):
            out.append(target.id)
        elif isinstance(target, ast.Tuple | ast.List):
            stack.extend(target.elts)
        elif isinstance(target, ast.Starred):
            stack.append(target.value)
    return tuple(dict.fromkeys(out))


class _Markers(ast.NodeTransformer):
    def __init__(self, compiled: set[str]) -> None:
        self.compiled = compiled
        self.generator = False  # in a generator's body: its loops run piecemeal, never counted
        self.loops: set[int] = set()  # id() of the loops given iteration markers

    def _body(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for i, stmt in enumerate(stmts):
            stmt = self.visit(stmt)
            if (i == 0 and _is_docstring(stmt)) or _is_future(stmt):
                out.append(stmt)  # must stay first: a marker before it changes its meaning
                continue
            if isinstance(stmt, _REBINDS):
                bound = _bound_names(stmt)
                marker = _call(LINE, stmt.lineno, 1, bound) if bound else _call(LINE, stmt.lineno, 1)
            else:
                marker = _call(LINE, stmt.lineno)
            ast.copy_location(marker, stmt)
            ast.copy_location(marker.value, stmt)
            if id(stmt) in self.loops:  # the loop, bracketed: iterations count while it runs
                start = _at(_call(LOOP, LOOP_START), stmt)
                bracket = _at_stmt(
                    ast.Try(
                        body=[stmt], handlers=[], orelse=[], finalbody=[_at(_call(LOOP, LOOP_END), stmt)]
                    ),
                    stmt,
                )
                out.extend((marker, start, bracket))
                continue
            out.extend((marker, stmt))
        return out

    def _counted(self, node: ast.For | ast.While) -> None:
        """Each iteration of ``node`` reports itself first thing in its body."""
        if self.generator:
            return
        node.body = [_at(_call(LOOP, LOOP_NEXT), node.body[0]), *node.body]
        self.loops.add(id(node))

    def visit_For(self, node: ast.For) -> ast.AST:
        self.generic_visit(node)
        self._counted(node)
        return node

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                setattr(node, field, self._body(stmts))
        if isinstance(node, ast.Try | ast.TryStar):
            for handler in node.handlers:
                handler.body = self._body(handler.body)
        if isinstance(node, ast.Match):
            for case in node.cases:
                case.body = self._body(case.body)
        for field, value in ast.iter_fields(node):
            if field in ("body", "orelse", "finalbody", "handlers", "cases"):
                continue
            if isinstance(value, ast.AST):
                setattr(node, field, self.visit(value))
        return node

    def visit_While(self, node: ast.While) -> ast.AST:
        # The condition runs again after the body: report the while line for it.
        self.generic_visit(node)
        node.body = _before_continue(node.body, node.lineno) + [_at(_call(LINE, node.lineno), node)]
        self._counted(node)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        if node.name in self.compiled or any(_is_compile(d) for d in node.decorator_list):
            return node  # compiled by torch.compile: see _compiled_names
        outer, self.generator = self.generator, _is_generator(node)
        try:
            self.generic_visit(node)
        finally:
            self.generator = outer
        if _is_generator(node):
            return node  # its body runs piecemeal; lines still report themselves
        body = node.body
        doc = [body.pop(0)] if _is_docstring(body[0]) else []
        if not body:
            return node
        enter = _call(ENTER)
        guarded = ast.Try(body=body, handlers=[], orelse=[], finalbody=[_call(EXIT)])
        for n in (enter, enter.value, guarded, guarded.finalbody[0], guarded.finalbody[0].value):
            ast.copy_location(n, body[0])
        node.body = [*doc, enter, guarded]
        return node

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        outer, self.generator = self.generator, True  # a coroutine's loops run piecemeal too
        try:
            self.generic_visit(node)
        finally:
            self.generator = outer
        return node

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        return node  # an expression: its work belongs to the line that calls it


def _at(stmt: ast.Expr, where: ast.AST) -> ast.Expr:
    ast.copy_location(stmt, where)
    ast.copy_location(stmt.value, where)
    return stmt


def _at_stmt(stmt: ast.stmt, where: ast.AST) -> ast.stmt:
    ast.copy_location(stmt, where)
    return stmt


def _before_continue(stmts: list[ast.stmt], line: int) -> list[ast.stmt]:
    """Put a marker for ``line`` before each ``continue`` of this loop (not of nested loops)."""
    out: list[ast.stmt] = []
    for stmt in stmts:
        if isinstance(stmt, ast.Continue):
            out.append(_at(_call(LINE, line), stmt))
        elif not isinstance(
            stmt, ast.For | ast.While | ast.AsyncFor | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
        ):
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    setattr(stmt, field, _before_continue(inner, line))
            for handler in getattr(stmt, "handlers", []):
                handler.body = _before_continue(handler.body, line)
        out.append(stmt)
    return out


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _is_future(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"


def _is_generator(fn: ast.FunctionDef) -> bool:
    """Does ``fn`` itself yield (not a function nested in it)?"""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Yield | ast.YieldFrom):
            return True
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))
    return False


def listed(lines: set[int | None]) -> str:
    """Snippet lines as a note lists them: "3, 7" (unknown lines left out; "?" if none is known)."""
    return ", ".join(str(n) for n in sorted(n for n in lines if n is not None)) or "?"
