"""``GET /healthz`` and ``GET /api/schema``.

``/healthz`` answers every client what a load balancer needs: whether the server can run snippets
(``status``) and its trace version. The detail (the sandbox's layers, counts, the paths a run's root
holds, the cache) goes only to a local request, from a loopback address with no forwarded header
(an operator on the host, a container's own health check), or to every client with
``GRADSTEP_HEALTH_DETAIL=1``: it told strangers the host's paths and its load."""

from __future__ import annotations

from typing import Annotated

import torch
from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel

from gradstep.cache import TraceCache
from gradstep.routes import deps
from gradstep.runs import TraceRunner
from gradstep.schema import VERSION, json_schema
from gradstep.settings import Settings
from gradstep.traces import TraceService

router = APIRouter()


class SandboxHealth(BaseModel):
    """What /healthz says about the sandbox: states and counts, never a process id."""

    zygote: bool
    layers: dict[str, str]
    # the children's CPU weight: "active" (together one server's worth), else "unavailable: <why>"
    cpu_group: str | None = None
    # what a child's root holds besides /dev's devices, /proc and /tmp ("root" layer)
    visible: list[str] | None = None
    workers: int  # runs at once
    slots: int  # workers + extra slots: spares waiting can be up to this many
    busy: int  # runs holding a slot (at most workers)
    spares: int
    prefork: bool
    starts: int
    zygote_threads: int | None = None
    zygote_huge_pages_mb: float | None = None


class CheckerHealth(BaseModel):
    """The checker processes (gradstep.checker): how many, and how many died (each replaced)."""

    processes: int
    died: int


class PublicHealth(BaseModel):
    """What /healthz tells any client."""

    status: str  # "ok": the sandbox can run snippets; "degraded": it cannot
    version: int


class Health(PublicHealth):
    """What /healthz tells a local client (or any, with the health_detail setting)."""

    torch: str
    workers: int
    running_or_queued: int
    queue: dict  # the runs' fair queue (gradstep.limits.FairQueue.stats)
    reading: dict  # big snippets read before they run: their queue, and the reader processes
    cache: dict
    sandbox: SandboxHealth
    checkers: CheckerHealth


@router.get(
    "/healthz",
    response_model=Health | PublicHealth,
    summary="Liveness; locally also which sandbox layers are active",
)
async def healthz(  # on the event loop: a thread hand-off would wait for the GIL (routes/deps.py)
    request: Request,
    settings: Annotated[Settings, Depends(deps.settings)],
    runner: Annotated[TraceRunner, Depends(deps.runner)],
    service: Annotated[TraceService, Depends(deps.service)],
    cache: Annotated[TraceCache, Depends(deps.cache)],
) -> Health:
    sandbox = runner.health()
    status = "ok" if sandbox.get("zygote") else "degraded"
    if not (settings.health_detail or deps.is_local(request)):
        return PublicHealth(status=status, version=VERSION)
    return Health(
        status=status,
        version=VERSION,
        torch=torch.__version__,
        workers=settings.workers,
        running_or_queued=service.admission.inside,
        queue=service.admission.stats(),
        reading={**service.reading.stats(), "readers": service.readers.stats()},
        cache=cache.stats(),
        sandbox=SandboxHealth.model_validate(sandbox),
        checkers=CheckerHealth.model_validate(runner.checker.health()),
    )


@router.get("/api/schema", summary="JSON Schema of the trace")
def schema() -> dict:
    return json_schema()
