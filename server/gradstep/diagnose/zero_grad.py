"""``.grad`` growing across loop iterations because nothing resets it.

Fires when the same backward call, inside a loop (or a function called again and
again), adds into a non-zero ``.grad`` (the trace shows the growth), its loop
body also *uses* the gradient (``optimizer.step()`` or an update that reads
``.grad``), and nothing in it resets ``.grad``. A loop that only accumulates
and steps after it (gradient accumulation on purpose) does not fire.
"""

from __future__ import annotations

import ast

from gradstep.diagnose import facts
from gradstep.diagnose.calls import autograd_calls_at
from gradstep.diagnose.candidate import Candidate, CandidateFix
from gradstep.diagnose.source import Source, call_name, moved_line
from gradstep.diagnose.toolkit import call_lines
from gradstep.printing import fmt_number

KIND = "grad_accumulates_without_zero_grad"
# the curated snippets in snippets/ that show this mistake
SNIPPETS = ("training_loop_no_zero_grad",)
_SCOPES = (ast.For, ast.While, ast.AsyncFor, ast.FunctionDef, ast.AsyncFunctionDef)


def _resets_grad(scope: ast.AST) -> bool:
    for node in ast.walk(scope):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("zero_grad", "zero_")
        ):
            if node.func.attr == "zero_grad" or _mentions_grad(node.func.value):
                return True
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Attribute) and t.attr == "grad" for t in targets):
                return True
    return False


def _mentions_grad(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "grad" for n in ast.walk(node))


def _steppers(scope: ast.AST) -> list[str]:
    """What uses the gradient in the scope: ``opt`` of ``opt.step()``, or '' for a manual update via .grad."""
    out: list[str] = []
    for node in ast.walk(scope):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "step":
            if not node.args and not node.keywords:
                out.append(call_name(node)[: -len(".step")])
        elif isinstance(node, ast.AugAssign) and _mentions_grad(node.value):
            out.append("")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr.endswith("_")
        ):
            if any(_mentions_grad(a) for a in node.args):
                out.append("")
    return out


def _growth_text(norms: list[float]) -> str:
    shown = norms[:6]
    more = " → …" if len(norms) > len(shown) else ""
    return " → ".join(fmt_number(n) for n in shown) + more


def find(trace: dict, src: Source) -> list[Candidate]:
    for line in call_lines(trace):
        calls = autograd_calls_at(src, line)
        if len(calls) != 1:
            continue
        # the source first: comparing every .grad before and after each call costs the most
        scope = src.enclosing(calls[0], _SCOPES)
        if scope is None or _resets_grad(scope):
            continue
        users = _steppers(scope)
        if not users:
            continue  # accumulating on purpose: nothing in the loop uses the gradient before it is complete
        grown = facts.accumulations(trace, line)
        if not grown:
            continue
        name, norms = max(grown.items(), key=lambda kv: kv[1][-1] - kv[1][0])
        message = (
            f"The backward at line {line} runs again and again, and every call adds its gradients to what is "
            f"already in .grad: nothing resets it, while line {_use_line(scope)} uses it each time. {name}.grad's "
            f"norm went {_growth_text(norms)} over {len(norms)} calls: each update uses the sum of all gradients so "
            "far instead of the current one."
        )
        fix = _fix(src, scope, users, grown, line, trace)
        return [Candidate(KIND, "warning", line, message, [fix] if fix else [])]
    return []


def _use_line(scope: ast.AST) -> int | None:
    for node in ast.walk(scope):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "step":
            return node.lineno
        if isinstance(node, ast.AugAssign) and _mentions_grad(node.value):
            return node.lineno
    return None


def _fix(
    src: Source, scope: ast.AST, users: list[str], grown: dict, line: int, trace: dict
) -> CandidateFix | None:
    optimizer = next((u for u in users if u), None)
    if optimizer is not None:
        statement = f"{optimizer}.zero_grad()"
        title = f"Call {optimizer}.zero_grad() at the start of each iteration"
    else:
        leaves = [n for n in grown if n.isidentifier()]
        if not leaves:
            return None
        statement = "; ".join(f"{n}.grad = None" for n in leaves)
        title = f"Reset {', '.join(leaves)}.grad at the start of each iteration"
    first = scope.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and len(scope.body) > 1:
        first = scope.body[1]  # after a function's docstring
    code = src.apply([src.insert_before(first, statement)])
    if code is None:
        return None
    first_grads = facts.grads(
        next(s for s in facts.calls(trace) if s.get("line") == line and not s.get("error"))
    )

    fixed_line = moved_line(src.code, code, line)

    def intent(fixed: dict, original: dict, siblings: dict) -> bool:
        # every call now starts from an empty .grad, and the first one computes what it computed before
        runs = [s for s in facts.calls(fixed) if s.get("line") == fixed_line]
        if not runs or facts.accumulations(fixed, fixed_line):
            return False
        return facts.same_grads(facts.grads(runs[0]), first_grads)

    return CandidateFix(
        "zero_grad",
        title,
        f"`{statement}` clears the gradients before each backward, so each update uses only the current "
        "iteration's gradient (checked: no call adds to an old .grad any more, and the first call gives the same "
        "gradients as before). To accumulate over several batches on purpose, reset only every N iterations.",
        code,
        intent=intent,
    )
