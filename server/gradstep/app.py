"""The web API: routes, validation and limits. Tracing happens in the sandbox."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Annotated

import anyio
import torch
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, field_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from gradstep import snippets
from gradstep.cache import open_cache
from gradstep.confinement import require_confinement, required_layers
from gradstep.embed import mount_embed
from gradstep.limits import BodyLimit, withdrawn
from gradstep.pages import mount_api_docs, mount_pages, public_url
from gradstep.runner import Cancelled, TraceRunner
from gradstep.schema import VERSION, json_schema
from gradstep.settings import Settings
from gradstep.traces import TraceService

MAX_CODE = 60_000  # characters of a snippet


class TraceOptions(BaseModel):
    model_config = {"extra": "forbid"}

    max_steps: Annotated[int, Field(ge=1, le=500)] = 500
    line_repeats: Annotated[int, Field(ge=1, le=50)] = 3


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


class SandboxHealth(BaseModel):
    """What /healthz says about the sandbox: states and counts, never a process id."""

    zygote: bool
    layers: dict[str, str]
    # what a child's root holds besides /dev's devices, /proc and /tmp ("root" layer)
    visible: list[str] | None = None
    workers: int
    busy: int
    spares: int
    prefork: bool
    starts: int
    zygote_threads: int | None = None
    zygote_huge_pages_mb: float | None = None


class Health(BaseModel):
    status: str
    version: int
    torch: str
    workers: int
    running_or_queued: int
    cache: dict
    sandbox: SandboxHealth


def client_of(request: Request) -> str:
    """Whom a request's runs are charged to: its address (X-Forwarded-For's first behind a trusted proxy)."""
    if request.app.state.settings.trust_proxy:
        forwarded = request.headers.get("x-forwarded-for")
        if forwarded:
            return forwarded.split(",")[0].strip()
    return request.client.host if request.client else "?"


async def client_gone(request: Request) -> AsyncIterator[threading.Event]:
    """Set when the client disconnects: its runs stop, its place in the queue is given back."""
    async with withdrawn(request.receive) as gone:
        yield gone


def create_app(settings: Settings | None = None, runner: TraceRunner | None = None) -> FastAPI:
    settings = settings or Settings.from_env()
    runner = runner or TraceRunner(settings)
    required_layers(settings.require_layers)  # a misspelt layer fails here, before the zygote starts
    public = public_url(settings)
    cache = open_cache(settings)
    service = TraceService(settings, runner, cache)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await anyio.to_thread.run_sync(runner.start)
        try:
            require_confinement(runner.health().get("layers", {}), settings.require_layers)
            yield
        finally:
            await anyio.to_thread.run_sync(runner.close)
            await cache.close()

    app = FastAPI(
        title="gradstep",
        version=str(VERSION),
        description="Step through PyTorch autograd: run a snippet in a sandbox, get its trace.",
        lifespan=lifespan,
        docs_url=None,  # Swagger UI loads from a CDN: only with GRADSTEP_API_DOCS (mount_api_docs)
        redoc_url=None,
    )
    app.add_middleware(GZipMiddleware, minimum_size=1024)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body)

    @app.exception_handler(RequestValidationError)
    async def readable_422(request: Request, exc: RequestValidationError) -> JSONResponse:
        # Never echo the input back: it may not even be encodable (huge integers,
        # lone surrogates), and the client already has it.
        detail = []
        for err in exc.errors():
            loc = [_printable(str(p)) for p in err.get("loc", ()) if p != "body"]
            detail.append({"loc": loc, "msg": _printable(str(err.get("msg"))), "type": str(err.get("type"))})
        problems = "; ".join(f"{'.'.join(d['loc']) or 'body'}: {d['msg']}" for d in detail)
        return JSONResponse(
            status_code=422, content={"error": "Invalid request: " + problems, "detail": detail}
        )

    @app.exception_handler(StarletteHTTPException)
    async def error_json(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail
        if exc.status_code == 400 and message == "There was an error parsing the body":
            message = "The request body is not valid JSON text (UTF-8)."
        return JSONResponse(status_code=exc.status_code, content={"error": message}, headers=exc.headers)

    @app.post(
        "/api/trace",
        summary="Run a snippet and return its trace",
        response_class=Response,
        responses={
            200: {
                "description": "The trace (see /api/schema); its `status` says how the run ended.",
                "content": {"application/json": {}},
            },
            413: {"description": "Body too large"},
            422: {"description": "Invalid request"},
            429: {"description": "Rate limit: retry after Retry-After seconds"},
            503: {"description": "All workers busy and the queue full: retry after Retry-After seconds"},
        },
    )
    async def trace(
        body: TraceRequest,
        client: Annotated[str, Depends(client_of)],
        gone: Annotated[threading.Event, Depends(client_gone)],
    ) -> Response:
        options = (body.options or TraceOptions()).model_dump()
        try:
            out, how = await service.trace(body.code, options, client, gone)
        except Cancelled:
            return Response(status_code=499)  # nobody is listening: nginx's "client closed request"
        return _json(out, cache=how)

    @app.get("/api/snippets", response_model=list[snippets.SnippetInfo], summary="The curated snippets")
    def list_snippets() -> list[snippets.SnippetInfo]:
        return [snippets.SnippetInfo(**s.model_dump(exclude={"code"})) for s in snippets.load_all().values()]

    @app.get(
        "/api/snippets/{name}", response_model=snippets.Snippet, summary="One curated snippet with its code"
    )
    def get_snippet(name: str) -> snippets.Snippet:
        found = snippets.load_all().get(name)
        if found is None:
            raise HTTPException(404, f"No snippet named {name!r}; GET /api/snippets lists them.")
        return found

    @app.get("/api/schema", summary="JSON Schema of the trace")
    def schema() -> dict:
        return json_schema()

    @app.get("/healthz", response_model=Health, summary="Liveness, and which sandbox layers are active")
    def healthz() -> Health:
        sandbox = runner.health()
        return Health(
            status="ok" if sandbox.get("zygote") else "degraded",
            version=VERSION,
            torch=torch.__version__,
            workers=settings.workers,
            running_or_queued=service.admission.inside,
            cache=cache.stats(),
            sandbox=SandboxHealth.model_validate(sandbox),
        )

    if settings.api_docs:
        mount_api_docs(app)
    mount_embed(app, settings.frame_ancestors, public)
    mount_pages(app, public, api_docs=settings.api_docs)

    app.state.settings, app.state.runner, app.state.cache = settings, runner, cache
    app.state.service, app.state.admission = service, service.admission
    return app


def _json(body: bytes, cache: str) -> Response:
    return Response(body, media_type="application/json", headers={"X-Gradstep-Cache": cache})


def _printable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
