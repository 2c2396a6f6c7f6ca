"""A recurrent hidden state carried across loop iterations without ``.detach()``.

Each iteration builds its graph on top of the previous one through the carried
tensor (``h = tanh(W @ x + U @ h)``), so a backward in iteration 2 reaches back
into iteration 1's graph: freed there by the previous backward (the run fails),
or, with ``retain_graph=True``, walked again and again (the run slows down and
old iterations keep adding into ``.grad``).
"""

from __future__ import annotations

import ast

from gradstep.diagnose import facts
from gradstep.diagnose.calls import autograd_calls_at
from gradstep.diagnose.candidate import Candidate, CandidateFix
from gradstep.diagnose.source import Source, assigned_names, moved_line, names_in
from gradstep.diagnose.toolkit import calls_failing_with

KIND = "hidden_state_not_detached"
# the curated snippets in snippets/ that show this mistake
SNIPPETS = ("rnn_hidden_not_detached_fails",)
_LOOPS = (ast.For, ast.While, ast.AsyncFor)


def carried_names(src: Source, loop: ast.AST) -> list[str]:
    """Names the loop body assigns from their own previous value (read before, or in, the assignment)."""
    body_nodes = [n for stmt in loop.body for n in ast.walk(stmt)]
    loads = [
        (n.lineno, n.col_offset, n.id)
        for n in body_nodes
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    ]
    carried: list[str] = []
    for stmt in body_nodes:
        if not isinstance(stmt, (ast.Assign, ast.AugAssign)):
            continue
        value_names = names_in(stmt.value)
        for name in sorted(assigned_names(stmt)):
            read_before = any(line < stmt.lineno and n == name for line, _, n in loads)
            if (
                name in value_names or read_before or isinstance(stmt, ast.AugAssign)
            ) and name not in carried:
                carried.append(name)
    return carried


def _tensor_vars(step: dict) -> set[str]:
    """Names the step knows as outputs of graph nodes (tensors with a grad_fn)."""
    out: set[str] = set()
    for st in step.get("nodes") or ():
        out.update(st.get("vars") or ())
    return out


def _loop_of_call(src: Source, line: int | None) -> ast.AST | None:
    found = autograd_calls_at(src, line)
    if len(found) != 1:
        return None
    return src.enclosing(found[0], _LOOPS)


def _within(node: ast.AST, line: int | None) -> bool:
    return line is not None and node.lineno <= line <= node.end_lineno


def carried_through(trace: dict, src: Source, step: dict) -> tuple[ast.AST, list[str]] | None:
    """(loop, carried tensor names) when the failed call ``step`` reached an earlier iteration's graph."""
    failed = facts.failed_node(step)
    loop = _loop_of_call(src, step.get("line"))
    if failed is None or loop is None:
        return None
    freeing = facts.freed_by(trace, failed, step["index"])
    if freeing is None or not _within(loop, freeing.get("line")):
        return None  # released by a call outside the loop: not an earlier iteration's graph
    names = [n for n in carried_names(src, loop) if n in _tensor_vars(step)]
    return (loop, names) if names else None


def _rerun(trace: dict, src: Source) -> tuple[dict, ast.AST, list[str]] | None:
    """A retained backward in a loop that runs again the nodes an earlier iteration's call already ran."""
    nodes = trace.get("nodes") or []
    last_at: dict[int, dict] = {}
    for step in facts.calls(trace):
        line = step.get("line")
        prev = last_at.get(line)
        last_at[line] = step
        if prev is None or step.get("error"):
            continue
        ran = [st for st in step.get("nodes") or () if st.get("executed")]
        roots = [st["id"] for st in ran if st.get("order") == 0]
        if not roots or any(nodes[r]["step"] <= prev["index"] for r in roots):
            continue  # the same output backwarded again: not a graph grown across iterations
        again = [
            st["id"]
            for st in ran
            if nodes[st["id"]]["op"] != "AccumulateGrad" and nodes[st["id"]]["step"] <= prev["index"]
        ]
        loop = _loop_of_call(src, line)
        if not again or loop is None:
            continue
        through = {
            v for st in ran for v in st.get("vars") or ()
        }  # tensors whose graph this call went through
        names = [n for n in carried_names(src, loop) if n in through]
        if names:
            return step, loop, names
    return None


def _detach_fix(
    src: Source, loop: ast.AST, names: list[str], trace: dict, first_call_line: int | None
) -> CandidateFix | None:
    first = loop.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and len(loop.body) > 1:
        first = loop.body[1]  # keep a leading string (a comment-like docstring) first
    indent = src.indent_of(first.lineno)
    statement = ("\n" + indent).join(f"{n} = {n}.detach()" for n in names)
    code = src.apply([src.insert_before(first, statement)])
    if code is None:
        return None
    original_first = _first_call_grads(trace, first_call_line)

    fixed_line = moved_line(src.code, code, first_call_line)

    def intent(fixed: dict, original: dict, siblings: dict) -> bool:
        # iteration 1 never reached back, so detaching must not change its gradients
        return facts.same_grads(_first_call_grads(fixed, fixed_line), original_first)

    listed = ", ".join(f"`{n}`" for n in names)
    return CandidateFix(
        key="detach",
        title=f"Detach {listed} at the start of each iteration",
        explanation=(
            f"`{names[0]} = {names[0]}.detach()` keeps the value of the hidden state but cuts its link to the previous "
            "iteration's graph, so each backward stops at the start of its own iteration (truncated "
            "backpropagation through time). The first iteration's gradients are unchanged (checked); later ones no "
            "longer include the earlier iterations. retain_graph=True would instead make every backward walk the whole "
            "history again, slower each time, and add the old iterations' gradients into .grad once more."
        ),
        code=code,
        intent=intent,
    )


def _first_call_grads(trace: dict, line: int | None) -> dict:
    first = next((s for s in facts.calls(trace) if s.get("line") == line and not s.get("error")), None)
    return facts.grads(first)


def find(trace: dict, src: Source) -> list[Candidate]:
    for step in calls_failing_with(trace, facts.FREED_MARK):
        found = carried_through(trace, src, step)
        if found is None:
            continue
        loop, names = found
        failed = facts.failed_node(step)
        op = trace["nodes"][failed]["op"]
        message = (
            f"`{names[0]}` is carried from one loop iteration to the next with its graph attached, so the backward at "
            f"line {step.get('line')} reaches back into the previous iteration's graph: it stopped at {op}, "
            "whose saved tensors the previous iteration's backward had already released."
        )
        fix = _detach_fix(src, loop, names, trace, step.get("line"))
        return [Candidate(KIND, "error", step.get("line"), message, [fix] if fix else [])]
    rerun = _rerun(trace, src)
    if rerun is not None:
        step, loop, names = rerun
        again = sum(1 for st in step.get("nodes") or () if st.get("executed"))
        message = (
            f"`{names[0]}` is carried from one loop iteration to the next with its graph attached, so each backward "
            f"at line {step.get('line')} walks back through every earlier iteration ({again} nodes at step "
            f"{step['index'] + 1}) and adds their gradients into .grad again. It works only because of "
            "retain_graph=True, and gets slower with every iteration."
        )
        fix = _detach_fix(src, loop, names, trace, step.get("line"))
        return [Candidate(KIND, "warning", step.get("line"), message, [fix] if fix else [])]
    return []
