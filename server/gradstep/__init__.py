"""gradstep: step through PyTorch autograd one call at a time."""

from gradstep.schema import VERSION, Trace

__all__ = ["VERSION", "Trace", "load_ipython_extension", "show", "trace"]


def trace(code: str, **options) -> Trace:
    """Run ``code`` in this process and return its typed trace (for notebooks and tests)."""
    from gradstep.tracer import record

    return Trace.model_validate(record(code, **options))


def show(code: str, step: int = 0, theme: str = "auto", height: int = 760):
    """Run ``code`` in this process and display its stepper inline (Jupyter, VS Code): see gradstep.notebook."""
    from gradstep.notebook import show

    return show(code, step=step, theme=theme, height=height)


def load_ipython_extension(ipython) -> None:
    """``%load_ext gradstep``: the ``%%gradstep`` cell magic."""
    from gradstep.notebook import load_ipython_extension

    load_ipython_extension(ipython)
