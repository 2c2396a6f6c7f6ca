"""Gradients that are nan or inf: where the non-finite value first appeared, and a safe formulation.

The trace says which ``.grad`` holds nan/inf after a call, and (``Step.nonfinite``) which
nodes turned a finite incoming gradient into a non-finite one, in the order they ran.
The first of them that is a singular op (sqrt, log, division, a fractional power,
rsqrt, reciprocal) names the line; its derivative is infinite where its input is 0
(sqrt, log, power) or its denominator is (division). Fixes at that expression: add a
small epsilon, or clamp the input away from 0 — each checked to give finite gradients.
"""

from __future__ import annotations

import ast

from gradstep.diagnose import facts
from gradstep.diagnose.candidate import Candidate, CandidateFix, fix_of, present
from gradstep.diagnose.source import Source, call_name, torch_alias
from gradstep.printing import fmt_value, mode_of

KIND = "nonfinite_grad"
# the curated snippets in snippets/ that show this mistake
SNIPPETS = ("sqrt_at_zero_nan_grad",)
EPS = "1e-8"
SHOWN = 3

# op -> (what the snippet calls, why its gradient is not finite)
_SINGULAR = {
    "SqrtBackward0": ("sqrt", "the derivative of sqrt(u) is 1 / (2·sqrt(u)), infinite at u = 0"),
    "RsqrtBackward0": ("rsqrt", "the derivative of 1/sqrt(u) is infinite at u = 0"),
    "LogBackward0": ("log", "the derivative of log(u) is 1/u, infinite at u = 0 (and log(0) is -inf)"),
    "Log2Backward0": ("log2", "the derivative of log2(u) is infinite at u = 0"),
    "Log10Backward0": ("log10", "the derivative of log10(u) is infinite at u = 0"),
    "ReciprocalBackward0": ("reciprocal", "the derivative of 1/u is -1/u², infinite at u = 0"),
    "DivBackward0": (
        "/",
        "the derivative of a / b is infinite where b = 0 (a zero difference, an empty sum)",
    ),
    "PowBackward0": ("**", "the derivative of u ** p (p < 1) is p·u^(p-1), infinite at u = 0"),
}


def _non_finite(grad: dict) -> bool:
    if grad["norm"] is not None:
        return False  # a finite norm: every value is finite (a nan or inf in them makes it null)
    values = facts.grad_values(grad)
    if values is not None:
        return any(isinstance(v, str) for v in values)
    return grad["norm"] is None and grad["dtype"].startswith(("torch.float", "torch.complex"))


def _operand(src: Source, node: ast.AST, fn: str) -> tuple[ast.expr, bool] | None:
    """The expression whose value makes ``node`` singular, and whether it stands as a call argument."""
    if fn == "/" and isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return node.right, False
    if fn == "**" and isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        return node.left, False
    if isinstance(node, ast.Call) and call_name(node).rsplit(".", 1)[-1] == fn:
        if isinstance(node.func, ast.Attribute) and not _is_module_call(node) and not node.args:
            return node.func.value, False  # u.sqrt()
        if node.args:
            return node.args[0], True  # torch.sqrt(u)
    return None


def _is_module_call(call: ast.Call) -> bool:
    return call_name(call).split(".", 1)[0] in ("torch", "math", "np", "F")


def _site(src: Source, op: str, line: int | None) -> tuple[ast.AST, ast.expr, bool] | None:
    if op not in _SINGULAR or line is None:
        return None
    fn = _SINGULAR[op][0]
    for node in src.walk():
        if getattr(node, "lineno", None) is None or not node.lineno <= line <= node.end_lineno:
            continue
        found = _operand(src, node, fn)
        if found is not None:
            return node, *found
    return None


