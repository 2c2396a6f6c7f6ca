"""``POST /api/trace``: run a snippet in the sandbox and return its trace."""

from __future__ import annotations

import functools
import threading
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field, field_validator

from gradstep.encoding import json_response
from gradstep.limits import Metered
from gradstep.routes import deps
from gradstep.runs import Cancelled
from gradstep.runspec import TraceOptions  # the run options' one model (the job's, Limits' fields)
from gradstep.schema import Trace
from gradstep.traces import TraceService

MAX_CODE = 60_000  # characters of a snippet

router = APIRouter()


class TraceRequest(BaseModel):
    model_config = {"extra": "forbid"}

    code: Annotated[str, Field(max_length=MAX_CODE, description="The PyTorch snippet to run.")]
    options: TraceOptions | None = None

    @field_validator("code")
    @classmethod
    def no_nul(cls, code: str) -> str:
        if "\x00" in code:
            raise ValueError("code must not contain NUL characters")
        return code


@router.post(
    "/api/trace",
    summary="Run a snippet and return its trace",
    # The trace is validated once, when the child's bytes arrive (gradstep.runs), and served as
    # those bytes, compressed once (gradstep.encoding): declared here for OpenAPI, never
    # re-validated or re-compressed per response.
    response_class=Response,
    responses={
        200: {"description": "The trace; its `status` says how the run ended.", "model": Trace},
        404: {"description": "With `X-Gradstep-Cached-Only: 1`: the trace is not cached (nothing was run)"},
        413: {"description": "Body too large"},
        422: {"description": "Invalid request, or code too costly to read before running it"},
        429: {"description": "Rate limit (runs, or bytes sent): retry after Retry-After seconds"},
        499: {"description": "The client went away before the trace was ready (nobody reads this)"},
        503: {"description": "All workers busy and the queue full: retry after Retry-After seconds"},
    },
)
async def trace(
    body: TraceRequest,
    request: Request,
    service: Annotated[TraceService, Depends(deps.service)],
    client: Annotated[str, Depends(deps.client_of)],
    gone: Annotated[threading.Event, Depends(deps.client_gone)],
) -> Response:
    options = (body.options or TraceOptions()).model_dump()
    # an /embed framed by another origin asks so before it runs a link's code without a click
    cached_only = request.headers.get("x-gradstep-cached-only") == "1"
    try:
        answer = await service.trace(body.code, options, client, gone, cached_only)
    except Cancelled:
        return Response(status_code=499)  # nobody is listening: nginx's "client closed request"
    headers = {}
    if deps.is_local(request):  # a hit is a tell (someone ran this code, recently): never a stranger's
        headers["X-Gradstep-Cache"] = answer.how
        if answer.timings:
            headers["Server-Timing"] = answer.server_timing()
    accept = request.headers.get("accept-encoding", "")
    keep = functools.partial(service.keep, answer.key)
    response = await json_response(answer.stored, accept, headers, keep=keep)
    # what is sent is paid for by its bytes, past what the request's price paid (traces.SEND_BYTES)
    return Metered(response, answer.paid_bytes, functools.partial(service.pay_sent, client))
