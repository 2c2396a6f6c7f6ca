"""``backward(retain_variables=True)``: the keyword PyTorch 0.4 (2018) renamed ``retain_graph``.

torch raises ``TypeError: … got an unexpected keyword argument 'retain_variables'``. Fix: the
same call with ``retain_graph=`` (it keeps the graph's saved tensors, so it can be backwarded
through again); and, where the snippet has more old idioms, all of them updated.
"""

from __future__ import annotations

from gradstep.diagnose import modernize
from gradstep.diagnose.candidate import Candidate, fix_of, present
from gradstep.diagnose.source import Source
from gradstep.schema import CALL_KINDS

KIND = "retain_variables_renamed"
MARK = "unexpected keyword argument 'retain_variables'"


def find(trace: dict, src: Source) -> list[Candidate]:
    error = trace.get("error")
    line = error.get("line") if error else None
    if not error or error["type"] != "TypeError" or MARK not in error["message"] or line is None:
        return []
    message = (
        "retain_variables= is the name PyTorch used before version 0.4 (2018); it became retain_graph=, and "
        "torch no longer accepts the old name. It keeps the graph's saved tensors after this backward, so the "
        "graph can be backwarded through again."
    )
    own = fix_of(
        src,
        modernize.retain_graph(src, line),
        "rename",
        "Use retain_graph=",
        "The same call with today's name for the keyword (checked: the fixed snippet runs).",
        intent=lambda fixed, _trace, _passed: _retains_at(fixed, line),
    )
    fixes = present(own, modernize.update_all(src, own))
    return [Candidate(KIND, "error", line, message, fixes)]


def _retains_at(fixed: dict, line: int) -> bool:
    """The fixed run's call at ``line`` kept its graph, as retain_variables=True asked."""
    return any(
        s.get("line") == line and s.get("retain_graph")
        for s in fixed.get("steps") or ()
        if s["kind"] in CALL_KINDS
    )
