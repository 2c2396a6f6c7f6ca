"""Capture what a snippet prints and warns, step by step, with a cap."""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable


class Output(io.TextIOBase):
    """A stdout/stderr stand-in: keeps the first ``cap`` characters, counts the rest."""

    def __init__(self, cap: int):
        self.cap = cap
        self.parts: list[str] = []
        self.size = 0
        self.dropped = 0
        self._mark = 0  # size at the last step, to hand each step its own output

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        room = self.cap - self.size
        if room > 0:
            self.parts.append(s[:room])
            self.size += min(len(s), room)
        self.dropped += max(0, len(s) - max(room, 0))
        return len(s)

    def text(self) -> str:
        return "".join(self.parts)

    def since_last_step(self) -> str:
        if self.size == self._mark:
            return ""
        text = self.text()[self._mark :]
        self._mark = self.size
        return text


class Warnings:
    """Records warnings (with the snippet line they came from) instead of printing them."""

    def __init__(
        self,
        line_of: Callable[[], int | None],
        text_of: Callable[[str], str] = str,  # a message as the trace shows it (the user's frames only)
        cap: int = 200,
    ):
        self.items: list[dict] = []
        self._line_of = line_of
        self._text_of = text_of
        self._cap = cap
        self._mark = 0
        self._ctx = warnings.catch_warnings()

    def __enter__(self) -> Warnings:
        # Entering resets every module's "already shown" registry, so a warning shows
        # once per location in this run, as in a fresh script; the filters stay the
        # process's defaults (DeprecationWarnings from library code stay hidden). A fresh
        # context each time: a live recording enters once per recorded block.
        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.showwarning = self._show
        return self

    def __exit__(self, *exc) -> None:
        self._ctx.__exit__(*exc)

    def close(self) -> None:
        self._line_of = _no_line  # they point back at the recorder: no cycle left behind
        self._text_of = str

    def _show(self, message, category, filename, lineno, file=None, line=None) -> None:
        if len(self.items) >= self._cap:
            return
        where = lineno if filename == "<snippet>" else self._line_of()
        self.items.append(
            {"category": category.__name__, "message": self._text_of(str(message)), "line": where}
        )

    def since_last_step(self) -> list[dict]:
        new = self.items[self._mark :]
        self._mark = len(self.items)
        return new


def _no_line() -> None:
    return None
