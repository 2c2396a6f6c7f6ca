"""The snippet's own failures, as the trace reports them."""

from __future__ import annotations

import traceback

from gradstep.tracer.names import SNIPPET_FILENAME


def snippet_error(e: BaseException, code: str) -> dict:
    """The snippet's exception as the trace shows it: a traceback of the snippet's own frames."""
    tb = e.__traceback__
    line = None
    frames = []
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == SNIPPET_FILENAME:
            line = tb.tb_lineno
            frames.append((tb.tb_lineno, tb.tb_frame.f_code.co_name))
        tb = tb.tb_next
    src = code.splitlines()
    text = ["Traceback (most recent call last):"]
    for ln, fn in frames:
        where = "<module>" if fn == "<module>" else fn
        text.append(f"  line {ln}, in {where}")
        if 0 < ln <= len(src):
            text.append(f"    {src[ln - 1].strip()}")
    text.extend(traceback.format_exception_only(type(e), e))
    return {
        "type": type(e).__name__,
        "message": str(e),
        "line": line,
        "traceback": "\n".join(text).rstrip(),
    }


def syntax_error(e: SyntaxError) -> dict:
    return {
        "type": type(e).__name__,
        "message": e.msg,
        "line": e.lineno,
        "column": e.offset,
        "traceback": "".join(traceback.format_exception_only(type(e), e)).rstrip(),
    }
