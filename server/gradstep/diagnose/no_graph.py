"""``backward()`` on a tensor with no graph: "element 0 of tensors does not require grad …".

The trace says the call failed this way and what the run had at that moment (which
leaves required grad, which lines built nodes); the syntax tree says which of the
common causes this run shows:

* the output was computed under ``torch.no_grad()`` / ``torch.inference_mode()`` (a
  ``with`` block or a decorator) — its line built no node. Fix: compute it outside;
* ``requires_grad`` was turned on after the output was computed (the leaf requires grad
  at the failing call, but the output's graph was built without it). Fix: turn it on
  right after the tensor is created;
* gradients were turned off (``requires_grad = False``, ``requires_grad_(False)``) and
  no tensor requires grad any more. Fix: drop that line.

Each fix is checked: the backward runs, and the tensor it names gets a ``.grad``.
"""

from __future__ import annotations

import ast

from gradstep.diagnose import facts, graph_cut
from gradstep.diagnose.calls import output_of, the_call_at
from gradstep.diagnose.candidate import Candidate, CandidateFix, Intent, fix_of, present
from gradstep.diagnose.source import Edit, Source, assigned_names, call_name, names_in
from gradstep.diagnose.toolkit import calls_failing_with, dotted_name, enclosing_with, is_call_of

KIND = "backward_without_graph"
# the curated snippets in snippets/ that show this mistake
SNIPPETS = ("forward_under_no_grad_fails", "no_grad_forward_then_loss_fails")
MARK = "does not require grad and does not have a grad_fn"
_NO_GRAD = ("no_grad", "inference_mode")


def _is_no_grad(expr: ast.AST) -> bool:
    return is_call_of(expr, _NO_GRAD)


def _defining(src: Source, out: ast.expr, line: int) -> ast.stmt | None:
    """The statement that computed the output: the last assignment to its name before ``line``,
    or the call's own statement when the output is an expression."""
    stmt = src.statement_of(out)
    if not isinstance(out, ast.Name):
        return stmt
    found = [
        s
        for s in src.walk()
        if isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        and s.end_lineno < line
        and out.id in assigned_names(s)
    ]
    return max(found, key=lambda s: s.lineno) if found else None


def _no_grad_scope(src: Source, stmt: ast.stmt) -> ast.AST | None:
    """The ``with torch.no_grad():`` block or the function decorated with it that holds ``stmt``."""
    return enclosing_with(src, stmt, _is_no_grad, decorated=True)


def _called_under_no_grad(src: Source, stmt: ast.stmt) -> ast.AST | None:
    """For ``loss = forward(x)``: the no_grad scope in the snippet's ``forward`` that its return is in."""
    called = {call_name(c) for c in ast.walk(stmt) if isinstance(c, ast.Call)}
    for name in called:
        for ret in _returns_of(src, name):
            scope = _no_grad_scope(src, ret)
            if scope is not None:
                return scope
    return None


MAX_CHAIN = 64  # statements one search follows back from the output


def _assignment_before(src: Source, name: str, line: int, scope: ast.AST | None) -> ast.stmt | None:
    """The last assignment to ``name`` that ends before ``line``, in ``scope`` (a function) when it has
    one there, else anywhere (a name a function reads from the module)."""
    found = [s for s in _assignments(src).get(name, ()) if s.end_lineno < line]
    local = [s for s in found if _scope(src, s) is scope]
    chosen = local or [s for s in found if _scope(src, s) is None]
    return max(chosen, key=lambda s: s.lineno) if chosen else None


def _assignments(src: Source) -> dict[str, list[ast.stmt]]:
    """name -> the statements that assign it (one walk of the tree per snippet, kept on ``src``)."""
    cached = src.__dict__.get("_no_graph_assignments")
    if cached is None:
        cached = {}
        for s in src.walk():
            if isinstance(s, ast.Assign | ast.AugAssign | ast.AnnAssign):
                names = assigned_names(s)
            elif isinstance(s, ast.For | ast.AsyncFor):
                names = _names_of(s.target)
            else:
                continue
            for name in names:
                cached.setdefault(name, []).append(s)
        src.__dict__["_no_graph_assignments"] = cached
    return cached


