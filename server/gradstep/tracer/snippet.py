"""Running a snippet: compiled with a marker before each statement (lines.py), executed in
globals of its own, its failure caught as the trace reports it."""

from __future__ import annotations

import builtins
import linecache
import types
from collections.abc import Callable
from typing import Any

from gradstep import cells
from gradstep.tracer import errors, lines
from gradstep.tracer.names import SNIPPET_FILENAME


class Snippet:
    def __init__(self, code: str) -> None:
        self.code = code
        self.globals: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        self.ipython_lines: list[int] = []  # lines skipped as IPython's own (``compile``)

    def compile(self) -> types.CodeType:
        """The snippet with its markers (SyntaxError where it is not Python), IPython's own lines
        skipped where it has any (``ipython_lines``; gradstep.cells)."""
        try:
            tree, self.ipython_lines = cells.parse(self.code, SNIPPET_FILENAME)
        except SyntaxError as e:
            self.ipython_lines = getattr(e, "ipython_lines", [])
            raise
        return compile(lines.instrument(tree), SNIPPET_FILENAME, "exec", dont_inherit=True)

    def run(
        self,
        compiled: types.CodeType,
        on_line: Callable,
        on_enter: Callable,
        on_exit: Callable,
        failed: Callable[[BaseException], None],
        on_loop: Callable[[int], None] | None = None,
    ) -> dict | None:
        """Run ``compiled``, its markers calling ``on_*``: its error as the trace shows it, if any
        (``failed`` is told the exception; a ``sys.exit(0)`` is no error)."""
        self.globals.update({lines.LINE: on_line, lines.ENTER: on_enter, lines.EXIT: on_exit})
        self.globals[lines.LOOP] = on_loop or (lambda event: None)
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
                failed(e)
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
