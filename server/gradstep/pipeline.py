"""A snippet's way through gradstep, composed here once: record, then narrate, then diagnose.

* ``tracer.record`` runs the code and records what autograd did; it knows nothing of narration
  or of mistakes.
* ``narrate.narrate`` explains each step, from the trace alone.
* Diagnoses: in this process (``in_process``: notebooks, Sphinx, ``gradstep.trace``) the rules'
  fixes are verified by running them here; in the sandbox (``gradstep.jobs``) the rules only
  propose them, and the server runs each fix confined (``gradstep.runs``).
"""

from __future__ import annotations

from gradstep.narrate import narrate
from gradstep.trace_dicts import TraceDict
from gradstep.tracer import Limits, record


def explained(code: str, limits: Limits | None = None) -> TraceDict:
    """The trace of ``code`` run here, each step narrated."""
    return narrate(record(code, limits))


def in_process(
    code: str,
    limits: Limits | None = None,
    *,
    diagnose: bool = True,
    fix_runs: dict[str, TraceDict] | None = None,
) -> TraceDict:
    """``explained``, with diagnoses whose fixes were verified by running them here (the user's
    own code, re-run unconfined). ``fix_runs`` receives the trace of each fix offered, by its code
    (what a static page ships for Apply fix)."""
    trace = explained(code, limits)
    if diagnose:
        from gradstep.diagnose import add_in_process  # the rules load only when asked for

        add_in_process(trace, fix_runs)
    return trace
