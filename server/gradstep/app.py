"""The web app: its parts assembled (routes from ``gradstep.routes``, middleware, errors as JSON,
the sandbox started and stopped with the app). Tracing happens in the sandbox."""

from __future__ import annotations

import contextlib
import gc

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gradstep.cache import open_cache
from gradstep.embed import SecurityHeaders, parse_frame_ancestors
from gradstep.encoding import GZipWhereAccepted
from gradstep.limits import BodyLimit
from gradstep.pages import Frontend, FrontendFiles, public_url
from gradstep.required_layers import require_confinement, required_layers
from gradstep.routes import api_docs, embed, health, pages, snippets, trace
from gradstep.runs import TraceRunner
from gradstep.schema import VERSION
from gradstep.settings import Settings
from gradstep.traces import TraceService


def create_app(settings: Settings | None = None, runner: TraceRunner | None = None) -> FastAPI:
    settings = settings or Settings.from_env()
    runner = runner or TraceRunner(settings)
    required_layers(settings.require_layers)  # a misspelt layer fails here, before the zygote starts
    public = public_url(settings)
    frame_ancestors = parse_frame_ancestors(settings.frame_ancestors)
    frontend = Frontend.find()
    cache = open_cache(settings)
    service = TraceService(settings, runner, cache)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await anyio.to_thread.run_sync(runner.start)
        await anyio.to_thread.run_sync(service.readers.start)  # the first big snippet waits for none
        # What exists now (torch, the app, the sandbox) lives as long as the server: collections
        # need not walk it again each time, so none of them takes long enough to stall requests.
        gc.freeze()
        try:
            require_confinement(runner.health().get("layers", {}), settings.require_layers)
            yield
        finally:
            await anyio.to_thread.run_sync(runner.close)
            await anyio.to_thread.run_sync(service.readers.close)
            await cache.close()

    app = FastAPI(
        title="gradstep",
        version=str(VERSION),
        description="Step through PyTorch autograd: run a snippet in a sandbox, get its trace.",
        lifespan=lifespan,
        docs_url=None,  # Swagger UI loads from a CDN: only with GRADSTEP_API_DOCS (routes/api_docs.py)
        redoc_url=None,
    )
    app.add_middleware(GZipWhereAccepted, minimum_size=1024)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body)
    app.add_middleware(SecurityHeaders, frame_ancestors=frame_ancestors)

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

    for routes in (trace, snippets, health, embed, pages):
        app.include_router(routes.router)
    if settings.api_docs:
        app.include_router(api_docs.router)
    if frontend.folder is not None:
        app.mount("/static", FrontendFiles(directory=str(frontend.folder)), name="static")

    app.state.settings, app.state.runner, app.state.cache = settings, runner, cache
    app.state.service, app.state.admission = service, service.admission
    app.state.public, app.state.frontend = public, frontend
    return app


def _printable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
