"""gradstep: step through PyTorch autograd one call at a time."""

import importlib.machinery
import sys
import warnings
from pathlib import Path

from gradstep.schema import VERSION, Trace

_SANDBOXED = "gradstep.sandbox.zygote" in sys.orig_argv  # the run's own process: see python_reader
_said = False


def python_reader(why: str) -> None:
    """Say once per process that traces are read by the Python reader, since the C one (the
    optional extension tracer/_nodes.c) is missing or failed to build: the same traces, several
    times slower. Never in the sandbox's processes, where the snippet's warnings are recorded."""
    global _said
    if _said or _SANDBOXED:
        return
    _said = True
    warnings.warn(
        f"gradstep's C node reader {why}: traces are read in Python (the same traces, slower). "
        "Build it with `make native` in a checkout (a C compiler and Python's headers are needed), "
        "or reinstall gradstep where a C compiler is found.",
        RuntimeWarning,
        stacklevel=3,
    )


if not any(
    (Path(__file__).parent / "tracer" / f"_nodes{suffix}").exists()
    for suffix in importlib.machinery.EXTENSION_SUFFIXES
):
    python_reader("(gradstep.tracer._nodes) is not built")

__all__ = ["VERSION", "Trace", "load_ipython_extension", "record", "show", "trace"]


def trace(code: str, diagnose: bool = True, limits=None) -> Trace:
    """Run ``code`` in this process and return its typed trace (for notebooks and tests).

    With ``diagnose``, known autograd mistakes come with fixes, each verified by
    running it here as well (your own code, re-run unconfined).
    """
    from gradstep.pipeline import in_process
    from gradstep.trace_dicts import typed

    return typed(in_process(code, limits, diagnose=diagnose))


def show(
    code: str,
    step: int = 0,
    theme: str = "auto",
    height: int | None = None,
    diagnose: bool = True,
    predict: str | bool | None = None,
):
    """Run ``code`` in this process and display its stepper inline (Jupyter, VS Code): see
    gradstep.notebook. ``predict`` makes it an exercise (docs/exercises.md)."""
    from gradstep.notebook import show

    return show(code, step=step, theme=theme, height=height, diagnose=diagnose, predict=predict)


def record(fn=None, /, *, when=None, watch=None, limits=None, locals=True, explain=True):
    """Record your own code (functions, methods, modules, a training step) in this process:
    ``with gradstep.record() as rec: ...`` (or ``rec.iteration(i == 3)`` in a loop), then
    ``rec.show()`` / ``rec.trace`` / ``rec.export(path)``; as a decorator, ``@gradstep.record``
    records a function's first call (``when=lambda n: ...`` picks others) into ``fn.recording``.
    See gradstep.recording."""
    from gradstep.recording import record

    return record(fn, when=when, watch=watch, limits=limits, locals=locals, explain=explain)


def load_ipython_extension(ipython) -> None:
    """``%load_ext gradstep``: the ``%%gradstep`` cell magic."""
    from gradstep.notebook import load_ipython_extension

    load_ipython_extension(ipython)
