"""Traces are compressed once, when they are made (in a worker thread, never on the event loop),
kept compressed in the cache, and served as those bytes: a cached trace sent to thirty clients is
compressed once, not thirty times.

Level 7: on the 24-layer trace (1 MB) 40 ms for 148 KB, within the 150 KB budget; level 6 is
31 ms for 150.1 KB, level 9 81 ms for 145 KB (``benchmarks/tracer_overhead.py`` prints the sizes).
"""

from __future__ import annotations

import gzip

import anyio
from fastapi.responses import Response

LEVEL = 7


def compress(body: bytes) -> bytes:
    return gzip.compress(body, LEVEL, mtime=0)  # mtime 0: the same trace gives the same bytes


def decompress(stored: bytes) -> bytes:
    return gzip.decompress(stored)


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an Accept-Encoding header allows gzip (``gzip;q=0`` refuses it)."""
    for item in accept_encoding.lower().split(","):
        name, *params = (part.strip() for part in item.split(";"))
        if name in ("gzip", "*"):
            q = next((p[2:] for p in params if p.startswith("q=")), "1")
            try:
                return float(q) > 0
            except ValueError:
                return False
    return False


async def json_response(stored: bytes, accept_encoding: str, headers: dict[str, str]) -> Response:
    """A stored (compressed) trace as the client can read it: as is, or inflated (in a worker
    thread: a few ms for a big trace, not on the event loop) for one that does not take gzip."""
    headers = {**headers, "Vary": "Accept-Encoding"}
    if accepts_gzip(accept_encoding):
        return Response(
            stored, media_type="application/json", headers={**headers, "Content-Encoding": "gzip"}
        )
    body = await anyio.to_thread.run_sync(decompress, stored)
    return Response(body, media_type="application/json", headers=headers)
