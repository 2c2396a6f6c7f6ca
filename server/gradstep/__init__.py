"""gradstep: step through PyTorch autograd one call at a time."""

from gradstep.schema import VERSION, Trace

__all__ = ["VERSION", "Trace", "load_ipython_extension", "record", "show", "trace"]


def trace(code: str, diagnose: bool = True, limits=None) -> Trace:
    """Run ``code`` in this process and return its typed trace (for notebooks and tests).

    With ``diagnose``, known autograd mistakes come with fixes, each verified by
    running it here as well (your own code, re-run unconfined).
    """
    from gradstep.pipeline import in_process
    from gradstep.trace_dicts import typed

    return typed(in_process(code, limits, diagnose=diagnose))


def show(code: str, step: int = 0, theme: str = "auto", height: int | None = None):
    """Run ``code`` in this process and display its stepper inline (Jupyter, VS Code): see gradstep.notebook."""
    from gradstep.notebook import show

    return show(code, step=step, theme=theme, height=height)


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
