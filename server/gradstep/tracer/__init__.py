"""The tracer: runs a snippet and records its autograd graph at every step.

It knows nothing about HTTP or sandboxing; ``record`` works in any process.
"""

from gradstep.tracer.limits import Limits
from gradstep.tracer.recorder import record

__all__ = ["Limits", "record"]
