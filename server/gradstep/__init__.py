"""gradstep: step through PyTorch autograd one call at a time."""

from gradstep.schema import VERSION, Trace

__all__ = ["VERSION", "Trace", "trace"]


def trace(code: str, **options) -> Trace:
    """Run ``code`` in this process and return its typed trace (for notebooks and tests)."""
    from gradstep.tracer import record

    return Trace.model_validate(record(code, **options))
