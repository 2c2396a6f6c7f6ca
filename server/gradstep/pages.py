"""The browser front end: its files (served under ``/static``), the app's page from a jinja2
template, Swagger UI's page; ``gradstep.routes.pages`` serves the pages.

The front end's files live in the repository's ``frontend/`` (plain ES modules,
CSS, and ``vendor/`` with the bundled npm libraries, committed so no node is
needed). ``pip install .`` copies them to ``share/gradstep/frontend`` (see
``[tool.setuptools.data-files]``); they are looked up like the snippets:
``$GRADSTEP_FRONTEND``, the repository, then that installed copy.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from fastapi import Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from gradstep import snippets
from gradstep.permalink import discovery_href
from gradstep.settings import Settings

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


def public_url(settings: Settings) -> str:
    """The base of every URL the server writes for others to open: GRADSTEP_PUBLIC_URL, else this
    server's own address from its settings. Never the request's Host header, which anyone can set."""
    if settings.public_url:
        url = settings.public_url.rstrip("/")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or parts.query:
            raise ValueError(
                f"GRADSTEP_PUBLIC_URL must be like https://gradstep.example.edu (no path), not {url!r}"
            )
        return url
    host = "localhost" if settings.host in ("0.0.0.0", "::", "") else settings.host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{settings.port}"


@dataclass(frozen=True)
class Frontend:
    """The front end as the server found it at startup: its folder (None: not found), the version
    of its files (the ``?v=`` that busts caches), the page templates."""

    folder: Path | None
    version: str
    templates: Jinja2Templates

    @classmethod
    def find(cls) -> Frontend:
        folder = frontend_dir()
        version = _version(folder) if folder else "none"
        return cls(folder, version, Jinja2Templates(directory=str(TEMPLATES)))

    def page(self, request: Request, template: str, public: str, **context) -> HTMLResponse:
        """A page from its template with what every page has: the URLs of its files and, for a
        snippet's URL, the link CMSs follow to its oEmbed (based on ``public``)."""
        context["static"] = f"/static/{{path}}?v={self.version}"
        context["oembed_href"] = discovery_href(public, request.url.path, request.url.query)
        return self.templates.TemplateResponse(request, template, context)


def app_page(request: Request, frontend: Frontend, public: str, api_docs: bool) -> HTMLResponse:
    """The app (``/``): the snippets and the config the page starts from."""
    listed = [s.model_dump() for s in snippets.load_all().values()]
    config = {"api": "", "default": DEFAULT_SNIPPET, "version": frontend.version}
    return frontend.page(
        request,
        "index.html",
        public,
        v=frontend.version,
        snippets_json=script_json(listed),
        config_json=script_json(config),
        api_docs="/docs" if api_docs else "/openapi.json",
    )


@functools.cache
def swagger_page(openapi_url: str, title: str) -> tuple[str, str]:
    """Swagger UI's page and its policy. Its script and CSS come from a CDN, so this page alone
    allows that CDN, and its one inline script by hash."""
    page = get_swagger_ui_html(openapi_url=openapi_url, title=title)
    html = bytes(page.body).decode()
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
        for s in re.findall(r"<script>(.*?)</script>", html, re.DOTALL)
    )
    cdn = "https://cdn.jsdelivr.net"
    policy = (
        f"default-src 'self'; script-src {cdn} {hashes}; style-src {cdn} 'unsafe-inline'; "
        "img-src 'self' data: https://fastapi.tiangolo.com; object-src 'none'; base-uri 'none'"
    )
    return html, policy


def script_json(value) -> str:
    """JSON for a page's ``<script type="application/json">``: with these replacements no
    ``</script>`` (or ``<!--``) can appear inside it."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
