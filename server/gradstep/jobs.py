"""What the sandboxed child runs for the server (the sandbox's target): trace a snippet, or check fixes.

Everything derived from a run that can cost much is computed here, in the child, under the run's
own CPU, memory and wall limits — never in the server:

* a **trace** job records the snippet (facts only: the server writes every sentence, gradstep.voice)
  and, when the run shows a known mistake,
  puts the rules' proposals in the trace's ``diagnoses``: unverified, only so that the server
  knows which fixes to run (it runs them itself, and never shows a proposal);
* a **check** job gets a trace and the traces of the fix runs the server made for it, and
  returns the diagnoses with the fixes that passed (``gradstep.diagnose.check``). No snippet
  runs in a check job's child;
* a **propose** job gets a trace the server kept (a fix's verified run, served to Apply fix) and
  returns the rules' proposals for it: the fixes to run next come from the rules, in a child
  where no snippet ran, never from what a cache holds.

``spec`` (gradstep.runspec.RunSpec) is what the run is traced under: its caps and the request's
options, the ``Limits`` fields among them set in the tracer. ``cpu_seconds`` lowers the run's CPU
limit below the sandbox's (a fix run's share of its request's budget; a check's own small limit).
"""

from __future__ import annotations

import math
import os
import resource
import signal
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field

from gradstep.columns import pack, unpack
from gradstep.diagnose import check, propose
from gradstep.diagnose.service import may_need_diagnosis
from gradstep.runspec import RunSpec
from gradstep.schema import SERVER_FIELDS
from gradstep.tracer import record
from gradstep.tracer.limits import Limits

PROPOSE_CPU_SECONDS = 2.0  # CPU the proposals may take after the snippet, within the run's own limit
MAX_PROPOSING_TRACE = 6 << 20  # bytes: a larger trace gets no proposals (they would crowd the output cap)

T = TypeVar("T")


class CheckInput(BaseModel):
    trace: dict[str, Any] = Field(description="The run's trace, as the wire has it (checked by the server)")
    fixes: list[tuple[str, dict[str, Any]]] = Field(
        description="(code, trace) of each fix run the server made, as the wire has them"
    )


class Job(BaseModel):
    """The payload the server sends a child (gradstep.runspec.job_payload): a trace job (``code``),
    a check job (``check``) or a propose job (``propose``), each with the spec it runs under."""

    model_config = ConfigDict(extra="forbid")

    spec: RunSpec
    code: str = ""
    check: CheckInput | None = None
    propose: dict[str, Any] | None = Field(
        None, description="A kept trace, as the wire has it, to propose fixes for"
    )
    cpu_seconds: Annotated[int, Field(ge=1)] | None = None


def run(payload: str) -> bytes:
    job = Job.model_validate_json(payload)
    if job.cpu_seconds is not None:
        lower_cpu_limit(job.cpu_seconds)
    if job.check is not None:
        fixes = {code: unpack(fixed) for code, fixed in job.check.fixes}
        return orjson.dumps(check(unpack(job.check.trace), fixes))
    if job.propose is not None:
        kept = unpack(job.propose)
        return orjson.dumps(
            (may_need_diagnosis(kept) and within_cpu(PROPOSE_CPU_SECONDS, lambda: propose(kept))) or []
        )
    limits = Limits.sandboxed(**job.spec.limits())
    trace = record(job.code, limits)  # facts only: the server writes the narration (gradstep.voice)
    body = _result(trace)
    if len(body) <= MAX_PROPOSING_TRACE and may_need_diagnosis(trace):
        proposals = within_cpu(PROPOSE_CPU_SECONDS, lambda: propose(trace))
        if proposals:
            trace["diagnoses"] = proposals
            body = _result(trace)
    return body


def _result(trace: dict) -> bytes:
    """The trace as the child returns it: its tables as columns, without the fields the server
    writes in (it would overwrite them: gradstep.checker), the submitted code the largest of them,
    and without its notes (the server writes them from ``uses``: gradstep.voice)."""
    kept = {k: v for k, v in trace.items() if k not in SERVER_FIELDS and k != "notes"}
    return orjson.dumps(pack(kept), default=repr)


def cpu_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def lower_cpu_limit(seconds: int) -> None:
    """At most ``seconds`` more CPU for this process (RLIMIT_CPU: SIGXCPU, then SIGKILL a second
    later; SIGKILL at once for a PID namespace's pid 1, which ignores SIGXCPU: gradstep.sandbox)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_CPU)
    new = math.ceil(cpu_used()) + seconds
    if soft == resource.RLIM_INFINITY or new < soft:
        hard = new if os.getpid() == 1 else new + 1
        resource.setrlimit(resource.RLIMIT_CPU, (new, hard))  # new < soft <= hard: only ever lower


class _OutOfTime(BaseException):  # not an Exception: the rules' own `except Exception` must not swallow it
    pass


def within_cpu(seconds: float, work: Callable[[], T]) -> T | None:
    """``work()``, or None when it takes more than ``seconds`` of CPU (or than the run has left)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_CPU)
    if soft != resource.RLIM_INFINITY:
        seconds = min(seconds, soft - cpu_used() - 0.5)  # keep the trace: never run into the run's own limit
    if seconds < 0.05:
        return None

    def stop(signum, frame):
        raise _OutOfTime

    previous = signal.signal(signal.SIGPROF, stop)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        return work()
    except _OutOfTime:
        return None
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
