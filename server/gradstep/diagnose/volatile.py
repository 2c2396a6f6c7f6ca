"""``Variable(x, volatile=True)``: inference without a graph, the way PyTorch did it before 0.4 (2018).

``volatile`` does nothing now, and torch warns "volatile was removed and now has no effect": the
lines after it build a graph again. Fix: run them under ``torch.no_grad()`` (checked: the fixed
run builds fewer nodes); or drop the keyword where a graph is wanted after all.
"""

from __future__ import annotations

import ast

from gradstep.diagnose import modernize
from gradstep.diagnose.candidate import Candidate, fix_of, present
from gradstep.diagnose.source import Edit, Source

KIND = "volatile_removed"
MARK = "volatile was removed and now has no effect"
MAX_CANDIDATES = 4


def _no_grad_after(src: Source, stmt: ast.stmt) -> Edit | None:
    """The statements after ``stmt`` in its block, indented under ``with torch.no_grad():``."""
    found = src.body_of(stmt)
    if found is None or not modernize.imports_torch(src):
        return None
    body, at = found
    rest = body[at + 1 :]
    if not rest or not all(src.owns_its_lines(s) for s in rest):
        return None
    first, last = rest[0].lineno, rest[-1].end_lineno
    lines = "".join(src.lines[first - 1 : last])
    wrapped = "".join(f"    {ln}" if ln.strip() else ln for ln in lines.splitlines(keepends=True))
    return Edit(
        first, 0, last, len(src.lines[last - 1]), f"{src.indent_of(first)}with torch.no_grad():\n{wrapped}"
    )


def _builds_less(fixed: dict, trace: dict, _passed: dict) -> bool:
    return len(fixed.get("nodes") or ()) < len(trace.get("nodes") or ())


def find(trace: dict, src: Source) -> list[Candidate]:
    warned = {w.get("line") for w in trace.get("warnings") or () if MARK in str(w["message"])}
    out = []
    for line in sorted(n for n in warned if isinstance(n, int))[:MAX_CANDIDATES]:
        found = modernize.volatile_calls(src, line)
        if not found:
            continue
        call, kw = found[0]
        drop = modernize.without_volatile(src, call, kw)
        stmt = src.statement_of(call)
        wrap = _no_grad_after(src, stmt) if stmt is not None else None
        fixes = present(
            fix_of(
                src,
                [drop, wrap],
                "no_grad",
                "Run the lines after it under torch.no_grad()",
                "Inference without a graph, as volatile=True meant (checked: the fixed snippet runs and builds "
                "fewer nodes).",
                intent=_builds_less,
            ),
            fix_of(
                src,
                [drop],
                "drop",
                "Drop volatile=True",
                "It has no effect: the snippet runs the same without it, graph and all (checked).",
            ),
        )
        message = (
            "volatile=True ran what followed without a graph before PyTorch 0.4 (2018). It does nothing now: the "
            "lines after it build a graph and keep its saved tensors. torch.no_grad() is what it became."
        )
        out.append(Candidate(KIND, "warning", line, message, fixes))
    return out