def find(trace: dict, src: Source) -> list[Candidate]:
    for step in facts.calls(trace):
        if step.get("error"):
            continue
        bad = [name for name, grad in facts.grads(step).items() if _non_finite(grad)]
        produced = step.get("nonfinite") or []
        if not bad:
            continue
        nodes = trace.get("nodes") or []
        chain = [nodes[i] for i in produced if 0 <= i < len(nodes)]
        singular = next((n for n in chain if n["op"] in _SINGULAR), None)
        site = _site(src, singular["op"], singular.get("line")) if singular is not None else None
        line = (
            singular.get("line")
            if singular is not None
            else (chain[0].get("line") if chain else step["line"])
        )
        return [_candidate(src, step, bad, chain, singular, site, line)]
    return []


def _values(grad: dict) -> str:
    values = facts.grad_values(grad)
    if values is None:
        return "not finite"
    mode = mode_of([v for v in values if not isinstance(v, str)] or [0.0])
    return "[" + ", ".join(v if isinstance(v, str) else fmt_value(v, mode) for v in values[:6]) + "]"


def _candidate(
    src: Source,
    step: dict,
    bad: list[str],
    chain: list[dict],
    singular: dict | None,
    site: tuple[ast.AST, ast.expr, bool] | None,
    line: int | None,
) -> Candidate:
    grads = facts.grads(step)
    name = bad[0]
    first = (
        " → ".join(f"{n['op']} (line {n.get('line')})" for n in chain[:SHOWN])
        + (" → …" if len(chain) > SHOWN else "")
        if chain
        else ""
    )
    where = (
        f" The first node whose gradient went non-finite, while the gradient it received was finite: {first}."
        if chain
        else ""
    )
    why = ""
    if singular is not None:
        expr = f" (`{src.text(site[0])}`)" if site is not None else ""
        why = (
            f" {singular['op']} comes from line {singular.get('line')}{expr}: {_SINGULAR[singular['op']][1]}."
        )
    message = (
        f"After the backward at line {step.get('line')}, {name}.grad is {_values(grads[name])}: a nan or inf "
        f"gradient, and nothing raised.{where}{why} One non-finite value spreads to every gradient computed from "
        "it, and an optimizer step would turn the parameter into nan."
    )
    fixes = _fixes(src, site, bad, line) if site is not None else []
    return Candidate(KIND, "warning", line, message, fixes)


def _fixes(
    src: Source, site: tuple[ast.AST, ast.expr, bool], bad: list[str], line: int | None
) -> list[CandidateFix]:
    _, operand, is_argument = site
    text = src.text(operand)
    torch_name = torch_alias(src)
    plus = f"{text} + {EPS}" if is_argument else f"({text} + {EPS})"

    def intent(fixed: dict, original: dict, siblings: dict) -> bool:
        final = facts.final_grads(fixed)
        if any(s.get("nonfinite") for s in facts.calls(fixed)):
            return False
        return all(n in final and not _non_finite(final[n]) for n in bad)

    def explain(kind: str):
        def text_of(fixed: dict) -> str:
            final = facts.final_grads(fixed)
            now = ", ".join(f"{n}.grad = {_values(final[n])}" for n in bad if n in final)
            return (
                f"{kind} keeps the value away from the singular point, so the derivative stays finite; it changes the "
                f"result by a negligible amount elsewhere (checked: {now}, all finite)."
            )

        return text_of

    epsilon = fix_of(
        src,
        [src.replace(operand, plus)],
        "epsilon",
        f"Add a small epsilon: {plus}",
        explain(f"`+ {EPS}`"),
        intent,
    )
    clamp = None
    denominator = isinstance(site[0], ast.BinOp) and isinstance(site[0].op, ast.Div)
    if torch_name is not None and not denominator:  # a negative denominator clamped to +eps: a new result
        clamped = f"{torch_name}.clamp({text}, min={EPS})"
        clamp = fix_of(
            src,
            [src.replace(operand, clamped)],
            "clamp",
            f"Clamp it: {clamped}",
            explain(f"`{torch_name}.clamp(…, min={EPS})`"),
            intent,
        )
    return present(epsilon, clamp)
