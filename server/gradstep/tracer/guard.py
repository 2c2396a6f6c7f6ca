"""The tracer's own failures: never the snippet's, each said once in the trace, and tracing goes on."""

from __future__ import annotations

import functools

from gradstep.note_text import use


class Guard:
    """Whether the tracer is at work now, and what it failed at so far."""

    def __init__(self, steps: list) -> None:
        self.busy = False  # the tracer is at work: snippet code it triggers is not traced
        self.failures: list[dict] = []  # each noted once in the trace: a Use (gradstep.note_text)
        self._steps = steps  # the recording's steps: a note says at which one it failed

    def note(self, where: str, e: BaseException) -> None:
        """A failure of the tracer's own: said once per kind, and tracing goes on."""
        detail = f"{type(e).__name__}: {e}"
        if len(self.failures) < 10 and not any(f["detail"] == detail for f in self.failures):
            self.failures.append(use("tracer_failed", name=where, step=len(self._steps) + 1, detail=detail))


def guarded(method):
    """Run a tracer callback (a method of an object with a ``guard``) so that a failure of the
    tracer never becomes the snippet's.

    The failure is noted in the trace and tracing goes on. A callback that arrives while the
    tracer itself is working (the snippet's code run by torch on the tracer's behalf: a hook,
    a property) records nothing.
    """

    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        guard = self.guard
        if guard.busy:
            return None
        guard.busy = True
        try:
            return method(self, *args, **kwargs)
        except Exception as e:  # noqa: BLE001
            guard.note(method.__name__, e)
            return None
        finally:
            guard.busy = False

    return guarded
