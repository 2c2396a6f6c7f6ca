"""Traces are compressed once, when they are made (never on the event loop), kept compressed in the
cache, and served as those bytes: a cached trace sent to thirty clients is compressed once.

A stored trace holds two encodings of the same JSON, made at once in two threads (zlib and brotli
release the GIL): brotli for the browsers that offer it (over HTTPS they all do), gzip for every
other client. On the 24-layer trace (1 MB, ``benchmarks/e2e.py``): brotli quality 5 is 115 KB in
15 ms (quality 7: 112 KB in 47 ms; 10: 95 KB in 550 ms); gzip level 7 is 147 KB in 17 ms with
zlib-ng (29 ms with the standard library's zlib, for the same size).

The stored form (``pack``): a gzip member alone, or ``BOTH`` + the gzip member's length (4 bytes)
+ the gzip member + the brotli stream. Entries read from the shared cache hold gzip alone.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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
BOTH = b"gradstep-gzip+br\n"
_LENGTH = struct.Struct(">I")
_GZIP_MAGIC = b"\x1f\x8b"
_compressing = ThreadPoolExecutor(2, thread_name_prefix="gradstep-compress")
PARALLEL_BYTES = 64 << 10  # smaller bodies are compressed in the caller's thread: a hand-off costs more


@dataclass(frozen=True)
class Encoded:
    gzip: bytes
    br: bytes | None = None

    def pack(self) -> bytes:
        if self.br is None:
            return self.gzip
        return BOTH + _LENGTH.pack(len(self.gzip)) + self.gzip + self.br

    @staticmethod
    def unpack(stored: bytes) -> Encoded:
        """The encodings in ``stored`` (what ``pack`` made: the cache holds nothing else)."""
        if not stored.startswith(BOTH):
            return Encoded(stored)
        start = len(BOTH) + _LENGTH.size
        (size,) = _LENGTH.unpack_from(stored, len(BOTH))
        return Encoded(stored[start : start + size], stored[start + size :])


def _gzip(body: bytes) -> bytes:
    return gzip_ng.compress(body, GZIP_LEVEL, mtime=0)  # mtime 0: the same trace gives the same bytes


def _brotli(body: bytes) -> bytes:
    return brotli.compress(body, quality=BROTLI_QUALITY)


def compress_later(body: bytes) -> Callable[[], bytes]:
    """Start compressing ``body``: the returned call waits for its stored form. (Two leaf tasks in
    the compressing threads, never one waiting for another there: no deadlock however many wait.)"""
    gz, br = _compressing.submit(_gzip, body), _compressing.submit(_brotli, body)
    return lambda: Encoded(gz.result(), br.result()).pack()


def compress(body: bytes) -> bytes:
    """``body`` (JSON) in its stored form: both encodings, made in parallel when it is big."""
    if len(body) < PARALLEL_BYTES:
        return Encoded(_gzip(body), _brotli(body)).pack()
    return compress_later(body)()


def decompress(stored: bytes) -> bytes:
    """The JSON a stored trace holds."""
    return gzip_ng.decompress(Encoded.unpack(stored).gzip)


def gzip_member(stored: bytes) -> bytes:
    """The gzip encoding of a stored trace: what the shared cache keeps."""
    return Encoded.unpack(stored).gzip


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


async def json_response(stored: bytes, accept_encoding: str, headers: dict[str, str]) -> Response:
    """A stored trace as the client can read it: brotli or gzip as stored, or inflated (in a worker
    thread: a few ms for a big trace, not on the event loop) for a client that takes neither."""
    headers = {**headers, "Vary": "Accept-Encoding"}
    encoded = Encoded.unpack(stored)
    for name, body in (("br", encoded.br), ("gzip", encoded.gzip)):
        if body is not None and accepted(accept_encoding, name):
            return Response(
                body, media_type="application/json", headers={**headers, "Content-Encoding": name}
            )
    body = await anyio.to_thread.run_sync(gzip_ng.decompress, encoded.gzip)
    return Response(body, media_type="application/json", headers=headers)


class GZipWhereAccepted(GZipMiddleware):
    """Starlette's gzip for the app's other responses, for clients that take gzip: it looks for the
    word, so ``gzip;q=0`` (a refusal) got gzip, even on a trace inflated for that client."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not accepted(Headers(scope=scope).get("accept-encoding", ""), "gzip"):
            await self.app(scope, receive, send)
            return
        await super().__call__(scope, receive, send)
