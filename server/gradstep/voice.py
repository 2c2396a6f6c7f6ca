"""The server's voice: every sentence a served trace says, written by the server from its checked facts.

NOTE [the server's voice]
A snippet runs in the tracer's process, so whatever that process writes can be the snippet's own
words: a look at the code's text narrows that, never closes it (gradstep.reach). So a trace from a
sandboxed child is facts only, and the server (a checker process, gradstep.checker: no snippet runs
there, and not the event loop) writes every sentence from them here:

* the narration (``Step.explanation``, ``Step.links``): whatever the child wrote there is dropped
  and ``narrate`` writes it again from the trace's facts;
* the status: a limit is the server's to say. A run that says it stopped short of its CPU or
  wall-clock limit is taken at its word only where the sandbox saw it use that much (``Observed``:
  the runner's own measurement of the child); a memory limit, where the error is the refusal an
  allocation gets at the run's data limit (Python's MemoryError, torch's "can't allocate memory").
  The message of a limit is the server's (gradstep.limit_advice); what the run itself said is kept
  apart as ``TraceError.reported``, the run's words, shown as a quote. A status the tracer never
  writes (``timeout``, ``crashed``: only the runner ends a run so) is refused;
* ``Trace.notes`` are the server's: written from the facts in ``Trace.uses`` (gradstep.note_text),
  and a note of the facts it refused (gradstep.meaning: a fact the tracer could not have written
  costs that fact, never the trace).

What a run returns that is torch's or the program's own — an exception's type and message, a
warning, what the code printed — stays as it was: quotes, which the page shows as torch's and the
program's words. The trace a child writes (``gradstep.jobs``) leaves every sentence out; the
in-process paths (notebooks, ``record()``) write the same sentences with the same functions
(``gradstep.pipeline``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gradstep import limit_advice
from gradstep.columns import unpack
from gradstep.meaning import check_meaning, refused_note
from gradstep.narrate import narrate
from gradstep.note_text import notes_of

# The statuses a tracer's trace can have: the others are the runner's alone (gradstep.runs)
TRACER_STATUSES = ("ok", "error", "limit")
SELF_STOPS = ("cpu", "wall")  # the limits a run stops itself short of (tracer/limits.py LimitWatch)
REPORTED_MAX = 2_000  # characters of what a run said about itself, kept as its words


@dataclass(frozen=True)
class Observed:
    """What the server knows of a run without the run's word: the limits it ran under (its job's
    spec) and what the sandbox measured of its child (``None``: not measured, as in a run checked
    without one)."""

    memory_mb: int = 0
    cpu_seconds: float = 0
    wall_seconds: float = 0
    cpu_used: float | None = None  # seconds of CPU the child used, measured by the runner
    wall_used: float | None = None  # seconds from the code's hand-over to its result

    def saw_stop(self, limit: str) -> bool:
        """Whether the sandbox saw the run use enough of ``limit`` (cpu, wall) for the tracer to
        stop it there (NOTE [a run stops short of its limits] in gradstep.limit_advice)."""
        budget, used = (
            (self.cpu_seconds, self.cpu_used) if limit == "cpu" else (self.wall_seconds, self.wall_used)
        )
        if not budget or used is None:
            return False
        return used >= limit_advice.stop_point(budget) - limit_advice.STOP_TOLERANCE

    def used(self, limit: str) -> float:
        return (self.cpu_used if limit == "cpu" else self.wall_used) or 0.0

    def value(self, limit: str) -> float | None:
        return {"memory": self.memory_mb, "cpu": self.cpu_seconds, "wall": self.wall_seconds}[limit] or None


def speak(trace: dict, observed: Observed) -> dict:
    """``trace`` (a child's, checked: version 4, columns) with the server's sentences written in, in
    place: its facts held to their meaning first (gradstep.meaning), then its status and limit, its
    narration. Returns it."""
    refused = check_meaning(trace)
    trace["notes"] = notes_of(trace.get("uses") or ()) + ([refused_note(refused)] if refused else [])
    _status(trace, observed)
    _narrate(trace)
    return trace


def _narrate(trace: dict) -> None:
    """Each step's narration, written from the facts (a child's is dropped)."""
    steps = trace.get("steps") or []
    for step in steps:
        step.pop("explanation", None)
        step.pop("links", None)
    if not steps:
        return
    try:
        rows = unpack(trace)  # narrate reads rows; its sentences go back into the wire's steps
    except (KeyError, ValueError, TypeError) as e:  # a trace the contract allows but no tracer writes
        trace.setdefault("notes", []).append(f"No narration for this trace: {type(e).__name__}.")
        return
    narrate(rows)  # never raises: a failure costs the narration, said in the notes
    for step, told in zip(steps, rows["steps"], strict=True):
        step["explanation"], step["links"] = told["explanation"], told["links"]
    if rows.get("notes") is not trace.get("notes"):  # narration's own failure note
        trace["notes"] = rows["notes"]


def _status(trace: dict, observed: Observed) -> None:
    status, error = trace.get("status"), trace.get("error")
    claimed = trace.get("limit")
    if claimed is not None:
        trace["limit"] = None  # set again only where the server says so
        if claimed not in limit_advice.SETTINGS:  # never the run's words in a sentence of the server's
            claimed = "unknown"
    if error is not None:
        error.pop("reported", None)  # only ever the server's to set, from what the run said
    if status not in TRACER_STATUSES or (status == "limit" and error is None):
        _refused(trace, f"says it ended as {status!r}{f' ({claimed})' if claimed else ''}")
        return
    if status != "limit":
        return
    steps = len(trace.get("steps") or [])
    # a limit the sandbox saw: the server's sentence replaces the run's (which adds nothing to it)
    if claimed in SELF_STOPS and observed.saw_stop(claimed):
        trace["limit"] = claimed
        error["message"] = limit_advice.time_stop(
            error, claimed, observed.value(claimed), observed.used(claimed), steps
        )
        error["type"] = "limit"
    elif claimed == "memory" and observed.memory_mb and limit_advice.out_of_memory(error):
        trace["limit"] = "memory"
        error["message"] = limit_advice.memory_stop(error, observed.memory_mb, steps, _largest(trace))
    else:
        _refused(trace, f"says it stopped at the {claimed} limit, which the sandbox did not see")


def _refused(trace: dict, what: str) -> None:
    """A status the tracer could not have written: the run ends as ``crashed`` in the server's words
    (its steps kept as its facts), what the run said kept as its own."""
    error = trace.get("error") or {}
    said = error.get("message") or ""
    trace["status"] = "crashed"
    trace["error"] = {
        "type": "crashed",
        "message": f"The run's trace {what}: gradstep cannot vouch for how it ended.",
        "line": error.get("line") if isinstance(error.get("line"), int) else None,
        "reported": said[:REPORTED_MAX] or None,
    }


def _largest(trace: dict) -> str:
    """What a smaller size of the same code shrinks first: the largest tensors the steps name."""
    seen: dict[str, list[int]] = {}
    for step in trace.get("steps") or ():
        tensors = step.get("tensors") or {}
        for name, shape in zip(tensors.get("name") or (), tensors.get("shape") or (), strict=False):
            seen.setdefault(name, shape)
    return limit_advice.largest(seen.items())
