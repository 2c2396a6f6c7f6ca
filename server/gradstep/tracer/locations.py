"""Where the caller's own code runs: source lines across files, as the recorder counts lines.

The recorder keys everything by an ``int`` line (steps, node creation, loop folding).
Recording code that spans files, each ``(file, line)`` gets a small int of its own
here (from 1: the recorder treats 0 as no line), and the finished trace is
rewritten to real line numbers plus an index into ``Trace.files``.
"""

from __future__ import annotations

import dis
import linecache
import os
import sysconfig
import types
from pathlib import Path

import torch

import gradstep

OUTSIDE = "<outside the recording>"  # the "file" of nodes built where no recorded line ran
MAX_SOURCE = 200_000  # characters of one file's source a trace carries (beyond: path only)

# Code that is not the user's: the interpreter's own library, installed packages, torch, gradstep.
_NOT_USERS = tuple(
    {
        str(Path(p).resolve()) + os.sep
        for p in (
            *(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")),
            os.path.dirname(torch.__file__),
            os.path.dirname(gradstep.__file__),
        )
    }
)
_REBINDING_OPS = frozenset(op for op in dis.opname if op.startswith(("STORE_", "DELETE_")))


_TYPED = frozenset({"<stdin>", "<console>", "<input>"})  # not <string>: dataclasses, namedtuple…


class Locations:
    """(file, line) <-> small int, and which files are the user's."""

    def __init__(self) -> None:
        self._ids: dict[tuple[str, int], int] = {}
        self.places: list[tuple[str, int]] = [("", 0)]  # index = location id; 0: none
        self._user: dict[str, bool] = {}
        self._rebinding: dict[types.CodeType, frozenset[int]] = {}

    def of(self, filename: str, line: int) -> int:
        key = (filename, line)
        loc = self._ids.get(key)
        if loc is None:
            loc = self._ids[key] = len(self.places)
            self.places.append(key)
        return loc

    def is_user(self, filename: str) -> bool:
        """Code the user wrote (a script, a notebook cell, their own package), not a library's."""
        known = self._user.get(filename)
        if known is None:
            known = self._user[filename] = _is_user_file(filename)
        return known

    def rebinds(self, code: types.CodeType, line: int) -> bool:
        """Does ``line`` of ``code`` assign or delete a name (so it may let go of a graph)?"""
        lines = self._rebinding.get(code)
        if lines is None:
            lines = self._rebinding[code] = _rebinding_lines(code)
        return line in lines


def _is_user_file(filename: str) -> bool:
    if filename.startswith("<"):
        # typed by the user, not code a library generated (<string>, torch.fx's <eval_with_key>.N)
        return filename in _TYPED or filename.startswith("<ipython-input-")
    try:
        path = str(Path(filename).resolve())
    except OSError:
        return False
    return not path.startswith(_NOT_USERS)


def _rebinding_lines(code: types.CodeType) -> frozenset[int]:
    out: set[int] = set()
    line = None
    for ins in dis.get_instructions(code):
        if ins.positions is not None and ins.positions.lineno is not None:
            line = ins.positions.lineno
        if ins.opname in _REBINDING_OPS and line is not None:
            out.add(line)
    return frozenset(out)


def shown_path(filename: str) -> str:
    """A file as a trace names it: relative to the working directory when under it."""
    if filename.startswith("<"):
        return filename
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


def source(filename: str) -> str | None:
    """The file's text as Python sees it (linecache also knows notebook cells), or None."""
    text = "".join(linecache.getlines(filename))
    if not text or len(text) > MAX_SOURCE:
        return None
    return text
