"""Traces are compressed once, when they are made (never on the event loop), kept compressed in the
cache, and served as those bytes: a cached trace sent to thirty clients is compressed once.

A stored trace is its brotli encoding (quality 5), made while the checker validates the trace:
browsers offer brotli over HTTPS (Chromium on localhost too). Its gzip encoding, for the clients
that take gzip but not brotli, is made from it the first time one asks (in a worker thread) and
kept beside it (``with_gzip``). On the 24-layer trace (1 MB, ``benchmarks/e2e.py``): brotli is
115 KB in 15 ms (quality 7: 112 KB in 47 ms; 10: 95 KB in 550 ms); gzip level 7 147 KB in 17 ms
with zlib-ng (29 ms with the standard library's zlib). Made together, beside the validation,
the two took the checker 40 ms on 2 CPUs; brotli alone 24 ms.

The stored form (``pack``): ``BR`` + the brotli stream, or ``BOTH`` + the gzip member's length
(4 bytes) + the gzip member + the brotli stream.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import brotli
from fastapi.responses import Response
from starlette.datastructures import Headers
from starlette.middleware.gzip import GZipMiddleware
from starlette.types import Receive, Scope, Send
from zlib_ng import gzip_ng

GZIP_LEVEL = 7
BROTLI_QUALITY = 5
BR = b"gradstep-br\n"
BOTH = b"gradstep-gzip+br\n"
_LENGTH = struct.Struct(">I")


@dataclass(frozen=True)
class Encoded:
    br: bytes
    gzip: bytes | None = None  # made when a client first needs it (``with_gzip``)

    def pack(self) -> bytes:
        if self.gzip is None:
            return BR + self.br
        return BOTH + _LENGTH.pack(len(self.gzip)) + self.gzip + self.br

    @staticmethod
    def unpack(stored: bytes) -> Encoded:
        """The encodings in ``stored`` (what ``pack`` made: the cache holds nothing else)."""
        if stored.startswith(BR):
            return Encoded(stored[len(BR) :])
        if not stored.startswith(BOTH):
            raise ValueError("not a stored trace")
        start = len(BOTH) + _LENGTH.size
        (size,) = _LENGTH.unpack_from(stored, len(BOTH))
        return Encoded(stored[start + size :], stored[start : start + size])


def _gzip(body: bytes) -> bytes:
    return gzip_ng.compress(body, GZIP_LEVEL, mtime=0)  # mtime 0: the same trace gives the same bytes


def _brotli(body: bytes) -> bytes:
    return brotli.compress(body, quality=BROTLI_QUALITY)


def compress(body: bytes) -> bytes:
    """``body`` (JSON) in its stored form."""
    return Encoded(_brotli(body)).pack()


def decompress(stored: bytes) -> bytes:
    """The JSON a stored trace holds."""
    return brotli.decompress(Encoded.unpack(stored).br)


def with_gzip(stored: bytes) -> bytes:
    """``stored`` with its gzip encoding beside the brotli one (made from it if it has none)."""
    encoded = Encoded.unpack(stored)
    if encoded.gzip is not None:
        return stored
    return Encoded(encoded.br, _gzip(brotli.decompress(encoded.br))).pack()


def accepted(accept_encoding: str, name: str) -> bool:
    """Whether an Accept-Encoding header allows ``name`` (``gzip;q=0`` refuses it; ``*`` allows all)."""
    for item in accept_encoding.lower().split(","):
        coding, *params = (part.strip() for part in item.split(";"))
        if coding in (name, "*"):
            q = next((p[2:] for p in params if p.startswith("q=")), "1")
            try:
                return float(q) > 0
            except ValueError:
                return False
    return False


async def json_response(
    stored: bytes,
    accept_encoding: str,
    headers: dict[str, str],
    keep: Callable[[bytes], None] | None = None,
) -> Response:
    """A stored trace as the client can read it: brotli as stored; else gzip, made the first time
    (``keep`` is given the stored form with it, for the cache); else the JSON. What takes more
    than a slice of ``stored`` runs in a worker thread, not on the event loop."""
    headers = {**headers, "Vary": "Accept-Encoding"}
    encoded = Encoded.unpack(stored)
    if accepted(accept_encoding, "br"):
        return Response(
            encoded.br, media_type="application/json", headers={**headers, "Content-Encoding": "br"}
        )
    if accepted(accept_encoding, "gzip"):
        if encoded.gzip is None:
            stored = await anyio.to_thread.run_sync(with_gzip, stored)
            encoded = Encoded.unpack(stored)
            if keep is not None:
                keep(stored)
        return Response(
            encoded.gzip, media_type="application/json", headers={**headers, "Content-Encoding": "gzip"}
        )
    body = await anyio.to_thread.run_sync(brotli.decompress, encoded.br)
    return Response(body, media_type="application/json", headers=headers)


class GZipWhereAccepted(GZipMiddleware):
    """Starlette's gzip for the app's other responses, for clients that take gzip: it looks for the
    word, so ``gzip;q=0`` (a refusal) got gzip, even on a trace inflated for that client."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not accepted(Headers(scope=scope).get("accept-encoding", ""), "gzip"):
            await self.app(scope, receive, send)
            return
        await super().__call__(scope, receive, send)
