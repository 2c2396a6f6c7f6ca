"""``gradstep.record()``: record your own code, in your own process, as a trace.

    with gradstep.record() as rec:        # any code: functions, methods, imported modules
        loss = loss_fn(model(x), y)
        loss.backward()
    rec.show()                            # the stepper inline; rec.trace, rec.export("page.html")

    rec = gradstep.record().watch(model)  # one iteration of a loop
    for i in range(10):
        with rec.iteration(i == 3):
            train_step()

    @gradstep.record                      # a function: its first call (or those when(n) selects)
    def train_step(): ...
    train_step(); train_step.recording.show()

Tensors are named by what the user watches (``watch(model, x)``) and, unless
``locals=False``, by the local variables of their frames inside the recording. The
code runs as it is (no device rewriting, no sandbox): it is the user's own.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from gradstep.schema import Trace
from gradstep.trace_dicts import typed
from gradstep.tracer.limits import Limits
from gradstep.tracer.live import LiveRecorder

F = TypeVar("F", bound=Callable[..., Any])


class Recording:
    """A recording of the caller's code: a context manager, entered once or once per recorded block."""

    def __init__(self, *, limits: Limits | None = None, locals: bool = True, explain: bool = True):
        self.limits = limits or Limits()
        self.explain = explain
        self._watched: dict[str, Any] = {}
        self._rec = LiveRecorder(self.limits, self._watched, use_locals=locals)
        self._active = False
        self._data: dict | None = None

    # -- what to name ----------------------------------------------------------

    def watch(self, *objects: Any, **named: Any) -> Recording:
        """Name tensors, modules (their parameters) or containers in the trace, and track their ``.grad``.

        Positional objects take the name the calling code gives them (``rec.watch(model, x)``
        -> ``model``, ``x``); keywords name them explicitly."""
        caller = sys._getframe(1)
        for obj in objects:
            self._watched[_name_in(caller, obj) or f"{type(obj).__name__.lower()}{len(self._watched)}"] = obj
        self._watched.update(named)
        return self

    # -- recording ---------------------------------------------------------------

    def __enter__(self) -> Recording:
        self._begin(sys._getframe(1))
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._end(exc)
        return False  # the user's exception is theirs: recorded, and raised on

    def iteration(self, on: bool = True) -> _Block:
        """``with rec.iteration(i == 3):`` records that block only when ``on`` (else runs it plainly);
        blocks recorded this way add to one trace."""
        return _Block(self, bool(on))

    def __call__(self, fn: F) -> F:
        return _decorate(fn, self, None)

    def _begin(self, anchor: types.FrameType, first_file: str | None = None) -> None:
        if self._active:
            raise RuntimeError("this gradstep recording is already running (recordings do not nest)")
        self._active = True
        self._data = None
        self._rec.start(anchor, first_file)

    def _end(self, exc: BaseException | None) -> None:
        try:
            self._rec.stop(exc)
        finally:
            self._active = False

    # -- the result --------------------------------------------------------------

    @property
    def data(self) -> dict:
        """The trace as plain JSON-able data (what the front end reads)."""
        if self._active:
            raise RuntimeError("the recording is still running: read it after its `with` block")
        if self._data is None:
            data = self._rec.result()
            if self.explain:
                from gradstep.narrate import narrate

                data = narrate(data)
            self._data = data
        return self._data

    @property
    def trace(self) -> Trace:
        """The typed trace (validated against the schema)."""
        return typed(self.data)

    def show(self, step: int = 0, theme: str = "auto", height: int | None = None):
        """The stepper for this recording (the last expression of a notebook cell displays it)."""
        from gradstep.notebook import Stepper

        return Stepper(self.data, step=step, theme=theme, height=height)

    def export(self, path: str | Path, step: int = 0, theme: str = "auto") -> Path:
        """Write the recording as a self-contained page (as ``gradstep export`` does for a snippet)."""
        return self.show(step=step, theme=theme).save(path)

    def __repr__(self) -> str:
        if self._active:
            return "<gradstep.Recording: running>"
        return f"<gradstep.Recording: {len(self._rec.steps)} steps, {self._rec.blocks} block(s)>"


class _Block:
    """One iteration's block: recorded when ``on``."""

    def __init__(self, recording: Recording, on: bool):
        self.recording = recording
        self.on = on

    def __enter__(self) -> Recording:
        if self.on:
            self.recording._begin(sys._getframe(1))
        return self.recording

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self.on:
            self.recording._end(exc)
        return False


def _decorate(fn: F, recording: Recording, when: Callable[[int], bool] | None) -> F:
    calls = 0
    first_file = getattr(getattr(fn, "__code__", None), "co_filename", None)

    @functools.wraps(fn)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        n, calls = calls, calls + 1
        if not (when(n) if when is not None else n == 0) or recording._active:
            return fn(*args, **kwargs)
        recording._begin(sys._getframe(0), first_file)
        try:
            result = fn(*args, **kwargs)
        except BaseException as e:
            recording._end(e)
            raise
        recording._end(None)
        return result

    recorded.recording = recording  # type: ignore[attr-defined]
    return recorded  # type: ignore[return-value]


def record(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    when: Callable[[int], bool] | None = None,
    watch: dict[str, Any] | None = None,
    limits: Limits | None = None,
    locals: bool = True,
    explain: bool = True,
) -> Any:
    """Record your own code's autograd, in this process, as a gradstep trace.

    ``gradstep.record()``: a ``Recording`` to use as ``with … as rec:`` (or ``rec.iteration(on)``
    in a loop). As a decorator (``@gradstep.record`` or ``@gradstep.record(when=…)``): records the
    function's first call, or the calls ``when(n)`` selects (n counts calls from 0), into
    ``fn.recording``.

    ``watch``: names for tensors/modules to follow (also ``Recording.watch``); ``locals``: also
    name tensors by the local variables of the recorded frames; ``limits``: the snippet tracer's
    caps (nodes, steps, output); ``explain``: narrate each step.
    """
    recording = Recording(limits=limits, locals=locals, explain=explain)
    if watch:
        recording.watch(**watch)
    if fn is not None:
        return _decorate(fn, recording, when)
    if when is not None:
        return lambda f: _decorate(f, recording, when)
    return recording


def _name_in(frame: types.FrameType, obj: Any) -> str | None:
    """The caller's name for ``obj`` (its locals, then its globals)."""
    for ns in (frame.f_locals, frame.f_globals):
        for name, value in ns.items():
            if value is obj and not name.startswith("_"):
                return name
    return None
