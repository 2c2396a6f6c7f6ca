"""Embeds: the ``/embed`` page (the stepper with minimal chrome, for an ``<iframe>``), oEmbed
documents, security headers; ``gradstep.routes.embed`` serves ``/embed`` and ``/oembed``.

``/embed`` may be framed by the pages the ``frame_ancestors`` setting names (a CSP source list,
default ``*``); every other response says ``frame-ancestors 'self'`` and ``X-Frame-Options``.
Every response carries a Content-Security-Policy (``PAGE_POLICY``: no inline script). URLs the
server writes (oEmbed, discovery links) start with the public URL setting, never the Host header.
The snippet's code travels in the URL fragment (``/embed#code=…``): it never reaches the server,
so the page itself decodes it (frontend/embed-page.js). docs/embed.md describes the parameters,
the frame's messages and oEmbed.
"""

from __future__ import annotations

import html
import re
from typing import Literal
from urllib.parse import parse_qsl, urlencode, urlsplit

from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gradstep import snippets
from gradstep.pages import Frontend, script_json
from gradstep.permalink import decode_code

THEMES = ("light", "dark", "auto")
EDITOR_MODES = ("hidden", "readonly", "editable")
DEFAULT_SIZE = (800, 600)  # width, height of an oEmbed iframe when the consumer sets no maximum
MAX_OEMBED_URL = 8000  # characters of oEmbed's `url`: the code comes with it
# A size or step as oEmbed consumers write it: ASCII digits, a few of them (str.isdigit also takes
# "²" and other scripts' digits, and int() of 5,000 digits raises: both were a 500).
_WHOLE = re.compile(r"[0-9]{1,9}")
# One CSP frame-ancestors source: a keyword, a scheme, or [scheme://]host[:port] with an optional *. prefix
_SOURCE = re.compile(
    r"^(\*|'self'|'none'|[a-z][a-z0-9+.-]*:|([a-z][a-z0-9+.-]*://)?(\*\.)?[a-z0-9-]+(\.[a-z0-9-]+)*(:(\d{1,5}|\*))?)$",
    re.IGNORECASE,
)


def parse_frame_ancestors(value: str) -> list[str]:
    """The setting's sources; ValueError (said at startup) for anything that is not a CSP source."""
    sources = value.split()
    if not sources:
        raise ValueError("GRADSTEP_FRAME_ANCESTORS is empty: use * (any page), 'self', or origins.")
    for s in sources:
        if not _SOURCE.match(s):
            raise ValueError(
                f"GRADSTEP_FRAME_ANCESTORS: {s!r} is not a frame-ancestors source "
                "(use *, 'self', 'none', https:, https://example.edu or https://*.example.edu)."
            )
    if "'none'" in sources and len(sources) > 1:
        raise ValueError("GRADSTEP_FRAME_ANCESTORS: 'none' cannot be combined with other sources.")
    return sources


# Every page: scripts only from this origin's files (no inline script, no eval), nothing from
# elsewhere. Inline styles stay allowed: the graph and the editor set element styles.
PAGE_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'"
)


class SecurityHeaders:
    """A Content-Security-Policy on every response (a route may set its own: frame-ancestors is
    added to it), with frame-ancestors from the setting for /embed and 'self' (and XFO) elsewhere."""

    def __init__(self, app: ASGIApp, frame_ancestors: list[str]) -> None:
        self.app = app
        self.embed_policy = "frame-ancestors " + " ".join(frame_ancestors)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        embed = scope["path"] == "/embed"

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                frame = self.embed_policy if embed else "frame-ancestors 'self'"
                own = headers.get("content-security-policy") or PAGE_POLICY
                headers["Content-Security-Policy"] = f"{own}; {frame}"
                headers["X-Content-Type-Options"] = "nosniff"
                if not embed:
                    headers["X-Frame-Options"] = "SAMEORIGIN"  # browsers without CSP level 2
            await send(message)

        await self.app(scope, receive, send_with_headers)


class OEmbed(BaseModel):
    """An oEmbed 1.0 "rich" response (https://oembed.com/)."""

    version: Literal["1.0"] = "1.0"
    type: Literal["rich"] = "rich"
    provider_name: str = "gradstep"
    provider_url: str
    title: str
    html: str
    width: int
    height: int
    cache_age: int = 3600


def _positive(name: str, raw: str | None) -> int | None:
    if raw is None or raw == "":
        return None
    if not _WHOLE.fullmatch(raw) or int(raw) < 1:
        raise HTTPException(400, f"{name} must be a positive whole number of pixels, not {raw[:20]!r}.")
    return int(raw)


