"""A training loop that goes back through a graph built once, before the loop.

``loss = f(model(x))`` before ``for epoch …: opt.zero_grad(); loss.backward(); opt.step()``:
the loop means to train, but its backward goes through the one graph the line before the
loop built, from the weights as they were then. The run shows it one of three ways: the second
backward fails (the first freed the graph); with ``retain_graph=True``, it fails because the
update changed in place weights the graph saved; or every backward in the loop runs the same
root node, while the optimizer (or an update under no_grad) changes the weights in between.

Fixes, in this order:

* move the forward into the loop: the statements before the loop that built the graph, found
  by following the data from the backward's tensor back (through helper functions the snippet
  defines), stopping at what does not depend on a tensor that requires grad (the data, the
  model itself stay). Checked: every backward in the loop goes through a graph of its own.
* (only where the run failed) ``retain_graph=True``: it runs, but trains every iteration on the
  first graph; its title and explanation say so, and what the fixed runs compute (each
  iteration's .grad, the final .grad) is measured on both and stated side by side.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from gradstep.diagnose import facts, graph_cut
from gradstep.diagnose.calls import drop_keyword, output_of, set_keyword, the_call_at
from gradstep.diagnose.candidate import Candidate, CandidateFix, Outcome, present
from gradstep.diagnose.source import Edit, Source, assigned_names, call_name, keyword, names_in
from gradstep.diagnose.toolkit import call_lines, enclosing_with, is_call_of
from gradstep.printing import fmt_number

KIND = "stale_graph_in_loop"
# the curated snippets in snippets/ that show this mistake
SNIPPETS = ("stale_graph_training_loop_fails",)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
MAX_SHOWN = 6  # iterations quoted in a fix's outcome
MAX_VALUES = 6  # a final .grad with more elements is quoted by its norm


@dataclass
class Stale:
    call: ast.Call
    line: int  # the backward's line
    name: str  # the tensor it differentiates
    loop: ast.stmt
    update: ast.AST  # what changes the weights in the loop
    defining: ast.stmt | None  # the assignment before the loop that built it
    anchor: ast.stmt | None  # the loop, or the statement holding it, in the block ``defining`` is in


def _updates(src: Source, loop: ast.stmt) -> ast.AST | None:
    """What in the loop changes the parameters: an optimizer's ``.step()``, a write through ``.data``,
    or an in-place update under no_grad (``w -= lr * w.grad``, ``p.sub_(…)``)."""
    for node in ast.walk(loop):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            if attr == "step" and not node.args:
                return node
            if attr.endswith("_") and not attr.startswith("zero") and _under_no_grad(src, node, loop):
                return node
        if isinstance(node, ast.AugAssign) and _under_no_grad(src, node, loop):
            return node
        if isinstance(node, ast.Attribute) and node.attr == "data" and isinstance(node.ctx, ast.Store):
            return src.statement_of(node)
    return None


def _under_no_grad(src: Source, node: ast.AST, loop: ast.stmt) -> bool:
    return enclosing_with(src, node, lambda e: is_call_of(e, ("no_grad",)), stop=loop) is not None


def _stale(src: Source, line: int | None) -> Stale | None:
    """The backward at ``line`` when it is in a loop that updates weights, and its tensor is not
    computed in that loop (the syntax of the case; the run must show it too: ``find``)."""
    call = the_call_at(src, line)
    out = output_of(call) if call is not None else None
    if not isinstance(out, ast.Name) or line is None:
        return None
    loop = src.enclosing(call, _LOOPS)
    if loop is None:
        return None
    if any(out.id in _stored(node) for node in ast.walk(loop)):
        return None  # computed in the loop: a graph of its own each iteration
    update = _updates(src, loop)
    if update is None:
        return None
    # the assignment before the loop: in the loop's block, or in a block around it (an epoch loop
    # around a batch loop), up to the function it is in
    anchor: ast.AST | None = loop
    while isinstance(anchor, ast.stmt):
        where = src.body_of(anchor)
        if where is not None:
            block, at = where
            defining = next((s for s in reversed(block[:at]) if out.id in assigned_names(s)), None)
            if defining is not None:
                return Stale(call, line, out.id, loop, update, defining, anchor)
        anchor = src.parents.get(anchor)
        if isinstance(anchor, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            break
    return Stale(call, line, out.id, loop, update, None, None)


def _stored(node: ast.AST) -> set[str]:
    if isinstance(node, ast.stmt):
        return assigned_names(node)
    if isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
        return names_in(node.target, ast.Store)
    if isinstance(node, ast.NamedExpr):
        return {node.target.id}
    return set()


def _root(step: dict) -> int | None:
    """The node a backward started at (the tensor's grad_fn): order 0 in its execution."""
    return next((n["id"] for n in step.get("nodes") or () if n.get("order") == 0), None)


def _shown(trace: dict, stale: Stale) -> str | None:
    """How the run shows the stale graph: "freed" (the second backward failed: the first freed the
    graph), "modified" (it failed: the graph was retained, but the update changed weights it saved),
    "retained" (two backwards in the loop ran the same root), or None."""
    at = [s for s in facts.calls(trace) if s.get("line") == stale.line]
    for i, step in enumerate(at):
        error = step.get("error")
        if error and facts.FREED_MARK in error["message"]:
            failed = facts.failed_node(step)
            freeing = facts.freed_by(trace, failed, step["index"]) if failed is not None else None
            return "freed" if freeing is not None and freeing.get("line") == stale.line else None
        if error and facts.STALE_MARK in error["message"]:
            # a retained graph whose saved weights the update changed in place (Adam, a hand-written
            # update): the same graph as the call before at this line
            ran = [_root(s) for s in at[:i] if not s.get("error")]
            return "modified" if ran and ran[-1] is not None and ran[-1] == _root(step) else None
    ran = [_root(s) for s in at if not s.get("error")]
    return "retained" if len(ran) >= 2 and ran[0] is not None and ran[0] == ran[1] else None


def explains(trace: dict, src: Source, step: dict) -> bool:
    """Whether the failed ``step`` is a stale graph in a training loop (this rule says so, not the
    freed-graph rule)."""
    stale = _stale(src, step.get("line"))
    return stale is not None and _shown(trace, stale) in ("freed", "modified")


def _grad_roots(trace: dict) -> set[str]:
    return {
        graph_cut.root_of(t["name"])
        for step in trace.get("steps") or ()
        for t in step.get("tensors") or ()
        if t["requires_grad"] and t["is_leaf"]
    }


def _functions(src: Source) -> dict[str, ast.AST]:
    return {n.name: n for n in src.walk() if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def _reads(stmt: ast.stmt, functions: dict[str, ast.AST]) -> set[str]:
    """Names ``stmt`` reads, and those the snippet's functions it calls (and the ones they call) read."""
    read = names_in(stmt)
    todo = [call_name(c) for c in ast.walk(stmt) if isinstance(c, ast.Call)]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        fn = functions.get(name)
        if fn is None or name in seen:
            continue
        seen.add(name)
        read |= names_in(fn)
        todo += [call_name(c) for c in ast.walk(fn) if isinstance(c, ast.Call)]
    return read


def _forward(src: Source, stale: Stale, roots: set[str]) -> tuple[list[ast.stmt], bool] | None:
    """The statements before the loop that built the tensor's graph, in order, and whether they can be
    moved (False: something else before the loop reads what they compute, so they are copied)."""
    where = src.body_of(stale.anchor) if stale.anchor is not None else None
    if stale.defining is None or where is None:
        return None
    block, at = where
    before = block[:at]
    functions = _functions(src)
    chain: list[ast.stmt] = []
    needed = {stale.name}
    for stmt in reversed(before):
        made = assigned_names(stmt)
        if made & needed and isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
            chain.append(stmt)
            if not isinstance(stmt, ast.AugAssign):  # `loss += reg` adds to a loss made before it
                needed -= made
            needed |= _reads(stmt, functions)
    graph = set(roots)
    forward = []
    for stmt in reversed(chain):
        made = assigned_names(stmt)
        if made & roots:
            continue  # it creates a parameter (or the model): the loop trains it, it stays
        if _reads(stmt, functions) & graph:
            forward.append(stmt)
            graph |= made
    if stale.defining not in forward:
        return None
    made = set().union(*(assigned_names(s) for s in forward))
    first = before.index(forward[0])
    others = [s for s in before[first:] if s not in forward]
    movable = not any(_reads(s, functions) & made for s in others)
    return forward, movable


def _start_of_line(src: Source, stmt: ast.stmt) -> bool:
    return src.start(stmt)[1] == len(src.indent_of(stmt.lineno))


def _segment(src: Source, node: ast.AST) -> str:
    """``src.text(node)`` from the lines ``src`` keeps (ast.get_source_segment splits the whole code
    each time: moving 300 statements took 3 s)."""
    (line, col), (end_line, end_col) = src.start(node), src.end(node)
    if line == end_line:
        return src.lines[line - 1][col:end_col]
    middle = src.lines[line : end_line - 1]
    return src.lines[line - 1][col:] + "".join(middle) + src.lines[end_line - 1][:end_col]


def _moved_text(src: Source, stmt: ast.stmt, indent: str) -> str:
    old = src.indent_of(stmt.lineno)
    lines = _segment(src, stmt).split("\n")
    rest = [indent + line[len(old) :] if line.startswith(old) else line for line in lines[1:]]
    return "\n".join([indent + lines[0], *rest]) + "\n"


def _move_edits(
    src: Source, stale: Stale, forward: list[ast.stmt], movable: bool
) -> list[Edit | None] | None:
    body = stale.loop.body
    made = set().union(*(assigned_names(s) for s in forward))
    user = next((s for s in body if names_in(s) & made), None)
    if user is None or body[0].lineno == stale.loop.lineno:
        return None
    target = next(s for s in body if s.lineno == user.lineno)  # the first statement on its line
    if not _start_of_line(src, target):
        return None
    indent = src.indent_of(target.lineno)
    text = "".join(_moved_text(src, s, indent) for s in forward)
    edits: list[Edit | None] = [src.insert_at(target.lineno, 0, text)]
    if movable:
        edits += [src.delete(s) for s in forward]
    retain = keyword(stale.call, "retain_graph")
    if retain is not None:
        edits.append(drop_keyword(src, stale.call, "retain_graph"))
    return edits


def _lines(stmts: list[ast.stmt]) -> str:
    numbers = sorted({n for s in stmts for n in range(s.lineno, s.end_lineno + 1)})
    if len(numbers) == 1:
        return f"line {numbers[0]}"
    if numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"lines {numbers[0]}–{numbers[-1]}"
    return "lines " + ", ".join(map(str, numbers))


# -- what a fixed run computes, measured on it ----------------------------------------------------


def _per_iteration(trace: dict, line: int | None) -> dict[str, list[dict]]:
    """name -> what each call at ``line`` gave it: its .grad after a backward, or what autograd.grad
    returned for it."""
    if line is None:
        return {}
    out = facts.grad_growth(trace, line)
    for step in facts.calls(trace):
        if step.get("line") == line and not step.get("error") and step["kind"] == "grad":
            for name, got in zip(step.get("inputs") or (), step.get("returned") or (), strict=False):
                if name and got:
                    out.setdefault(name, []).append(got)
    return out


def _gives(trace: dict, line: int | None) -> str:
    """How the outcome names what each call gave (a backward fills .grad; autograd.grad returns it)."""
    kinds = {s["kind"] for s in facts.calls(trace) if s.get("line") == line}
    return "returned by each autograd.grad call" if kinds == {"grad"} else "after each backward"


def _quoted(grad: dict) -> str:
    values = facts.grad_values(grad) or []
    if 0 < len(values) <= MAX_VALUES:
        return "[" + ", ".join(fmt_number(v) if isinstance(v, int | float) else str(v) for v in values) + "]"
    return f"norm {fmt_number(grad.get('norm') or 0.0)}"


def _norms(grads: list[dict]) -> str:
    shown = ", ".join(fmt_number(g.get("norm") or 0.0) for g in grads[:MAX_SHOWN])
    return shown + (", …" if len(grads) > MAX_SHOWN else "")


def _moves(trace: dict, name: str, iterations: int) -> str:
    """How far each optimizer step (an update step of the trace) moved ``name``: ‖after − before‖. A
    trace records a line's first steps only (tracer/loops.py), so a longer loop is quoted in part."""
    norms = [
        change["delta_norm"]
        for step in trace.get("steps") or ()
        if step["kind"] == "update" and (step.get("update") or {}).get("op") == "step"
        for change in step["update"].get("params") or ()
        if change.get("name") == name and change.get("delta_norm") is not None
    ]
    if not norms:
        return ""
    shown = ", ".join(fmt_number(n) for n in norms[:MAX_SHOWN]) + (", …" if len(norms) > MAX_SHOWN else "")
    which = "each optimizer step" if len(norms) >= iterations else f"the first {len(norms)} optimizer steps"
    return f"; {which} moved `{name}` by {shown}"


def _watched(fixed: dict, line: int | None) -> str | None:
    """The tensor whose .grad the outcome quotes: the first one the loop's backward fills."""
    growth = _per_iteration(fixed, line)
    return next(iter(growth), None)


def _outcome(other: str, label: str, other_label: str) -> Outcome:
    """What a fix's run computes (``label``), next to what its sibling ``other`` computes when that
    one verified too: each iteration's .grad and the final one, measured on the runs."""

    def outcome(fixed: dict, original: dict, siblings: dict) -> str:
        here = _loop_line(fixed)
        name = _watched(fixed, here)
        if name is None:
            return ""
        mine = _per_iteration(fixed, here).get(name, [])
        same = len(mine) > 1 and all(facts.same_grad(mine[0], g) for g in mine[1:])
        grad = (
            f"`{name}.grad`" if _gives(fixed, here) == "after each backward" else f"the gradient of `{name}`"
        )
        text = (
            f"{label}: {grad} {_gives(fixed, here)} in the loop has norm {_norms(mine)}"
            + (" — the same every iteration" if same else "")
            + f"; at the end {grad} is {_quoted(mine[-1])}"
            + _moves(fixed, name, len(mine))
            + "."
        )
        twin, twin_label = siblings.get(other), other_label
        if twin is None and facts.runs_cleanly(original):  # the run as written trained on the stale graph
            twin, twin_label = original, "As written"
        if twin is not None:
            theirs = _per_iteration(twin, _loop_line(twin)).get(name, [])
            if theirs:
                text += f"\n{twin_label}: norm {_norms(theirs)}; at the end {_quoted(theirs[-1])}{_moves(twin, name, len(theirs))}."
        return text

    return outcome


def _loop_line(trace: dict) -> int | None:
    """The line whose backward ran most often in a fixed run: the loop's (a fix moves lines, so the
    original's line number does not carry over)."""
    lines = [s.get("line") for s in facts.calls(trace) if not s.get("error")]
    return max(dict.fromkeys(lines), key=lines.count, default=None)


def _fresh_graphs(fixed: dict, original: dict, siblings: dict) -> bool:
    """Every backward in the fixed loop went through a graph of its own (a different root node)."""
    line = _loop_line(fixed)
    roots = [_root(s) for s in facts.calls(fixed) if s.get("line") == line and not s.get("error")]
    return len(roots) >= 2 and None not in roots and len(set(roots)) == len(roots)


def _move_fix(src: Source, stale: Stale, roots: set[str]) -> CandidateFix | None:
    found = _forward(src, stale, roots)
    if found is None:
        return None
    forward, movable = found
    edits = _move_edits(src, stale, forward, movable)
    if edits is None:
        return None
    code = src.apply(edits)
    if code is None:
        return None
    lines = _lines(forward)
    verb = "Move" if movable else "Repeat"
    loop_line = stale.loop.lineno
    retain = keyword(stale.call, "retain_graph") is not None
    explanation = (
        f"{verb} the forward pass ({lines}) into the loop, so that every iteration builds `{stale.name}` "
        f"again from the weights as `{src.text(stale.update)}` just left them, and its backward gives the "
        "gradient at those weights: the loop trains as it means to. Each backward frees its own graph"
        + (", so retain_graph=True is gone too" if retain else "")
        + " (checked: every backward in the loop went through a graph of its own)."
        + ("" if movable else f" The lines stay before the loop too: something there reads `{stale.name}`.")
    )
    return CandidateFix(
        "move_forward",
        f"{verb} the forward ({lines}) into the loop at line {loop_line}",
        explanation,
        code,
        _fresh_graphs,
        outcome=_outcome("retain", "Computed in the loop", "With retain_graph=True"),
    )


def _retain_fix(src: Source, stale: Stale) -> CandidateFix | None:
    code = src.apply([set_keyword(src, stale.call, "retain_graph", "True")])
    if code is None:
        return None
    at = stale.defining.lineno if stale.defining is not None else None
    built = f"at line {at}, " if at is not None else ""
    explanation = (
        "Every iteration gets the same gradient: the graph was built from the first iteration's weights. "
        f"retain_graph=True keeps that graph (built {built}before the loop) so the backward at line {stale.line} "
        f"can go through it again, but `{src.text(stale.update)}` changes the weights and the graph does not "
        "follow: each iteration trains on the gradient at the weights before the loop, and the graph's saved "
        "tensors stay held. It runs; it is not the training loop it looks like."
    )
    return CandidateFix(
        "retain",
        f"Keep the first graph: retain_graph=True at line {stale.line} (the same gradient every iteration)",
        explanation,
        code,
        refires=True,
        outcome=_outcome("move_forward", "With retain_graph=True", "Computed in the loop"),
    )


def find(trace: dict, src: Source) -> list[Candidate]:
    for line in call_lines(trace):
        stale = _stale(src, line)
        shown = _shown(trace, stale) if stale is not None else None
        if stale is None or shown is None:
            continue
        built = f"at line {stale.defining.lineno}, " if stale.defining is not None else ""
        what = {
            "freed": "The first backward freed that graph's saved tensors, so the second one fails. retain_graph=True "
            "would at best let every iteration go back through that same graph, ",
            "modified": "retain_graph=True keeps that graph, but it saved weights that the update then changed in "
            "place, so the second backward refuses to use them. Even where it runs, every iteration goes back "
            "through that same graph, ",
            "retained": "retain_graph=True lets every iteration go back through that same graph (the run shows each "
            "backward starting at the same node), ",
        }[shown]
        message = (
            f"`{stale.name}` is computed once, {built}before the loop at line {stale.loop.lineno}, but the loop "
            f"differentiates it (line {line}) in every iteration and `{src.text(stale.update)}` "
            f"(line {stale.update.lineno}) changes the weights in between: the loop trains on a graph built "
            f"before it. {what}built from the weights before the loop: the same gradient each time, however the "
            f"weights change. Compute `{stale.name}` inside the loop."
        )
        severity = "warning" if shown == "retained" else "error"
        fixes = present(
            _move_fix(src, stale, _grad_roots(trace)),
            _retain_fix(src, stale) if shown == "freed" else None,
        )
        return [Candidate(KIND, severity, line, message, fixes)]
    return []
