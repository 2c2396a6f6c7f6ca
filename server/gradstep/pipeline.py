"""A snippet's way through gradstep, composed here once: record, then narrate, then diagnose.

* ``tracer.record`` runs the code and records what autograd did; it knows nothing of narration
  or of mistakes.
* ``narrate.narrate`` explains each step, from the trace alone.
* ``diagnose`` finds mistakes and checks fixes from traces alone: it never runs code, so it
  never imports this module (the layers point one way: pipeline -> diagnose, narrate, tracer).
  In this process (``in_process``: notebooks, Sphinx, ``gradstep.trace``) the rules' fixes are
  verified by running them here (``run_locally``); in the sandbox (``gradstep.jobs``) the rules
  only propose them, and the server runs each fix confined (``gradstep.runs``).
"""

from __future__ import annotations

from gradstep import diagnose as diagnoses
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
        add_in_process(trace, fix_runs)
    return trace


def run_locally(codes: list[str]) -> list[dict]:
    """Run fixes in this process with the tracer (the notebook path: the user's own code, unconfined)."""
    return [explained(code) for code in codes]


def add_in_process(trace: TraceDict, fix_runs: dict[str, TraceDict] | None = None) -> TraceDict:
    """Fill ``trace["diagnoses"]``, verifying fixes with the tracer in this process; returns the trace.

    ``fix_runs``, when given, receives the run of each fix offered (its code -> its trace): what a
    page without a server shows when Apply fix is pressed."""

    def run(codes: list[str]) -> list[dict]:
        ran = run_locally(codes)
        if fix_runs is not None:
            fix_runs.update(zip(codes, ran, strict=True))
        return ran

    try:
        trace["diagnoses"] = diagnoses.diagnose(trace, run)
    except Exception as e:  # the trace matters more than its diagnoses
        if diagnoses.STRICT:
            raise
        trace.setdefault("notes", []).append(f"No diagnoses for this trace: {type(e).__name__}: {e}")
    if fix_runs is not None:
        offered = {f["code"] for d in trace.get("diagnoses") or () for f in d.get("fixes") or ()}
        for code in [c for c in fix_runs if c not in offered]:
            del fix_runs[code]
    return trace
