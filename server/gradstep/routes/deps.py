"""Dependencies of the routes: what the app holds (``app.state``) and who is asking.

All ``async``: FastAPI runs a plain ``def`` dependency in its thread pool, and each such hand-off
waits for the GIL, which threads validating and compressing big traces hold for tens of
milliseconds at a time (py-spy: a fifth of the server's GIL time under load was the event loop
handing these one-line lookups to threads)."""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import AsyncIterator

from fastapi import HTTPException, Request

from gradstep.cache import TraceCache
from gradstep.limits import client_key, withdrawn
from gradstep.pages import Frontend
from gradstep.runs import TraceRunner
from gradstep.settings import Settings
from gradstep.traces import TraceService


async def settings(request: Request) -> Settings:
    return request.app.state.settings


async def service(request: Request) -> TraceService:
    return request.app.state.service


async def runner(request: Request) -> TraceRunner:
    return request.app.state.runner


async def cache(request: Request) -> TraceCache:
    return request.app.state.cache


async def public(request: Request) -> str:
    """The base of every URL the server writes for others to open (``pages.public_url``)."""
    return request.app.state.public


async def frontend(request: Request) -> Frontend:
    """The front end's files and templates; a page without them is a 503 that says where to look."""
    found = request.app.state.frontend
    if found.folder is None:
        raise HTTPException(
            503, "The front end's files were not found (set GRADSTEP_FRONTEND to the frontend/ folder)."
        )
    return found


async def client_of(request: Request) -> str:
    """Whom a request's runs are charged to (``limits.client_key``: an IPv4 address, an IPv6 /64):
    the address that connected, or behind a trusted proxy the address that proxy saw: the *last*
    X-Forwarded-For entry, the one it appended (nginx's ``$proxy_add_x_forwarded_for``). Entries
    before it are whatever the client sent, so taking the first would give every request a budget
    of its own choosing."""
    if request.app.state.settings.trust_proxy:
        entries = [e.strip() for h in request.headers.getlist("x-forwarded-for") for e in h.split(",")]
        if entries and entries[-1]:
            return client_key(entries[-1])
    return client_key(request.client.host) if request.client else "?"


_FORWARDED = ("x-forwarded-for", "forwarded", "x-real-ip")
# Starlette's TestClient names its peer so: the app called in this very process, never a network
# peer (an ASGI server gives an address, or none for a Unix socket). Its caller holds the app
# itself, so it is local whatever headers it sends.
IN_PROCESS = "testclient"


def is_local(request: Request) -> bool:
    """A request from this host itself: a loopback peer that no proxy forwarded (a proxy on the same
    host adds its client's address), or the app called in-process. Only such a request is told
    what a stranger must not learn: /healthz's detail, and whether an answer was cached or run and
    what its parts took (``X-Gradstep-Cache``, ``Server-Timing``: whether someone else asked for the
    same code recently, and when)."""
    host = request.client.host if request.client else ""
    if host == IN_PROCESS:
        return True
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
    return loopback and not any(h in request.headers for h in _FORWARDED)


async def client_gone(request: Request) -> AsyncIterator[threading.Event]:
    """Set when the client disconnects: its runs stop, its place in the queue is given back."""
    async with withdrawn(request.receive) as gone:
        yield gone
