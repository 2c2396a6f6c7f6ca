"""Running a snippet: compiled with a marker before each statement (lines.py), executed in
globals of its own, its failure caught as the trace reports it."""

from __future__ import annotations

import ast
import builtins
import linecache
import re
import types
from collections.abc import Callable
from typing import Any

from gradstep.tracer import errors, lines
from gradstep.tracer.names import SNIPPET_FILENAME

# A line of IPython's own (a notebook cell pasted as it is): a %magic, a %%cell magic or a !shell command
_IPYTHON_LINE = re.compile(r"^([ \t]*)[%!]")


class Snippet:
    def __init__(self, code: str) -> None:
        self.code = code
        self.globals: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        self.ipython_lines: list[int] = []  # lines skipped as IPython's own (``compile``)

    def compile(self) -> types.CodeType:
        """The snippet with its markers (SyntaxError where it is not Python), IPython's own lines
        skipped where it has any (``ipython_lines``)."""
        try:
            tree = ast.parse(self.code, SNIPPET_FILENAME)
        except SyntaxError:
            python, skipped = _without_ipython_lines(self.code)
            if not skipped:
                raise
            self.ipython_lines = skipped
            tree = ast.parse(
                python, SNIPPET_FILENAME
            )  # a SyntaxError now is the code's own, past those lines
        return compile(lines.instrument(tree), SNIPPET_FILENAME, "exec", dont_inherit=True)

    def run(
        self,
        compiled: types.CodeType,
        on_line: Callable,
        on_enter: Callable,
        on_exit: Callable,
        failed: Callable[[BaseException], None],
    ) -> dict | None:
        """Run ``compiled``, its markers calling ``on_*``: its error as the trace shows it, if any
        (``failed`` is told the exception; a ``sys.exit(0)`` is no error)."""
        self.globals.update({lines.LINE: on_line, lines.ENTER: on_enter, lines.EXIT: on_exit})
        # Its source where inspect looks (torch.jit.script, inspect.getsource), as a file's would be
        linecache.cache[SNIPPET_FILENAME] = (
            len(self.code),
            None,
            self.code.splitlines(True),
            SNIPPET_FILENAME,
        )
        try:
            exec(compiled, self.globals)
        except SystemExit as e:
            if e.code not in (None, 0):
                return errors.snippet_error(e, self.code)
        except BaseException as e:  # the snippet's own failure is part of the trace
            error = errors.snippet_error(e, self.code)
            failed(e)
            return error
        finally:
            linecache.cache.pop(SNIPPET_FILENAME, None)
        return None

    def let_go(self) -> None:
        """Its globals go, as a plain run's do at its end (see Recorder._let_go)."""
        self.globals.clear()


def _without_ipython_lines(code: str) -> tuple[str, list[int]]:
    """``code`` with each line of IPython's own made ``pass`` (same indent, same line numbers), and
    their numbers."""
    out, skipped = [], []
    for number, line in enumerate(code.splitlines(keepends=True), 1):
        match = _IPYTHON_LINE.match(line)
        if match:
            skipped.append(number)
            line = f"{match.group(1)}pass\n"
        out.append(line)
    return "".join(out), skipped
