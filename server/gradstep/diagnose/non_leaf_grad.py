"""Reading ``.grad`` of a non-leaf tensor: it is None, and torch warns.

The trace carries torch's warning with the snippet line that read ``.grad``;
the syntax tree says which tensor and where it was assigned. Fix: call
``retain_grad()`` on it right after it is computed.
"""

from __future__ import annotations

import ast

from gradstep.diagnose import facts
from gradstep.diagnose.candidate import Candidate, CandidateFix
from gradstep.diagnose.source import Source, assigned_names, moved_line

KIND = "grad_of_non_leaf"


def _grad_reads(src: Source, line: int) -> list[ast.Attribute]:
    return sorted(
        (
            n
            for n in src.walk()
            if isinstance(n, ast.Attribute)
            and n.attr == "grad"
            and isinstance(n.ctx, ast.Load)
            and n.lineno <= line <= n.end_lineno
            and isinstance(n.value, ast.Name)
        ),
        key=lambda n: (n.lineno, n.col_offset),
    )


def _assignment_before(src: Source, name: str, line: int) -> ast.stmt | None:
    found = [
        s
        for s in src.walk()
        if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign))
        and s.end_lineno < line
        and name in assigned_names(s)
    ]
    return max(found, key=lambda s: (s.lineno, s.col_offset)) if found else None


def find(trace: dict, src: Source) -> list[Candidate]:
    out = []
    seen: set[str] = set()
    for warning in trace.get("warnings") or ():
        if facts.NON_LEAF_MARK not in warning.get("message", "") or warning.get("line") is None:
            continue
        line = warning["line"]
        reads = _grad_reads(src, line)
        names = [r.value.id for r in reads if r.value.id not in seen]
        if not names:
            continue
        name = names[0]
        seen.add(name)
        message = (
            f"`{name}` is not a leaf (it was computed from other tensors), so backward does not keep its gradient: "
            f"`{name}.grad` at line {line} is None. Only leaves (tensors you created with requires_grad=True) get "
            ".grad, unless you ask for it."
        )
        fixes = []
        stmt = _assignment_before(src, name, line)
        code = src.apply([src.insert_after(stmt, f"{name}.retain_grad()")]) if stmt is not None else None
        if code:
            at = moved_line(src.code, code, line)

            def intent(fixed: dict, original: dict, siblings: dict, name=name, at=at) -> bool:
                warned = any(
                    facts.NON_LEAF_MARK in w.get("message", "") and w.get("line") == at
                    for w in fixed.get("warnings") or ()
                )
                got = any(name in facts.grads(s) for s in fixed.get("steps") or ())
                return got and not warned

            fixes.append(
                CandidateFix(
                    "retain_grad",
                    f"Call {name}.retain_grad() after line {stmt.end_lineno}",
                    f"`{name}.retain_grad()` asks backward to keep this non-leaf's gradient in `{name}.grad` "
                    "(checked: it is filled after the fix). It must run before backward; it changes no other gradient.",
                    code,
                    intent=intent,
                )
            )
        out.append(Candidate(KIND, "warning", line, message, fixes))
    return out
