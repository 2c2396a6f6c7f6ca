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
from gradstep.diagnose.source import Source, assigned_names, moved_line, torch_alias
from gradstep.schema import CALL_KINDS

KIND = "grad_of_non_leaf"
# the curated snippets in snippets/ that show this mistake
SNIPPETS = ("retain_grad_after_backward",)
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
    rebound_said = False
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
        rebinding = _rebinding_update(index, name)
        if rebinding is not None:
            if rebound_said:
                continue  # one diagnosis (and one fix) for all of a loop's hand-written updates
            rebound_said = True
            message = (
                f"`{name}` names a non-leaf from line {rebinding.lineno} on: `{src.text(rebinding)}` makes a new "
                f"tensor computed from the old `{name}` (a graph node, not a leaf), so `{name}.grad` at line {line} "
                f"is None, and the next backward accumulates into the old leaf's .grad, not into `{name}`'s."
            )
            fixes.extend(present(_in_place_updates(src, index)))
        stmt = index.assignment_before(name, line)
        code = src.apply([src.insert_after(stmt, f"{name}.retain_grad()")]) if stmt is not None else None
        if code and rebinding is None:  # retain_grad cannot help a name whose leaf an update replaced
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


_IN_PLACE = {ast.Sub: "-=", ast.Add: "+="}


def _rebinding_update(index: _Index, name: str) -> ast.Assign | None:
    """``w = w - lr * w.grad`` (or ``+``): a hand-written gradient step that rebinds the name to a
    non-leaf, where an in-place update under no_grad was meant."""
    for stmt in index.assignments.get(name, ()):
        value = stmt.value if isinstance(stmt, ast.Assign) else None
        if (
            isinstance(value, ast.BinOp)
            and type(value.op) in _IN_PLACE
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and isinstance(value.left, ast.Name)
            and value.left.id == name
            and any(
                isinstance(n, ast.Attribute)
                and n.attr == "grad"
                and isinstance(n.value, ast.Name)
                and n.value.id == name
                for n in ast.walk(value.right)
            )
        ):
            return stmt
    return None


def _in_place_updates(src: Source, index: _Index) -> CandidateFix | None:
    """Every hand-written update that rebinds its name, made in place under no_grad (and the
    gradient cleared after it, as zero_grad() would): fixing one of a loop's updates leaves the next
    one failing."""
    torch_name = torch_alias(src)
    updates = [(name, u) for name in index.assignments if (u := _rebinding_update(index, name)) is not None]
    if torch_name is None or not all(src.owns_its_lines(u) for _, u in updates):
        return None
    edits = []
    for name, stmt in updates:
        value = stmt.value
        assert isinstance(value, ast.BinOp)
        inner = src.indent_of(stmt.lineno) + "    "
        edits.append(
            src.replace(
                stmt,
                f"with {torch_name}.no_grad():\n"
                f"{inner}{name} {_IN_PLACE[type(value.op)]} {src.text(value.right)}\n"
                f"{inner}{name}.grad.zero_()",
            )
        )
    names = [name for name, _ in updates]

    def intent(fixed: dict, original: dict, siblings: dict) -> bool:
        # one leaf all along: wherever the fixed run lists the names, they are leaves that require grad
        shown = [
            t for step in fixed.get("steps") or () for t in step.get("tensors") or () if t["name"] in names
        ]
        return bool(shown) and all(t["is_leaf"] and t["requires_grad"] for t in shown)

    listed = " and ".join(", ".join(names).rsplit(", ", 1))
    lines = " and ".join(", ".join(str(u.lineno) for _, u in updates).rsplit(", ", 1))
    one = len(names) == 1
    return fix_of(
        src,
        edits,
        "in_place_update",
        f"Update {listed} in place under {torch_name}.no_grad() (line{'' if one else 's'} {lines})",
        f"An update in place under `{torch_name}.no_grad()` changes the values without recording a graph node, "
        f"so {listed} stay{'s' if one else ''} the same leaf{'' if one else 'ves'} and every backward writes "
        f"{'its' if one else 'their'} `.grad` (checked: the fixed run shows {listed} as {'a leaf' if one else 'leaves'} at every step). "
        "`.grad.zero_()` after the update clears the gradient, so each iteration sees its own gradient instead of "
        "the sum of all so far, as the original did in its first iteration. This is what an optimizer's step() "
        "and zero_grad() do.",
        intent=intent,
    )


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
