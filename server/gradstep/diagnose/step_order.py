"""``optimizer.step()`` that never sees a gradient: the parameters never move, and nothing raises.

Two orders do it: ``zero_grad()`` between ``backward()`` and ``step()`` (the gradient is
cleared before it is used), and ``step()`` before ``backward()`` in an iteration that
starts with ``zero_grad()`` (it steps on a cleared gradient). The syntax tree gives the
order; the trace confirms the effect: every iteration's backward computes the very same
gradient, because the parameters it depends on did not change. A loop whose gradients
change is not diagnosed (its data may differ per batch: the trace cannot tell).

Fix: put the statement where it belongs (checked: the gradients now change from one
iteration to the next, and the first one is what it was).
"""

from __future__ import annotations

import ast

from gradstep.diagnose import facts
from gradstep.diagnose.calls import autograd_calls_at
from gradstep.diagnose.candidate import Candidate, CandidateFix
from gradstep.diagnose.source import Source, call_name, moved_line
from gradstep.diagnose.toolkit import call_lines
from gradstep.printing import fmt_number

KIND = "optimizer_step_without_gradient"
# the curated snippets in snippets/ that show this mistake
SNIPPETS = ("zero_grad_before_step",)
_SCOPES = (ast.For, ast.While, ast.AsyncFor, ast.FunctionDef, ast.AsyncFunctionDef)  # what runs again
SHOWN = 5


def _method_stmt(body: list[ast.stmt], method: str) -> list[tuple[int, ast.stmt, str]]:
    """(position, statement, owner) of each ``owner.method()`` statement directly in ``body``."""
    out = []
    for i, stmt in enumerate(body):
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            func = stmt.value.func
            if isinstance(func, ast.Attribute) and func.attr == method and not stmt.value.args:
                out.append((i, stmt, call_name(stmt.value)[: -len(method) - 1]))
    return out


def _never_changes(growth: dict[str, list[dict]]) -> bool:
    """Every call gave the same, non-zero gradient (at least two calls)."""
    runs = [grads for grads in growth.values() if len(grads) >= 2]
    return bool(runs) and all(
        all(facts.same_grad(g, grads[0]) for g in grads[1:]) and (grads[0]["norm"] or 0) > 0 for grads in runs
    )


def _series(grads: list[dict]) -> str:
    shown = [fmt_number(g["norm"] or 0.0) for g in grads[:SHOWN]]
    return " → ".join(shown) + (" → …" if len(grads) > SHOWN else "")


def find(trace: dict, src: Source) -> list[Candidate]:
    for line in call_lines(trace, ran=True):
        calls = autograd_calls_at(src, line)
        if len(calls) != 1:
            continue
        backward_stmt = src.statement_of(calls[0])
        found = src.body_of(backward_stmt) if backward_stmt is not None else None
        if found is None or src.enclosing(backward_stmt, _SCOPES) is None:
            continue
        body, at = found
        steps = _method_stmt(body, "step")
        zeros = _method_stmt(body, "zero_grad")
        growth = facts.grad_growth(trace, line)
        if not steps or not zeros or not _never_changes(growth):
            continue
        step_at, step_stmt, owner = steps[0]
        zero_at, zero_stmt, _ = next((z for z in zeros if z[2] == owner), zeros[0])
        name, grads = next((n, g) for n, g in growth.items() if len(g) >= 2)
        if at < zero_at < step_at:
            return [_between(src, line, zero_stmt, step_stmt, owner, name, grads)]
        if zero_at < step_at < at:
            return [_step_first(src, line, backward_stmt, step_stmt, owner, name, grads)]
    return []


def _intent(src: Source, code: str, line: int, first: dict[str, dict]):
    fixed_line = moved_line(src.code, code, line)

    def intent(fixed: dict, original: dict, siblings: dict) -> bool:
        growth = facts.grad_growth(fixed, fixed_line)
        if not growth or _never_changes(growth):
            return False
        return all(name in growth and facts.same_grad(growth[name][0], g) for name, g in first.items())

    def explain_with(what: str):
        def explain(fixed: dict) -> str:
            growth = facts.grad_growth(fixed, fixed_line)
            name = next(iter(growth), None)
            now = f" ({name}.grad's norm: {_series(growth[name])})" if name else ""
            return (
                f"{what} Now step() uses each iteration's gradient, so the parameters move and the next backward "
                f"computes a new gradient (checked: the gradients change from one iteration to the next{now}, and "
                "the first one is the same as before)."
            )

        return explain

    return intent, explain_with


def _between(
    src: Source, line: int, zero: ast.stmt, step: ast.stmt, owner: str, name: str, grads: list[dict]
) -> Candidate:
    message = (
        f"Line {zero.lineno} clears the gradients after the backward at line {line} and before `{owner}.step()` at "
        f"line {step.lineno} uses them: step() finds no gradient and leaves the parameters as they were. Every "
        f"iteration computes the same gradient again ({name}.grad's norm: {_series(grads)}): the model never "
        "learns, and nothing raises."
    )
    fix = _moved(
        src,
        zero,
        step,
        line,
        name,
        grads,
        "zero_after_step",
        f"Call {src.text(zero)} after {owner}.step()",
        f"`{src.text(zero)}` after the step clears the gradient once it has been used.",
    )
    return Candidate(KIND, "warning", zero.lineno, message, fix)


def _step_first(
    src: Source, line: int, backward: ast.stmt, step: ast.stmt, owner: str, name: str, grads: list[dict]
) -> Candidate:
    message = (
        f"`{owner}.step()` at line {step.lineno} runs before the backward at line {line} computes this iteration's "
        f"gradient, and after zero_grad() cleared the last one: it finds no gradient and leaves the parameters as "
        f"they were. Every iteration computes the same gradient again ({name}.grad's norm: {_series(grads)}): the "
        "model never learns, and nothing raises."
    )
    fix = _moved(
        src,
        step,
        backward,
        line,
        name,
        grads,
        "step_after_backward",
        f"Call {owner}.step() after the backward",
        f"`{owner}.step()` right after the backward updates with the gradient it just computed.",
    )
    return Candidate(KIND, "warning", step.lineno, message, fix)


def _moved(
    src: Source,
    moved: ast.stmt,
    after: ast.stmt,
    line: int,
    name: str,
    grads: list[dict],
    fix_id: str,
    title: str,
    why: str,
) -> list[CandidateFix]:
    """The fix that moves statement ``moved`` to just after ``after`` (none if the edit cannot be made)."""
    code = src.apply([src.delete(moved), src.insert_after(after, src.text(moved))])
    if not code:
        return []
    intent, explain = _intent(src, code, line, _first_grads_of(grads, name))
    return [CandidateFix(fix_id, title, explain(why), code, intent)]


def _first_grads_of(grads: list[dict], name: str) -> dict[str, dict]:
    return {name: grads[0]}
