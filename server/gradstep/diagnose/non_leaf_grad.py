"""Reading ``.grad`` of a non-leaf tensor: it is None, and torch warns.

The trace carries torch's warning with the snippet line that read ``.grad``;
the syntax tree says which tensor and where it was assigned. Fix: call
``retain_grad()`` on it right after it is computed.

Also ``retain_grad()`` called too late: after a backward already ran through the tensor's
grad_fn, and with no backward after it, so ``.grad`` stays None (torch says nothing: the tensor
does retain). Fix: the same call, moved to right after the tensor is computed.
"""

from __future__ import annotations

import ast
import bisect

from gradstep.diagnose import facts
from gradstep.diagnose.candidate import Candidate, CandidateFix, fix_of, present
from gradstep.diagnose.source import Source, assigned_names, moved_line
from gradstep.schema import CALL_KINDS

KIND = "grad_of_non_leaf"
MAX_CANDIDATES = 16  # one diagnosis per tensor read; past this many, more say nothing new


class _Index:
    """Every ``.grad`` read of a plain name (by line) and every assignment (by name): one walk of the tree.

    Found once per trace, so each warning costs a lookup, not a walk (a snippet that writes or forges
    thousands of warnings made this rule walk the tree once per warning).
    """

    def __init__(self, src: Source):
        self.reads: dict[int, list[ast.Attribute]] = {}
        self.assignments: dict[str, list[ast.stmt]] = {}
        for n in src.walk():
            if (
                isinstance(n, ast.Attribute)
                and n.attr == "grad"
                and isinstance(n.ctx, ast.Load)
                and isinstance(n.value, ast.Name)
            ):
                # `name.grad` spans only the name, brackets and blanks: spans of two reads never overlap
                for line in range(n.lineno, n.end_lineno + 1):
                    self.reads.setdefault(line, []).append(n)
            elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for name in assigned_names(n):
                    self.assignments.setdefault(name, []).append(n)
        for reads in self.reads.values():
            reads.sort(key=lambda n: (n.lineno, n.col_offset))
        for stmts in self.assignments.values():
            stmts.sort(key=lambda s: (s.lineno, s.col_offset))
        self._ends = {name: [s.end_lineno for s in stmts] for name, stmts in self.assignments.items()}

    def assignment_before(self, name: str, line: int) -> ast.stmt | None:
        """The last assignment to ``name`` that ends before ``line`` (assignments never overlap)."""
        before = bisect.bisect_left(self._ends.get(name, []), line)
        return self.assignments[name][before - 1] if before else None


def find(trace: dict, src: Source) -> list[Candidate]:
    return (_read(trace, src) + _late(trace, src))[:MAX_CANDIDATES]


def _read(trace: dict, src: Source) -> list[Candidate]:
    """``.grad`` read of a non-leaf that does not retain it: torch's warning names the line."""
    out: list[Candidate] = []
    seen: set[str] = set()
    lines: set[int] = set()
    index: _Index | None = None
    for warning in trace.get("warnings") or ():
        line = warning.get("line")
        if line in lines or line is None or facts.NON_LEAF_MARK not in warning["message"]:
            continue
        lines.add(line)
        index = index or _Index(src)
        names = [r.value.id for r in index.reads.get(line, ()) if r.value.id not in seen]
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
        stmt = index.assignment_before(name, line)
        code = src.apply([src.insert_after(stmt, f"{name}.retain_grad()")]) if stmt is not None else None
        if code:
            at = moved_line(src.code, code, line)

            def intent(fixed: dict, original: dict, siblings: dict, name=name, at=at) -> bool:
                warned = any(
                    facts.NON_LEAF_MARK in w["message"] and w.get("line") == at
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
        if len(out) >= MAX_CANDIDATES:
            break
    return out


def _retain_call(src: Source, name: str, line: int) -> ast.stmt | None:
    """The statement ``name.retain_grad()`` on ``line``."""
    for n in src.walk():
        if (
            isinstance(n, ast.Expr)
            and n.lineno == line
            and isinstance(n.value, ast.Call)
            and isinstance(n.value.func, ast.Attribute)
            and n.value.func.attr == "retain_grad"
            and isinstance(n.value.func.value, ast.Name)
            and n.value.func.value.id == name
        ):
            return n
    return None


def _late(trace: dict, src: Source) -> list[Candidate]:
    """``retain_grad()`` after the only backward that reached the tensor: its .grad stays None."""
    steps = trace.get("steps") or []
    final = {te["name"]: te for te in steps[-1].get("tensors") or ()} if steps else {}
    ran_at: dict[int, dict] = {}  # node id -> the first call step that ran it
    retaining: set[str] = set()
    out: list[Candidate] = []
    index: _Index | None = None
    for step in steps:
        if step["kind"] in CALL_KINDS:
            for st in step.get("nodes") or ():
                if st.get("executed"):
                    ran_at.setdefault(st["id"], step)
            continue
        for te in step.get("tensors") or ():
            name, node, line = te["name"], te.get("node"), step.get("line")
            if not te.get("retains_grad") or te["is_leaf"] or name in retaining:
                continue
            retaining.add(name)
            call = ran_at.get(node) if node is not None else None
            last = final.get(name)
            if call is None or line is None or last is None or last.get("grad") is not None:
                continue
            stmt = _retain_call(src, name, line)
            index = index or _Index(src)
            origin = index.assignment_before(name, call["line"]) if call.get("line") else None
            if stmt is None or origin is None:
                continue
            message = (
                f"`{name}.retain_grad()` at line {line} comes after the backward at line {call['line']}, which "
                f"already ran through {name}'s grad_fn without keeping its gradient; no backward runs after it, so "
                f"`{name}.grad` stays None. retain_grad() only affects backward calls that run after it."
            )

            def intent(fixed: dict, original: dict, siblings: dict, name=name) -> bool:
                return any(name in facts.grads(s) for s in fixed.get("steps") or ())

            fixes = present(
                fix_of(
                    src,
                    [src.delete(stmt), src.insert_after(origin, f"{name}.retain_grad()")],
                    "retain_grad_first",
                    f"Call {name}.retain_grad() right after line {origin.end_lineno}, before the backward",
                    f"Moved before the backward at line {call['line']}, `{name}.retain_grad()` makes that backward "
                    f"keep {name}'s gradient in `{name}.grad` (checked: it is filled after the fix). It changes no "
                    "other gradient.",
                    intent=intent,
                )
            )
            out.append(Candidate(KIND, "warning", line, message, fixes))
            if len(out) >= MAX_CANDIDATES:
                return out
    return out
