"""The browser front end: ``/`` from a jinja2 template, the ES modules under ``/static``.

The front end's files live in the repository's ``frontend/`` (plain ES modules,
CSS, and ``vendor/`` with the bundled npm libraries, committed so no node is
needed). ``pip install .`` copies them to ``share/gradstep/frontend`` (see
``[tool.setuptools.data-files]``); they are looked up like the snippets:
``$GRADSTEP_FRONTEND``, the repository, then that installed copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException

from gradstep import snippets
from gradstep.permalink import discovery_href

TEMPLATES = Path(__file__).resolve().parent / "templates"
SERVED = {".js", ".mjs", ".css", ".svg", ".png", ".woff2", ".json", ".txt"}
HIDDEN = {"node_modules", "vendor-src"}
HIDDEN_FILES = {"package.json", "package-lock.json", "build.mjs"}
DEFAULT_SNIPPET = "backward_twice_fails"


def frontend_dir() -> Path | None:
    """$GRADSTEP_FRONTEND, the repository's frontend/, or the copy `pip install` puts under share/."""
    candidates = [os.environ.get("GRADSTEP_FRONTEND")]
    candidates.append(str(Path(__file__).resolve().parents[2] / "frontend"))
    candidates.append(str(Path(sys.prefix) / "share" / "gradstep" / "frontend"))
    for c in candidates:
        if c and (Path(c) / "app.js").is_file():
            return Path(c)
    return None


class FrontendFiles(StaticFiles):
    """Static files, but only the front end's own (no node_modules, build inputs or dotfiles)."""

    def lookup_path(self, path: str):
        parts = Path(path).parts
        if (
            any(p in HIDDEN or p.startswith(".") for p in parts)
            or (parts and parts[-1] in HIDDEN_FILES)
            or Path(path).suffix not in SERVED
        ):
            return "", None
        return super().lookup_path(path)

    def file_response(self, *args, **kwargs):
        response = super().file_response(*args, **kwargs)
        # Modules import each other by plain URLs: revalidate (ETag) so a new build is never mixed with an old one.
        response.headers["Cache-Control"] = "no-cache"
        return response


def _version(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file() and not (set(p.relative_to(folder).parts) & HIDDEN) and p.suffix in SERVED:
            st = p.stat()
            h.update(f"{p.relative_to(folder)}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:12]


def mount_pages(app: FastAPI) -> None:
    """Serve the app at ``/`` and its files at ``/static``."""
    folder = frontend_dir()
    templates = Jinja2Templates(directory=str(TEMPLATES))
    version = _version(folder) if folder else "none"
    if folder is not None:
        app.mount("/static", FrontendFiles(directory=str(folder)), name="static")

    @app.get("/", include_in_schema=False, response_class=HTMLResponse)
    def index(request: Request) -> HTMLResponse:
        if folder is None:
            raise StarletteHTTPException(
                503, "The front end's files were not found (set GRADSTEP_FRONTEND to the frontend/ folder)."
            )
        listed = [s.model_dump() for s in snippets.load_all().values()]
        config = {"api": "", "default": DEFAULT_SNIPPET, "version": version}
        return templates.TemplateResponse(
            request,
            "index.html",
            {
                "static": f"/static/{{path}}?v={version}",
                "v": version,
                # </script> cannot appear inside JSON from json.dumps with these replacements
                "snippets_json": _script_json(listed),
                "config_json": _script_json(config),
                "oembed_href": discovery_href(str(request.url)),  # CMSs find /oembed for snippet URLs
            },
        )


def _script_json(value) -> str:
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
