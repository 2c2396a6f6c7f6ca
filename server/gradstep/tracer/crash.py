"""The code's failure outside a backward/grad call, as a step of its own.

A ``TypeError`` at ``w - 0.1 * w.grad``, a shape mismatch, a ``NameError``: the run ends there,
and the step shows the graph as it stood at the failure (the names of the frame that raised, its
callers' and the globals), so its narration and the page can say what autograd had to do with it.
A failed backward or grad call already has its step, with the error: it gets no second one. A
forward step the failing line left that shows nothing (an op that failed took a sequence number,
so the line looked as if it built a node) gives way to the error step; a run that raised before
there was anything to draw gets none.
"""

from __future__ import annotations

from types import FrameType

from gradstep.tracer.errors import Frames


def crash_step(error: dict, steps: list[dict]) -> dict | None:
    """The step to record for ``error`` (the code's failure as the trace reports it), or None when
    the last step is the call that raised it (its own ``error``, same type, message and line)."""
    last = steps[-1].get("error") if steps else None
    if last is not None and all(last.get(k) == error.get(k) for k in ("type", "message", "line")):
        return None
    step: dict = {
        "kind": "error",
        "line": error.get("line"),
        "error": {k: error[k] for k in ("type", "message", "line") if error.get(k) is not None},
    }
    return step


def raising_frame(e: BaseException, frames: Frames) -> FrameType | None:
    """The innermost of the user's frames in ``e``'s traceback: where the names at the failure are."""
    found = None
    tb = e.__traceback__
    while tb is not None:
        if frames.own(tb.tb_frame.f_code.co_filename):
            found = tb.tb_frame
        tb = tb.tb_next
    return found


def shows_nothing(step: dict, line: int | None, table: list[dict]) -> bool:
    """``step`` is a forward step at ``line`` that shows no new node and lets go of none."""
    if step["kind"] != "forward" or step.get("line") != line or step.get("repeat", 1) != 1:
        return False
    if any(st.get("dropped") for st in step.get("nodes") or ()):
        return False
    index = step["index"]
    return not any(info["step"] == index for info in table)


def shows_something(step: dict, earlier: list[dict]) -> bool:
    """An error step is worth keeping: it follows other steps, or shows a node or a tensor. (A run
    that raised before building anything the page could draw has no step, and the page says so.)"""
    return bool(earlier or step.get("nodes") or step.get("tensors"))