def _embed_target(url: str, base: str) -> tuple[str, str]:
    """The /embed URL and a title for a gradstep app or embed URL; 404 with the reason otherwise."""
    if len(url) > MAX_OEMBED_URL:
        raise HTTPException(
            404, f"The URL is too long for oEmbed ({len(url)} characters; at most {MAX_OEMBED_URL})."
        )
    parts = urlsplit(url)
    here = urlsplit(base)
    if (
        parts.scheme not in ("http", "https")
        or parts.netloc != here.netloc
        or parts.path not in ("", "/", "/embed")
    ):
        raise HTTPException(404, f"Not a gradstep URL of this server ({base}/ or {base}/embed): {url[:200]}")
    query = dict(parse_qsl(parts.query))
    fragment = dict(parse_qsl(parts.fragment))
    params = {**query, **fragment}  # fragment parameters override query ones, as in the page
    shown: dict[str, str] = {}
    for key, allowed in (("theme", THEMES), ("editor", EDITOR_MODES)):
        if key in params:
            if params[key] not in allowed:
                raise HTTPException(404, f"Unknown {key} {params[key][:20]!r}: use {', '.join(allowed)}.")
            shown[key] = params[key]
    if params.get("autoplay") in ("1", "true", "yes"):
        shown["autoplay"] = "1"
    step = params.get("step", "")
    if step and not _WHOLE.fullmatch(step):
        raise HTTPException(404, f"The step {step[:20]!r} is not a whole number.")
    if "code" in params:
        try:
            code = decode_code(params["code"])
        except ValueError as e:
            raise HTTPException(404, str(e)) from None
        lines = code.count("\n") + (not code.endswith("\n"))
        title = f"gradstep: a PyTorch snippet ({lines} line{'s' if lines != 1 else ''})"
        tail = {"code": params["code"], **({"step": step} if step else {})}
        return f"{base}/embed?{urlencode(shown)}#{urlencode(tail)}".replace("?#", "#"), title
    name = params.get("snippet")
    found = snippets.load_all().get(name or "")
    if found is None:
        raise HTTPException(
            404,
            f"No snippet named {name!r} (GET /api/snippets lists them)."
            if name
            else "The URL names no snippet and carries no code (#code=…).",
        )
    query_out = {"snippet": name, **({"step": step} if step else {}), **shown}
    return f"{base}/embed?{urlencode(query_out)}", f"gradstep: {found.title}"


def frame_parents(frame_ancestors: str) -> list[str] | None:
    """Who may message the frame: any parent (None) when framing is open, else the pages that may frame it."""
    sources = parse_frame_ancestors(frame_ancestors)
    return None if "*" in sources else [s for s in sources if s != "'none'"]


def embed_page(
    request: Request,
    frontend: Frontend,
    public: str,
    parents: list[str] | None,
    run_origins: list[str] | None = None,
) -> HTMLResponse:
    """``/embed``: the stepper for a frame, a named snippet's code already in its config.
    ``run_origins``: the framing pages that may have a link's code run without a click."""
    listed = [{"name": s.name, "title": s.title} for s in snippets.load_all().values()]
    found = snippets.load_all().get(request.query_params.get("snippet", ""))
    config = {
        "api": "",
        "version": frontend.version,
        "snippets": listed,
        "parents": parents,
        "runOrigins": [o.rstrip("/") for o in run_origins or []],
    }
    if found is not None:
        config["code"] = {found.name: found.code}  # one request fewer per reader of a snippet embed
    return frontend.page(
        request,
        "embed.html",
        public,
        title=f"gradstep: {found.title}" if found else "gradstep",
        config_json=script_json(config),
    )


def oembed(url: str, maxwidth: str | None, maxheight: str | None, format: str, public: str) -> OEmbed:
    """The oEmbed document of a gradstep URL: an iframe of its /embed (URLs based on ``public``)."""
    if format == "xml":
        raise HTTPException(501, "format=xml is not implemented: use format=json.")
    if format != "json":
        raise HTTPException(400, f"format={format[:20]!r} is not an oEmbed format: use format=json.")
    max_w, max_h = _positive("maxwidth", maxwidth), _positive("maxheight", maxheight)
    src, title = _embed_target(url, public)
    width = min(DEFAULT_SIZE[0], max_w or DEFAULT_SIZE[0])
    height = min(DEFAULT_SIZE[1], max_h or DEFAULT_SIZE[1])
    frame = (
        f'<iframe src="{html.escape(src)}" width="{width}" height="{height}" title="{html.escape(title)}"'
        ' style="border:0;max-width:100%" loading="lazy" allow="clipboard-write"></iframe>'
    )
    return OEmbed(provider_url=public + "/", title=title, html=frame, width=width, height=height)
