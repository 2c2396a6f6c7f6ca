"""Writes through ``.data`` (``w.data -= lr * w.grad``): changing a tensor behind autograd's back.

Before PyTorch 0.4 (2018) this was how an update stepped outside the graph. ``.data`` still works,
but autograd does not see the write: the tensor's version counter stays put, so a graph that saved
the old value would use the new one in backward without a word. What it became: the same write in
place, under ``torch.no_grad()`` (checked: the fixed run prints the same and ends with the same
gradients; a run that relied on autograd not seeing the write fails instead, and is not offered).

The rule reads the syntax tree (the run shows nothing: the write succeeds), for the writes the run
reached (before its error, if it had one).
"""

from __future__ import annotations

from gradstep.diagnose import facts, modernize
from gradstep.diagnose.candidate import Candidate, fix_of, present
from gradstep.diagnose.source import Source

KIND = "data_write"
# the docs' list of kinds (docs/trace-format.md, written by `make schema`)
DESCRIPTION = (
    "Writes through `.data` (`w.data -= lr * w.grad`), how an update stepped outside the graph before "
    "PyTorch 0.4 (2018): changing a tensor behind autograd's back."
)


def find(trace: dict, src: Source) -> list[Candidate]:
    writes = modernize.data_writes(src, (trace.get("error") or {}).get("line"))
    if not writes:
        return []
    first = writes[0][0]
    message = (
        f"{src.text(first).strip()} writes through .data, which autograd does not see: the tensor's version counter "
        "stays put, so a graph that saved the old value would use the new one in backward without an error. Before "
        "PyTorch 0.4 (2018) this was how to step outside the graph; now it is the write itself, in place, under "
        "torch.no_grad()."
    )
    own = fix_of(
        src,
        modernize.under_no_grad(src, writes),
        "no_grad",
        "Write in place under torch.no_grad()",
        "The same update where autograd can see it (checked: the fixed snippet prints the same and ends with "
        "the same gradients).",
        intent=_same_run,
    )
    fixes = present(own, modernize.update_all(src, own))
    return [Candidate(KIND, "warning", first.lineno, message, fixes)]


def _same_run(fixed: dict, trace: dict, _passed: dict) -> bool:
    if trace["status"] == "ok" and fixed.get("stdout") != trace.get("stdout"):
        return False
    before, after = facts.final_grads(trace), facts.final_grads(fixed)
    return before.keys() == after.keys() and all(facts.same_grad(before[k], after[k]) for k in before)
