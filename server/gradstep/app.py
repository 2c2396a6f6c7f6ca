"""The web API: routes, validation and limits. Tracing happens in the sandbox."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Annotated

import anyio
import orjson
import torch
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, field_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from gradstep import snippets
from gradstep.cache import cache_key, fix_run_key, open_cache
from gradstep.confinement import require_confinement, required_layers
from gradstep.embed import mount_embed
from gradstep.limits import Admission, BodyLimit, RateLimiter, retry_after
from gradstep.pages import mount_pages
from gradstep.runner import TraceRunner
from gradstep.schema import VERSION, json_schema
from gradstep.settings import Settings

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


class Health(BaseModel):
    status: str
    version: int
    torch: str
    workers: int
    running_or_queued: int
    cache: dict
    sandbox: dict


def create_app(settings: Settings | None = None, runner: TraceRunner | None = None) -> FastAPI:
    settings = settings or Settings.from_env()
    runner = runner or TraceRunner(settings)
    required_layers(settings.require_layers)  # a misspelt layer fails here, before the zygote starts
    cache = open_cache(settings)
    rate = RateLimiter(settings.rate, settings.burst)
    admission = Admission(settings.workers + settings.queue)
    threads = anyio.CapacityLimiter(settings.workers + settings.queue)
    in_flight: dict[str, asyncio.Future] = {}  # identical requests share one run

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

    def client_of(request: Request) -> str:
        if settings.trust_proxy:
            forwarded = request.headers.get("x-forwarded-for")
            if forwarded:
                return forwarded.split(",")[0].strip()
        return request.client.host if request.client else "?"

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
    async def trace(body: TraceRequest, request: Request) -> Response:
        options = (body.options or TraceOptions()).model_dump()
        key = cache_key(body.code, options)
        cached = await cache.get(key)
        if cached is not None:
            return _json(cached, cache="hit")
        wait = rate.acquire(client_of(request))
        if wait > 0:
            raise HTTPException(
                429, "Too many runs from this client: slow down.", {"Retry-After": retry_after(wait)}
            )
        shared = in_flight.get(key)
        if shared is not None:
            return _json(await asyncio.shield(shared), cache="shared")
        if not admission.enter():
            raise HTTPException(503, "All workers are busy: try again shortly.", {"Retry-After": "2"})
        future = asyncio.get_running_loop().create_future()
        in_flight[key] = future
        try:
            payload = orjson.dumps({"code": body.code, "options": options}).decode()
            # A fix that diagnoses verified, asked for by Apply fix: its run is in the cache
            # (shared by every replica) and needs no second run in the sandbox.
            verified = await cache.get(fix_run_key(body.code, options))
            fix_runs: dict[str, bytes] = {}
            out, cacheable = await anyio.to_thread.run_sync(
                functools.partial(runner.trace_bytes, body.code, payload, verified, fix_runs), limiter=threads
            )
            if cacheable:
                await cache.put(key, out)
            for fix_code, fix_body in fix_runs.items():
                await cache.put(fix_run_key(fix_code, options), fix_body)
            future.set_result(out)
            return _json(out, cache="miss" if verified is None else "verified")
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # retrieved: waiters get it; no "never retrieved" warning
            raise
        finally:
            admission.leave()
            in_flight.pop(key, None)

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
            running_or_queued=admission.inside,
            cache=cache.stats(),
            sandbox=sandbox,
        )

    mount_embed(app, settings.frame_ancestors)
    mount_pages(app)

    app.state.settings, app.state.runner, app.state.cache = settings, runner, cache
    app.state.admission = admission
    return app


def _json(body: bytes, cache: str) -> Response:
    return Response(body, media_type="application/json", headers={"X-Gradstep-Cache": cache})


def _printable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
