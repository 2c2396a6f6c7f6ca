"""``retain_graph=True`` kept in a loop that never goes back through the retained graph.

The trace shows it: the same call ran in every iteration with retain_graph=True, held
saved tensors after each run, and no later call ran again any node with saved tensors
that one of these calls ran (each iteration builds, and backwards, a graph of its own).
retain_graph only costs memory then. A loop that does go back through a graph again (the
same output backwarded repeatedly, two losses on a shared trunk) needs it: silent.

Fix: drop ``retain_graph=True`` (checked: every call gives the gradients it gave before,
and nothing stays held after it; the explanation quotes the bytes before and after).
"""

from __future__ import annotations

from gradstep.diagnose import facts
from gradstep.diagnose.calls import drop_keyword, the_call_at
from gradstep.diagnose.candidate import Candidate, CandidateFix
from gradstep.diagnose.source import Source, keyword, moved_line
from gradstep.printing import fmt_bytes

KIND = "needless_retain_graph"
# the curated snippets in snippets/ that show this mistake
SNIPPETS = ("retain_graph_in_loop_not_needed",)
SHOWN = 5


def _ran(step: dict) -> set[int]:
    return {st["id"] for st in step.get("nodes") or () if st.get("executed")}


def _with_saved_tensors(trace: dict) -> set[int]:
    return {
        n["id"]
        for n in trace.get("nodes") or ()
        if any(s["kind"] in ("tensor", "tensors") for s in n.get("saved") or ())
    }


def _needed(trace: dict) -> set[int]:
    """Lines of calls that ran a node with saved tensors that a later call ran again (so they kept it for it)."""
    saving = _with_saved_tensors(trace)
    later: set[int] = set()
    needed: set[int] = set()
    for step in reversed(facts.calls(trace)):  # one pass from the end: what the calls after each one ran
        ran = _ran(step) & saving
        if ran & later:
            needed.add(step.get("line"))
        later |= ran
    return needed


def _series(values: list[int]) -> str:
    shown = [fmt_bytes(v) for v in values[:SHOWN]]
    return " → ".join(shown) + (" → …" if len(values) > SHOWN else "")


def find(trace: dict, src: Source) -> list[Candidate]:
    by_line: dict[int, list[dict]] = {}
    for step in facts.calls(trace):
        if step.get("retain_graph") and not step.get("create_graph") and step.get("line") is not None:
            by_line.setdefault(step["line"], []).append(step)
    needed: set[int] | None = None
    for line, steps in by_line.items():
        if len(steps) < 2 or any(s.get("error") for s in steps):
            continue
        held = [s.get("saved_bytes") or 0 for s in steps]
        if not any(held):
            continue
        if needed is None:
            needed = _needed(trace)
        if line in needed:
            continue
        call = the_call_at(src, line)
        if call is None or keyword(call, "retain_graph") is None:
            continue
        message = (
            f"The call at line {line} keeps its graph with retain_graph=True in every iteration "
            f"({len(steps)} times here), but no later backward goes through a graph it kept: each iteration builds "
            f"a new one. The kept saved tensors only cost memory — {_series(held)} held after each call, until the "
            "next iteration lets go of the graph. retain_graph is for going back through the same graph again."
        )
        fixes = []
        code = src.apply([drop_keyword(src, call, "retain_graph")])
        if code:
            fixes.append(_fix(src, code, line, steps, held))
        return [Candidate(KIND, "warning", line, message, fixes)]
    return []


def _fix(src: Source, code: str, line: int, steps: list[dict], held: list[int]) -> CandidateFix:
    fixed_line = moved_line(src.code, code, line)
    before = [facts.grads(s) for s in steps]

    def runs(fixed: dict) -> list[dict]:
        return [s for s in facts.calls(fixed) if s.get("line") == fixed_line]

    def intent(fixed: dict, original: dict, siblings: dict) -> bool:
        now = runs(fixed)
        return (
            len(now) == len(before)
            and all(facts.same_grads(facts.grads(s), b) for s, b in zip(now, before, strict=True))
            and all(not s.get("retain_graph") for s in now)
        )

    def explain(fixed: dict) -> str:
        now = [s.get("saved_bytes") or 0 for s in runs(fixed)]
        return (
            "Without retain_graph=True each backward frees its graph's saved tensors as it goes (checked: every call "
            f"gives the same gradients as before; held after each call: {_series(now)}, where it was {_series(held)})."
        )

    return CandidateFix("no_retain", "Drop retain_graph=True", explain, code, intent)
