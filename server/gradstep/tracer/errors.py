"""The code's own failures, as the trace reports them: the user's frames only.

A traceback the trace shows holds the user's frames and none of gradstep's (the runner that
exec'd a snippet sits above it in every stack) or the libraries' below them. ``Frames`` says
which frames are the user's and how one is written; a snippet's (``snippet_frames``) and a live
recording's (``LiveRecorder.frames``) differ only there.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from gradstep.tracer.names import SNIPPET_FILENAME


@dataclass(frozen=True)
class Frames:
    own: Callable[[str], bool]  # a frame's file name -> whether it is the user's
    show: Callable[[str, int, str], list[str]]  # (file name, line, function) -> the frame's text lines
    line: Callable[[str, int], int | None]  # (file name, line) -> the trace's line for it


def snippet_frames(code: str) -> Frames:
    """A snippet's frames: ``line 7, in <module>`` and the line's source."""
    src = code.splitlines()

    def show(filename: str, line: int, name: str) -> list[str]:
        text = [f"  line {line}, in {name}"]
        if 0 < line <= len(src):
            text.append(f"    {src[line - 1].strip()}")
        return text

    return Frames(lambda filename: filename == SNIPPET_FILENAME, show, lambda filename, line: line)


def exception(e: BaseException, frames: Frames) -> dict:
    """The exception as the trace shows it: a traceback of the user's own frames; ``line`` is
    where the innermost of them was."""
    tb = e.__traceback__
    line = None
    text = ["Traceback (most recent call last):"]
    while tb is not None:
        code = tb.tb_frame.f_code
        if frames.own(code.co_filename):
            line = frames.line(code.co_filename, tb.tb_lineno)
            text.extend(frames.show(code.co_filename, tb.tb_lineno, code.co_name))
        tb = tb.tb_next
    text.extend(traceback.format_exception_only(type(e), e))
    return {
        "type": type(e).__name__,
        "message": str(e),
        "line": line,
        "traceback": "\n".join(text).rstrip(),
    }


def snippet_error(e: BaseException, code: str) -> dict:
    return exception(e, snippet_frames(code))


def syntax_error(e: SyntaxError) -> dict:
    return {
        "type": type(e).__name__,
        "message": e.msg,
        "line": e.lineno,
        "column": e.offset,
        "traceback": "".join(traceback.format_exception_only(type(e), e)).rstrip(),
    }


# A stack as ``traceback.format_stack`` writes it: anomaly mode's "Traceback of forward call that
# caused the error" in its warning (torch/csrc/autograd/python_anomaly_mode.cpp).
STACK_FRAME = re.compile(
    r'  File "(?P<file>[^"\n]*)", line (?P<line>\d+), in (?P<name>[^\n]*)\n(?:    [^\n]*\n)?'
)
FORWARD_CALL = "Traceback of forward call that caused the error:\n"


def own_stack(message: str, frames: Frames) -> str:
    """``message`` with a stack it quotes (anomaly mode's forward call) cut to the user's frames,
    written as the trace writes them; any other message as it is."""
    head, found, rest = message.partition(FORWARD_CALL)
    if not found:
        return message
    shown, at = [], 0
    while m := STACK_FRAME.match(rest, at):
        if frames.own(m["file"]):
            shown.extend(frames.show(m["file"], int(m["line"]), m["name"]))
        at = m.end()
    if not shown:  # none of the user's: the stack as torch wrote it says more than nothing
        return message
    return head + found + "\n".join(shown) + "\n" + rest[at:]
