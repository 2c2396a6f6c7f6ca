"""Loop folding: a line that ran more than a few times builds no step of its own.

A loop's first iterations are shown step by step; the rest are counted, and one step shows
where the loop left the graph once a line that is still shown runs again (or a backward
call, or the end of the run, comes).
"""

from __future__ import annotations

from collections import Counter


class Loops:
    def __init__(self, repeats: int) -> None:
        self.repeats = repeats  # executions of one line shown as steps
        self.runs: Counter[int | None] = Counter()  # executions of each line so far
        self.folded = 0  # forward steps waiting in the folded step
        self.folded_line: int | None = None  # the line of the last of them

    def ran(self, line: int | None) -> bool:
        """``line`` starts to run: True if it ends a folded loop (it is still shown)."""
        self.runs[line] += 1
        return self.folded > 0 and self.runs[line] <= self.repeats

    def shown(self, line: int | None) -> bool:
        """Does a step of ``line`` show on its own?"""
        return self.runs[line] <= self.repeats

    def fold(self, line: int | None) -> None:
        """A forward step of ``line``, not shown: it goes into the folded step."""
        self.folded += 1
        self.folded_line = line

    def take(self) -> dict | None:
        """The folded step, if any (once: the count starts again)."""
        if not self.folded:
            return None
        step = {"kind": "forward", "line": self.folded_line, "repeat": self.folded}
        self.folded = 0
        return step
