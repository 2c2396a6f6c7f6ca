"""The trace cache: identical code and options give the identical trace.

Keyed by a hash of code, options, trace version and torch version. Only
complete results are kept: a timeout or a memory limit can depend on the load
of the moment. In-process by default (``MemoryCache``); with
``GRADSTEP_CACHE_URL=redis://…`` an in-process tier sits in front of a Redis
shared by every replica (``TieredCache``), and a Redis outage is a miss.

Entries are the traces as served, compressed (``gradstep.encoding``: brotli, and gzip once a
client needed it; the shared cache keeps brotli, signed with ``GRADSTEP_CACHE_SECRET``). Every
cache has ``await get(key, expect=None) -> bytes | None``, ``await put(key, body)``,
``refresh(key, body)`` (a new stored form of an entry this process holds, e.g. with gzip added;
never the shared cache), ``await close()`` and ``stats() -> dict`` (for /healthz). ``expect``:
fields the trace must hold (the server's, ``runs.served_fields(code)``), checked on what the
shared cache returns, which is then kept locally; this process's own entries are not checked
again. The runs that verified a diagnosis's fixes are kept there too, under ``fix_run_key``.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

import orjson
import torch

from gradstep.cache.memory import MemoryCache
from gradstep.cache.shared import RedisCache
from gradstep.schema import VERSION
from gradstep.settings import Settings


class TraceCache(Protocol):
    kind: str

    async def get(self, key: str, expect: dict | None = None) -> bytes | None: ...

    async def put(self, key: str, body: bytes) -> None: ...

    def refresh(self, key: str, body: bytes) -> None: ...

    async def close(self) -> None: ...

    def stats(self) -> dict: ...


def cache_key(code: str, options: dict, caps: dict | None = None) -> str:
    """An entry's key: the run's code and options, the server's caps that change what a run says
    (``Settings.result_caps``), and what makes another gradstep or torch read it otherwise."""
    blob = orjson.dumps(
        # "stored": what an entry holds (gradstep.encoding; signed in the shared cache), so no server
        # reads another's format: a rolling upgrade's replicas miss each other's entries, never reject them
        {
            "code": code,
            "options": options,
            "caps": caps or {},
            "v": VERSION,
            "torch": torch.__version__,
            "stored": "br+hmac+expiry",
        },
        option=orjson.OPT_SORT_KEYS,
    )
    return hashlib.sha256(blob).hexdigest()


FIX_RUN = "fix-run:"  # the prefix of a fix run's key: FIX_RUN + the code's own cache_key


def fix_run_key(code: str, options: dict, caps: dict | None = None) -> str:
    """Where the run that verified a fix (without its own diagnoses) is kept: Apply fix asks for
    exactly that run next, and whichever replica takes it need not run the fix again."""
    return FIX_RUN + cache_key(code, options, caps)


class TieredCache:
    """This process's memory first, then the shared cache (whose hits are kept locally too)."""

    kind = "memory+redis"

    def __init__(self, local: MemoryCache, shared: RedisCache):
        self.local, self.shared = local, shared

    async def get(self, key: str, expect: dict | None = None) -> bytes | None:
        body = self.local.get_now(key)
        if body is None:
            body = await self.shared.get(key, expect)
            if body is not None:
                self.local.put_now(key, body)
        return body

    async def put(self, key: str, body: bytes) -> None:
        # Awaited (bounded by the shared cache's timeout), so the next request, whichever
        # replica takes it, finds the trace.
        self.local.put_now(key, body)
        await self.shared.put(key, body)

    def refresh(self, key: str, body: bytes) -> None:
        self.local.refresh(key, body)

    async def close(self) -> None:
        await self.shared.close()

    def stats(self) -> dict:
        return {**self.local.stats(), "kind": self.kind, "shared": self.shared.stats()}


def open_cache(settings: Settings) -> TraceCache:
    local = MemoryCache(settings.cache_bytes, settings.cache_ttl)
    if not settings.cache_url:
        return local
    shared = RedisCache(
        settings.cache_url,
        settings.cache_ttl,
        settings.cache_entry_bytes,
        settings.cache_secret.encode(),
        timeout=settings.cache_timeout,
    )
    return TieredCache(local, shared)


__all__ = [
    "FIX_RUN",
    "MemoryCache",
    "RedisCache",
    "TieredCache",
    "TraceCache",
    "cache_key",
    "fix_run_key",
    "open_cache",
]
