"""``loss.data[0]``: reading the number out of a loss the way PyTorch did before 0.4 (2018).

A loss is now a 0-dim tensor, and torch raises ``IndexError: invalid index of a 0-dim tensor``.
Fix: ``loss.item()`` (the Python number, as ``loss.data[0]`` was then; ``.data`` is not needed);
and, where the snippet has more old idioms, all of them updated.
"""

from __future__ import annotations

from gradstep.diagnose import modernize
from gradstep.diagnose.candidate import Candidate, fix_of, present
from gradstep.diagnose.source import Source

KIND = "index_of_0_dim_tensor"
MARK = "invalid index of a 0-dim tensor"


def find(trace: dict, src: Source) -> list[Candidate]:
    error = trace.get("error")
    line = error.get("line") if error else None
    if not error or error["type"] != "IndexError" or MARK not in error["message"] or line is None:
        return []
    message = (
        "x.data[0] read the number out of a loss before PyTorch 0.4 (2018), when a loss was a 1-element tensor. "
        "A loss is now a 0-dim tensor (a scalar): it has no index 0. .item() gives its value as a Python number."
    )
    own = fix_of(
        src,
        modernize.item(src, line),
        "item",
        "Use .item()",
        "The Python number (checked: the fixed snippet runs).",
    )
    fixes = present(own, modernize.update_all(src, own))
    return [Candidate(KIND, "error", line, message, fixes)]
