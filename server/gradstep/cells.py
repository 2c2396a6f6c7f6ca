"""Code as Python, where it was pasted from a notebook cell with IPython's own lines in it.

A cell can hold lines only IPython understands: ``%matplotlib inline``, a ``%%time`` cell magic,
``!pip install …``. Where the code is not Python as it is and such lines are why, they are made
``pass`` (same indent, same line numbers: steps, errors and fixes point at the cell's own lines),
and the tracer, the narration and the rules all read that Python.
"""

from __future__ import annotations

import ast
import re

# A line of IPython's own: a %magic, a %%cell magic or a !shell command
_IPYTHON_LINE = re.compile(r"^([ \t]*)[%!]")


def parse(code: str, filename: str = "<unknown>") -> tuple[ast.Module, list[int]]:
    """``code`` parsed, with the numbers of the IPython lines skipped to parse it (none if it is
    Python as it is). SyntaxError where it is not Python even so: then its own error, past them."""
    try:
        return ast.parse(code, filename), []
    except SyntaxError:
        python, skipped = _without_ipython_lines(code)
        if not skipped:
            raise
    try:
        return ast.parse(python, filename), skipped
    except SyntaxError as e:
        e.ipython_lines = skipped  # type: ignore[attr-defined]  # for the note beside the error
        raise


def _without_ipython_lines(code: str) -> tuple[str, list[int]]:
    out, skipped = [], []
    for number, line in enumerate(code.splitlines(keepends=True), 1):
        match = _IPYTHON_LINE.match(line)
        if match:
            skipped.append(number)
            line = f"{match.group(1)}pass\n"
        out.append(line)
    return "".join(out), skipped
