"""A run's spec: everything a run's result depends on besides its code, as one immutable value.

The server's caps come from ``Settings`` (validated there, at start-up) into a ``RunSpec`` once
(``RunSpec.of``); a request's options (``TraceOptions``, the request model itself) are added to it
per request (``with_options``). The spec then goes one way only:

* to the child, whole, inside every job (``job_payload``: a run, its fix runs, a check, a propose);
* into the cache key (``caps`` and the options): replicas sharing a cache with other caps never
  serve each other's traces.

Each cap is used where its name says: a ``Limits`` field (the tracer's caps, in the child) is set
from it in every job (``limits``); a ``SandboxConfig`` field (the sandbox's own, in the server) is
set from it when the sandbox is made (``sandbox_fields``); ``fix_budget`` is the request's budget
for fix runs (gradstep.runs.RunBudget). A new cap is a ``Settings`` field (default, range) and a
field here of the same name: tests/server/test_runspec.py checks that each reaches one of these.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from gradstep.sandbox.config import SandboxConfig
from gradstep.tracer.limits import Limits

LIMITS_FIELDS = frozenset(f.name for f in dataclasses.fields(Limits))
SANDBOX_FIELDS = frozenset(f.name for f in dataclasses.fields(SandboxConfig))
SERVER_USED = frozenset({"fix_budget"})  # caps the server itself applies (gradstep.runs)


class TraceOptions(BaseModel):
    """What a request may choose about its run (``POST /api/trace``'s ``options``): each field is a
    ``Limits`` field of the same name and default, set from it in the child."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_steps: Annotated[int, Field(ge=1, le=500)] = 500
    line_repeats: Annotated[int, Field(ge=1, le=50)] = 3


class RunSpec(BaseModel):
    """The server's caps (one field per ``Settings`` field of the same name) and the request's options."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    wall_seconds: float = Field(description="Per run, from request to result (SandboxConfig)")
    cpu_seconds: int = Field(description="Per run: RLIMIT_CPU (SandboxConfig)")
    memory_mb: int = Field(description="Per run: memory cgroup and RLIMIT_DATA (SandboxConfig)")
    fix_budget: float = Field(description="Seconds of wall time and CPU of one request's fix runs together")
    options: TraceOptions = TraceOptions()

    @classmethod
    def of(cls, settings: Any, options: dict | TraceOptions | None = None) -> RunSpec:
        """The spec of ``settings`` (a ``Settings``: its values are validated there)."""
        caps = {name: getattr(settings, name) for name in cls.cap_names()}
        return cls(**caps, options=_options(options))

    @classmethod
    def cap_names(cls) -> tuple[str, ...]:
        return tuple(name for name in cls.model_fields if name != "options")

    def with_options(self, options: dict | TraceOptions | None) -> RunSpec:
        """This spec for a request with ``options`` (a dict is checked against ``TraceOptions``)."""
        return self.model_copy(update={"options": _options(options)})

    def caps(self) -> dict:
        """The caps, as the cache key has them."""
        return {name: getattr(self, name) for name in self.cap_names()}

    def limits(self) -> dict:
        """The ``Limits`` fields this spec sets (the child's tracer caps)."""
        values = {**self.caps(), **self.options.model_dump()}
        return {name: value for name, value in values.items() if name in LIMITS_FIELDS}

    def sandbox_fields(self) -> dict:
        """The ``SandboxConfig`` fields this spec sets."""
        return {name: value for name, value in self.caps().items() if name in SANDBOX_FIELDS}


def _options(options: dict | TraceOptions | None) -> TraceOptions:
    if isinstance(options, TraceOptions):
        return options
    return TraceOptions.model_validate(options or {})


def job_payload(spec: RunSpec, *, cpu_seconds: int | None = None, **job: Any) -> str:
    """The payload of every job the server sends a child (a run, a fix run, a check, a propose):
    the job's own part (``code=``, ``check=``, ``propose=``; JSON already made as ``orjson.Fragment``)
    and the spec it runs under. ``cpu_seconds``: this job's CPU, below the spec's (a fix run's share
    of its request's budget, a check's own small limit)."""
    body = {**job, "spec": spec.model_dump()}
    if cpu_seconds is not None:
        body["cpu_seconds"] = cpu_seconds
    return orjson.dumps(body).decode()
