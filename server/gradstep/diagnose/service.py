"""Whether a run needs the rules at all: one look over its trace, in the sandboxed child.

Most runs have nothing to diagnose, and they must not pay for it: a pass over the trace for what
every rule needs (an error, torch's non-leaf or volatile warning, a gradient that went nan or inf,
a write through ``.data`` in the code, a call line that ran twice, a leaf that requires grad still
without .grad after a call, a loop with no call that builds a graph each time) skips the rest.
gradstep.jobs runs it, and the rules, in the child that ran the snippet (under that run's limits),
never in the server. It reads the trace's fields, never its bytes: no rule depends on key order.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from gradstep.diagnose import facts, volatile
from gradstep.schema import CALL_KINDS

_WARNING_MARKS = (facts.NON_LEAF_MARK, volatile.MARK)
# a write through .data in the code (w.data -= …, w.data = …, w.grad.data.zero_()): the rule has no other sign
_DATA_WRITE = re.compile(r"\.data\s*(?:[-+*/@]?=(?!=)|\.[a-z]\w*_\()")
_CALLS = CALL_KINDS


def _warnings(trace: dict) -> Iterator[str]:
    for holder in (trace, *(trace.get("steps") or [])):
        for w in holder.get("warnings") or []:
            yield w if isinstance(w, str) else str(w.get("message", ""))


def _repeats(lines: list) -> bool:
    return len(set(lines)) < len(lines)


def may_need_diagnosis(trace: dict) -> bool:
    steps = trace.get("steps") or []
    if trace.get("error") or any(step.get("nonfinite") for step in steps):
        return True
    if any(mark in w for w in _warnings(trace) for mark in _WARNING_MARKS):
        return True
    if _DATA_WRITE.search(trace.get("code") or ""):
        return True
    calls = [i for i, step in enumerate(steps) if step["kind"] in _CALLS]
    if not calls:  # a loop that only builds graphs (an evaluation loop keeping them all alive)
        return _repeats([step.get("line") for step in steps if step["kind"] == "forward"])
    if _repeats([steps[i].get("line") for i in calls]):  # a backward in a loop
        return True
    return any(  # from the first call on, a leaf that requires grad (or a retained non-leaf) and no .grad
        (t["is_leaf"] and t["requires_grad"] or t.get("retains_grad")) and t.get("grad") is None
        for step in steps[calls[0] :]
        for t in step.get("tensors") or []
    )
