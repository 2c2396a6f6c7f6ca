"""A running total that keeps every iteration's graph alive: ``total += loss`` instead of ``loss.item()``.

``loss`` is a tensor with a graph; adding it to a total makes the total's graph
link to it, so no iteration's graph is ever let go. The trace shows it: the total
has a grad_fn, and the graph nodes alive (and, without a backward in the loop,
the saved bytes) climb iteration after iteration at the same point of the loop.
A total that is differentiated later (losses summed on purpose for one backward)
or that adds a tensor computed outside the loop is not this mistake.

Fix: ``total += loss.item()`` (checked: the nodes alive stay flat from the
second iteration on; the explanation quotes both runs).
"""

from __future__ import annotations

import ast

from gradstep.diagnose import facts
from gradstep.diagnose.calls import output_of, the_call_at
from gradstep.diagnose.candidate import Candidate, fix_of, present
from gradstep.diagnose.graph_cut import _cut_of
from gradstep.diagnose.source import Source, assigned_names, names_in
from gradstep.printing import fmt_bytes

KIND = "running_total_keeps_graph"
# the curated snippets in snippets/ that show this mistake
SNIPPETS = ("running_loss_keeps_graphs",)
_LOOPS = (ast.For, ast.While, ast.AsyncFor)
MIN_ITERATIONS = 3
MAX_CHECKED = 4
SHOWN = 5


def _accumulation(stmt: ast.AST) -> tuple[str, ast.expr] | None:
    """(total, added) for ``total += added`` and ``total = total + added``."""
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add) and isinstance(stmt.target, ast.Name):
        return stmt.target.id, stmt.value
    if (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and isinstance(stmt.value, ast.BinOp)
        and isinstance(stmt.value.op, ast.Add)
        and isinstance(stmt.value.left, ast.Name)
        and stmt.value.left.id == stmt.targets[0].id
    ):
        return stmt.targets[0].id, stmt.value.right
    return None


def _samples(trace: dict, line: int) -> list[tuple[int, int]]:
    """(nodes alive, saved bytes) at each step of ``line``: one per iteration of a loop body."""
    out = []
    for step in trace.get("steps") or ():
        if step.get("line") == line and step["kind"] == "forward":
            alive = sum(1 for st in step.get("nodes") or () if not st.get("dropped"))
            out.append((alive, step.get("saved_bytes") or 0))
    return out


def _climbs(values: list[int]) -> bool:
    return len(values) >= MIN_ITERATIONS and all(b > a for a, b in zip(values, values[1:], strict=False))


def _sample_line(trace: dict, loop: ast.AST) -> int | None:
    """The first line of the loop body (in source order) that built nodes: where each iteration is measured."""
    lines = {s.get("line") for s in trace.get("steps") or () if s["kind"] == "forward"}
    inside = sorted(
        n.lineno for n in ast.walk(loop) if isinstance(n, ast.stmt) and n is not loop and n.lineno in lines
    )
    return inside[0] if inside else None


def _differentiated(src: Source, trace: dict) -> set[str]:
    out: set[str] = set()
    for step in facts.calls(trace):
        call = the_call_at(src, step.get("line"))
        target = output_of(call) if call is not None else None
        if target is not None:
            out |= names_in(target)
    return out


def _holds_graph(trace: dict, name: str) -> bool:
    steps = trace.get("steps") or []
    return bool(steps) and any(name in (st.get("vars") or ()) for st in steps[-1].get("nodes") or ())


def find(trace: dict, src: Source) -> list[Candidate]:
    differentiated: set[str] | None = None
    steps = trace.get("steps") or []
    holding = {v for st in (steps[-1].get("nodes") or () if steps else ()) for v in st.get("vars") or ()}
    checked = 0
    for stmt in src.walk():
        found = _accumulation(stmt)
        if found is None or found[0] not in holding:
            continue  # not a total, or a total that holds no graph at the end of the run
        total, added = found
        loop = src.enclosing(stmt, _LOOPS)
        if loop is None or any(_cut_of(n) for n in ast.walk(added)):
            continue
        checked += 1
        if checked > MAX_CHECKED:
            break  # each check reads the trace once: a bound for a snippet of many totals
        made_in_loop = {n for s in ast.walk(loop) if isinstance(s, ast.stmt) for n in assigned_names(s)}
        if not (names_in(added) & made_in_loop):
            continue  # adds a tensor made once, outside the loop: one graph, not one per iteration
        if differentiated is None:
            differentiated = _differentiated(src, trace)
        if total in differentiated:
            continue  # summed on purpose, for one backward
        line = _sample_line(trace, loop)
        samples = _samples(trace, line) if line is not None else []
        if not _climbs([a for a, _ in samples]):
            continue
        return [_candidate(src, stmt, total, added, line, samples)]
    return []


def _series(values: list[str]) -> str:
    return " → ".join(values[:SHOWN]) + (" → …" if len(values) > SHOWN else "")


def _candidate(
    src: Source, stmt: ast.stmt, total: str, added: ast.expr, line: int, samples: list[tuple[int, int]]
) -> Candidate:
    text = src.text(added)
    nodes = _series([str(a) for a, _ in samples])
    saved = [b for _, b in samples]
    held = (
        f", and the saved tensors they hold {_series([fmt_bytes(b) for b in saved])}"
        if _climbs(saved)
        else ""
    )
    message = (
        f"Line {stmt.lineno} adds `{text}`, a tensor with a graph, to `{total}`: `{total}` becomes a tensor whose "
        "graph links every iteration's graph, so none of them is ever freed. Each time line "
        f"{line} runs, the graph nodes alive grow: {nodes}{held}. In a long loop this is a memory leak. "
        f"To keep a number, add `{text}.item()`."
    )
    simple = isinstance(added, ast.Name | ast.Attribute | ast.Call | ast.Subscript)

    def intent(fixed: dict, original: dict, siblings: dict) -> bool:
        alive = [a for a, _ in _samples(fixed, line)]
        return len(alive) >= 2 and max(alive[1:]) <= alive[1] and not _holds_graph(fixed, total)

    def explain(fixed: dict) -> str:
        fixed_samples = _samples(fixed, line)
        shown = _series([str(a) for a, _ in fixed_samples])
        bytes_now = f"; saved tensors {_series([fmt_bytes(b) for _, b in fixed_samples])}" if held else ""
        return (
            f"`{text}.item()` is a Python number: `{total}` adds up the values and holds no graph, so each "
            f"iteration's graph is freed when the next one replaces it (checked: graph nodes alive at line "
            f"{line}: {shown}{bytes_now}, where the original run had {nodes}{held})."
        )

    edit = src.replace(added, f"{text}.item()" if simple else f"({text}).item()")
    fix = fix_of(src, [edit], "item", f"Add the number: {text}.item() to {total}", explain, intent)
    return Candidate(KIND, "warning", stmt.lineno, message, present(fix))