def _names_of(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _scope(src: Source, node: ast.AST) -> ast.AST | None:
    return src.enclosing(node, (ast.FunctionDef, ast.AsyncFunctionDef))


def _returns_of(src: Source, called: str) -> list[ast.Return]:
    """The return statements of the snippet's function ``called``, or of the ``forward`` of its
    class ``called`` (a module: calling an instance runs its forward)."""
    by_name = src.__dict__.get("_no_graph_returns")
    if by_name is None:
        by_name = {}
        for node in src.walk():
            fns: list[ast.AST] = []
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                fns = [node]
            elif isinstance(node, ast.ClassDef):
                fns = [f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "forward"]
            for fn in fns:
                returns = [r for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value is not None]
                by_name.setdefault(node.name, []).extend(returns)
        src.__dict__["_no_graph_returns"] = by_name
    return by_name.get(called, [])


def upstream(src: Source, out: ast.expr, line: int) -> list[ast.stmt]:
    """The statements the output was computed through, nearest first: back from the names it reads to
    the assignments that made them (the last one before), into the snippet's functions it calls (their
    returns), and into a module's ``forward`` (``net(x)`` where ``net = Net()``)."""
    start = src.statement_of(out)
    seen: list[ast.stmt] = []
    todo: list[tuple[ast.AST, int, ast.AST | None]] = [(out, line, _scope(src, start) if start else None)]
    while todo and len(seen) < MAX_CHAIN:
        node, before, scope = todo.pop(0)
        found: list[ast.stmt] = []
        for name in names_in(node):
            stmt = _assignment_before(src, name, before, scope)
            if stmt is not None:
                found.append(stmt)
        for call in (c for c in ast.walk(node) if isinstance(c, ast.Call)):
            found += _returns_of(src, call_name(call).rsplit(".", 1)[-1])
        for stmt in found:
            if stmt in seen:
                continue
            seen.append(stmt)
            value = stmt.iter if isinstance(stmt, ast.For) else stmt.value
            if value is not None:
                todo.append((value, stmt.lineno, _scope(src, stmt)))
    return seen


def _cut_upstream(
    src: Source, out: ast.expr, line: int, built: set, roots: set[str]
) -> tuple[ast.stmt, ast.AST] | None:
    """The nearest statement the output was computed through that ran under no_grad / inference_mode,
    built no node, and computed from a tensor that requires grad: where the output's graph was cut.
    (An update ``w -= …`` under no_grad keeps ``w`` a leaf that requires grad: it cuts nothing.)"""
    for stmt in upstream(src, out, line):
        if stmt.lineno in built or not isinstance(stmt, ast.Assign | ast.AnnAssign):
            continue
        scope = _no_grad_scope(src, stmt) or _called_under_no_grad(src, stmt)
        if scope is not None and _from_a_leaf(src, stmt, roots):
            return stmt, scope
    return None


def _from_a_leaf(src: Source, stmt: ast.Assign | ast.AnnAssign, roots: set[str]) -> bool:
    """``stmt`` computes from a tensor that requires grad (in a module's method: from its own parameters)."""
    value = stmt.value
    if value is None:
        return False
    if "self" in names_in(value) and src.enclosing(stmt, (ast.ClassDef,)) is not None:
        return True
    before = upstream(src, value, stmt.lineno)
    read = names_in(value).union(
        *(names_in(s.value) for s in before if getattr(s, "value", None) is not None)
    )
    return bool(read & roots)


def _turns_on(stmt: ast.stmt) -> tuple[str, bool] | None:
    """(name, on) for ``x.requires_grad_()``, ``x.requires_grad_(False)``, ``x.requires_grad = …``."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        func = stmt.value.func
        if isinstance(func, ast.Attribute) and func.attr == "requires_grad_":
            args = stmt.value.args or [k.value for k in stmt.value.keywords if k.arg == "requires_grad"]
            on = not (args and isinstance(args[0], ast.Constant) and args[0].value is False)
            target = func.value
        else:
            return None
    elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target = stmt.targets[0]
        if not (isinstance(target, ast.Attribute) and target.attr == "requires_grad"):
            return None
        if not isinstance(stmt.value, ast.Constant) or not isinstance(stmt.value.value, bool):
            return None
        on = stmt.value.value
        target = target.value
    else:
        return None
    return (dotted_name(target), on) if dotted_name(target) else None


def _turns_off(stmt: ast.stmt) -> bool:
    turned = _turns_on(stmt)
    return turned is not None and not turned[1]


def find(trace: dict, src: Source) -> list[Candidate]:
    for step in calls_failing_with(trace, MARK):
        line = step.get("line")
        call = the_call_at(src, line)
        out = output_of(call) if call is not None else None
        defining = _defining(src, out, line) if out is not None else None
        label = f"`{src.text(out)}`" if out is not None else "The output"
        leaves = [t["name"] for t in step.get("tensors") or () if t["requires_grad"] and t["is_leaf"]]
        built = {n.get("line") for n in trace.get("nodes") or ()}
        found = _cause(src, trace, defining, line, leaves, built, label)
        if found is None and out is not None and leaves:
            chained = _cut_upstream(src, out, line, built, {graph_cut.root_of(n) for n in leaves})
            if chained is not None:
                found = _under_no_grad(src, chained[1], chained[0], label, line, through=defining)
        if found is None and out is not None and leaves:
            found = _cut(src, out, leaves, line, label)
        if found is None:
            message = (
                f"{label} at line {line} has no grad_fn and does not require grad: none of the tensors it was "
                "computed from required grad"
                + (
                    "."
                    if leaves
                    else " (no tensor in this run requires grad). Create the tensors you want gradients for with "
                    "requires_grad=True."
                )
            )
            return [Candidate(KIND, "error", line, message)]
        at, message, fixes = found
        return [Candidate(KIND, "error", at, message, fixes)]
    return []


def _cause(
    src: Source,
    trace: dict,
    defining: ast.stmt | None,
    line: int,
    leaves: list[str],
    built: set,
    label: str,
) -> tuple[int, str, list[CandidateFix]] | None:
    if defining is not None and defining.lineno not in built:
        scope = _no_grad_scope(src, defining) or _called_under_no_grad(src, defining)
        if scope is not None:
            return _under_no_grad(src, scope, defining, label, line)
    late = _turned_on_late(src, defining, line, leaves)
    if late is not None:
        return _too_late(src, late, defining, label, line)
    if not leaves:
        off = next((s for s in _statements(src) if s.end_lineno < line and _turns_off(s)), None)
        if off is not None:
            return _frozen(src, off, label, line)
    return None


def _statements(src: Source) -> list[ast.stmt]:
    return sorted((s for s in src.walk() if isinstance(s, ast.stmt)), key=lambda s: (s.lineno, s.col_offset))


def _turned_on_late(src: Source, defining: ast.stmt | None, line: int, leaves: list[str]) -> ast.stmt | None:
    if defining is None:
        return None
    for stmt in _statements(src):
        turned = _turns_on(stmt)
        if turned and turned[1] and turned[0] in leaves and defining.end_lineno < stmt.lineno < line:
            return stmt
    return None


def _gets_grad(name: str | None) -> Intent:
    def intent(fixed: dict, original: dict, siblings: dict) -> bool:
        # the fixed run is clean (verify checks it): its backward ran and filled .grad (of ``name``)
        got = facts.final_grads(fixed)
        return bool(facts.calls(fixed)) and bool(got) and (name is None or name in got)

    return intent


def _under_no_grad(
    src: Source, scope: ast.AST, defining: ast.stmt, label: str, line: int, through: ast.stmt | None = None
) -> tuple[int, str, list[CandidateFix]]:
    """``defining`` ran under ``scope``; ``through``: the output's own statement, when ``defining`` is
    further up the chain the output was computed through."""
    if isinstance(scope, ast.With | ast.AsyncWith):
        context = src.text(scope.items[0].context_expr)
        where = f"inside `with {context}:` (line {scope.lineno})"
        edit = src.unwrap(scope) if len(scope.items) == 1 else None
        what = "it" if through is None or through is defining else "the forward"
        title = f"Compute {what} outside {context}"
    else:
        decorator = next(d for d in scope.decorator_list if _is_no_grad(d))
        context = src.text(decorator)
        where = f"in `{scope.name}`, decorated with `@{context}` (line {decorator.lineno})"
        edit = _delete_decorator(src, decorator)
        title = f"Remove @{context} from {scope.name}"
    if through is None or through is defining:
        message = (
            f"{label} was computed at line {defining.lineno} {where}: there autograd records nothing, so the line "
            f"built no graph and {label} has no grad_fn. The backward at line {line} has nothing to go back through. "
            "Compute what you want gradients of outside that block (no_grad is for evaluation and updates)."
        )
    else:
        made = ", ".join(f"`{n}`" for n in sorted(assigned_names(defining))) or "its result"
        message = (
            f"{label} (line {through.lineno}) was computed from {made}, which line {defining.lineno} computed "
            f"{where}: there autograd records nothing, so that line built no graph and what is computed from its "
            f"result has no grad_fn either, whatever lies in between. The backward at line {line} has nothing to go "
            "back through. Compute the forward pass outside that block (no_grad is for evaluation and updates)."
        )
    fix = fix_of(
        src,
        [edit],
        "enable_grad",
        title,
        f"Without {context}, autograd records the forward again, so the backward at line {line} has a graph "
        "to go through (checked: it runs and fills .grad).",
        intent=_gets_grad(None),
    )
    return defining.lineno, message, present(fix)


def _delete_decorator(src: Source, decorator: ast.expr) -> Edit | None:
    text = src.lines[decorator.lineno - 1]
    if decorator.lineno != decorator.end_lineno or not text.strip().startswith("@"):
        return None
    if text.strip() != "@" + src.text(decorator):
        return None
    return Edit(decorator.lineno, 0, decorator.lineno + 1, 0, "")


def _too_late(
    src: Source, late: ast.stmt, defining: ast.stmt, label: str, line: int
) -> tuple[int, str, list[CandidateFix]]:
    name = _turns_on(late)[0]
    message = (
        f"`{name}` requires grad only from line {late.lineno} on, but {label} was computed from it at line "
        f"{defining.lineno}, before that: autograd records operations only on tensors that already require grad, "
        f"so that line built no graph. Turning requires_grad on later does not go back and record it."
    )
    fix = None
    created = [
        s
        for s in _statements(src)
        if isinstance(s, ast.Assign | ast.AnnAssign)
        and name in assigned_names(s)
        and s.end_lineno < defining.lineno
    ]
    if created:
        origin = created[-1]
        fix = fix_of(
            src,
            [src.delete(late), src.insert_after(origin, src.text(late))],
            "requires_grad_first",
            f"Turn requires_grad on right after {name} is created (line {origin.end_lineno})",
            f"With `{src.text(late)}` right after line {origin.end_lineno}, every operation on `{name}` is "
            f"recorded, so {label} has a graph back to it (checked: the backward runs and fills "
            f"{name}.grad).",
            intent=_gets_grad(name),
        )
    return late.lineno, message, present(fix)


def _frozen(src: Source, off: ast.stmt, label: str, line: int) -> tuple[int, str, list[CandidateFix]]:
    name = _turns_on(off)[0]
    stmt: ast.stmt = off
    parent = src.parents.get(off)
    if isinstance(parent, ast.For) and parent.body == [off] and not parent.orelse:
        stmt = parent  # `for p in model.parameters(): p.requires_grad = False`: the whole loop
    what = f"`{src.text(off)}`" + (
        f" for every `{src.text(stmt.target)}` in `{src.text(stmt.iter)}`" if stmt is not off else ""
    )
    message = (
        f"Line {off.lineno} turns gradients off ({what}), and after it no tensor in this run requires grad: "
        f"{label} was computed from tensors that are all frozen, so it has no graph and the backward at line {line} "
        "has nothing to compute. Freeze only the parameters you do not train."
    )
    fix = fix_of(
        src,
        [src.delete(stmt)],
        "unfreeze",
        f"Remove {_lines(stmt)}: keep {src.text(stmt.iter) if stmt is not off else name} trainable",
        f"Without {_lines(stmt)} the tensors keep requires_grad=True, so {label} has a graph back to it "
        "(checked: the backward runs and fills .grad). To fine-tune part of a model, freeze only the "
        "layers you keep fixed.",
        intent=_gets_grad(None),
    )
    return off.lineno, message, present(fix)


def _lines(stmt: ast.stmt) -> str:
    return (
        f"line {stmt.lineno}" if stmt.end_lineno == stmt.lineno else f"lines {stmt.lineno}–{stmt.end_lineno}"
    )


def _cut(
    src: Source, out: ast.expr, leaves: list[str], line: int, label: str
) -> tuple[int, str, list[CandidateFix]] | None:
    """The path from a leaf that requires grad to the output was cut (``.item()``, ``torch.tensor(...)``…)."""
    flow = graph_cut.Flow(src, [out])
    reaching = flow.reaching_output()
    for name in leaves:
        cut = flow.first_cut(graph_cut.root_of(name), reaching)
        if cut is None:
            continue
        message = (
            f"`{name}` requires grad, but {label} was computed from it through `{src.text(cut.node)}` at line "
            f"{cut.node.lineno}, which keeps only the values: no graph leads from `{name}` to {label}, so {label} "
            f"has no grad_fn and the backward at line {line} has nothing to go back through."
        )
        fixes = []
        healed = graph_cut.heal(src, graph_cut.root_of(name), [line], cut)
        if healed:
            code, title = healed
            fixes.append(
                CandidateFix(
                    "keep_graph",
                    title,
                    f"Using the tensor itself keeps its graph, so {label} has a grad_fn and the backward reaches "
                    f"`{name}` (checked: it runs and fills {name}.grad).",
                    code,
                    intent=_gets_grad(name),
                )
            )
        return cut.node.lineno, message, fixes
    return None
