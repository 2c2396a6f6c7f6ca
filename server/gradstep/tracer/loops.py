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
        self.calls = 0  # backward/grad calls given a step so far
        self.update_calls: dict[int | None, int] = {}  # line → self.calls when its update last showed

    def ran(self, line: int | None) -> bool:
        """``line`` starts to run: True if it ends a folded loop (it is still shown)."""
        self.runs[line] += 1
        return self.folded > 0 and self.runs[line] <= self.repeats

    def shown(self, line: int | None) -> bool:
        """Does a step of ``line`` show on its own?"""
        return self.runs[line] <= self.repeats

    def called(self) -> None:
        """A backward or autograd.grad call got its step."""
        self.calls += 1

    def update_shown(self, line: int | None) -> bool:
        """Does an optimizer call (updates.py) at ``line`` get a step? In its line's first executions,
        as any line; past them, once per backward call: a training loop shows its zero_grad and step
        in every iteration whose backward it shows, while optimizer calls with no backward between
        them (a scheduler stepped in a loop of its own) fold as forward lines do."""
        shown = self.shown(line) or self.update_calls.get(line) != self.calls
        if shown:
            self.update_calls[line] = self.calls
        return shown

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
