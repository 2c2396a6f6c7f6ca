"""Traces are compressed once, when they are made (never on the event loop), kept compressed in the
cache, and served as those bytes: a cached trace sent to thirty clients is compressed once.

A stored trace is its brotli encoding (quality 4), made while the checker validates the trace:
browsers offer brotli over HTTPS (Chromium on localhost too). Its gzip encoding, for the clients
that take gzip but not brotli, is made from it the first time one asks (in a worker thread) and
kept beside it (``with_gzip``). Every cache miss waits for the brotli encoding, so its quality is
the lowest whose size is close to the best: on the 24-layer trace (707 KB of JSON in trace
version 4, ``benchmarks/e2e.py``) quality 4 is 91 KB in 4.5 ms, quality 5 86 KB in 7.8 ms (on six
real models, ``benchmarks/models``: 0.46-0.70x the time of quality 5 for 1.03-1.15x the bytes);
quality 7 was 112 KB in 47 ms and 10 95 KB in 550 ms on the version 3 trace of 1 MB. gzip level 7
of that 1 MB: 147 KB in 17 ms with zlib-ng (29 ms with the standard library's zlib).

The stored form (``pack``): ``BR`` + the brotli stream, or ``BOTH`` + the gzip member's length
(4 bytes) + the gzip member + the brotli stream.
"""

from __future__ import annotations

import asyncio
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
BROTLI_QUALITY = 4
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


# A trace a cache keeps is one whose JSON is at most MAX_RATIO times its stored size (past a size where
# the ratio matters): real traces compress 10-90x (a 96-layer GPT, 4.6 MB, to 52 KB); a run can make
# a 7 MB trace that compresses to 1 KB, and served inflated to clients that never read it, such an
# entry pinned hundreds of MB. It is served to its author, never kept for others.
MAX_RATIO = 400
RATIO_FROM = 1 << 20


def largest_kept(stored_size: int) -> int:
    """The most bytes of JSON a trace stored in ``stored_size`` bytes may hold and still be kept."""
    return max(RATIO_FROM, MAX_RATIO * stored_size)


def worth_keeping(inflated: int, stored: bytes) -> bool:
    """Whether a trace of ``inflated`` bytes of JSON, stored as ``stored``, may go into a cache."""
    return inflated <= largest_kept(len(stored))


class TooLarge(ValueError):
    """A brotli stream that inflates past the limit it was read with."""


def inflate(br: bytes, limit: int) -> bytes:
    """The whole of the brotli stream ``br``, inflating no more than ``limit`` bytes (and one
    decoder block): raises TooLarge once the output reaches the limit with more to come (a
    bomb costs the limit, not its size), ValueError when ``br`` is not one whole brotli stream."""
    inflater = brotli.Decompressor()
    try:
        body = inflater.process(br, output_buffer_limit=max(1, limit))
    except brotli.error:  # not brotli, or bytes after its end
        raise ValueError("not a brotli stream") from None
    if len(body) > limit or (len(body) == limit and not inflater.is_finished()):
        raise TooLarge(f"inflates past {limit} bytes")
    if not inflater.is_finished():
        raise ValueError("the brotli stream is cut short")
    return body


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
    return InflatedJSON(encoded.br, headers)


INFLATE_CHUNK = 64 << 10  # bytes of JSON inflated at a time for a client that takes no encoding
SEND_TIMEOUT = 30.0  # seconds a client may take to accept one chunk before it is given up


class InflatedJSON(Response):
    """A stored trace's JSON for a client that takes neither brotli nor gzip, inflated a chunk at a
    time as the client takes it: holding the whole JSON per client let clients that never read pin
    the server's memory (a 1 KB entry can inflate to megabytes). A client that leaves a chunk
    untaken for ``send_timeout`` seconds is given up (the connection closes)."""

    def __init__(self, br: bytes, headers: dict[str, str], send_timeout: float = SEND_TIMEOUT):
        super().__init__(None, headers=headers, media_type="application/json")
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]  # not known
        self.br, self.send_timeout = br, send_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        inflate = brotli.Decompressor()
        data = self.br  # all of it on the first call, then b"" until the output is drained
        while True:
            chunk = inflate.process(data, output_buffer_limit=INFLATE_CHUNK)
            data = b""
            done = inflate.is_finished()
            if not chunk and not done and inflate.can_accept_more_data():
                raise ValueError("a stored trace's brotli stream ended early")
            try:
                message = {"type": "http.response.body", "body": chunk, "more_body": not done}
                await asyncio.wait_for(send(message), self.send_timeout)
            except TimeoutError:
                return  # the server closes a connection whose response was left incomplete
            if done:
                return


class GZipWhereAccepted(GZipMiddleware):
    """Starlette's gzip for the app's other responses, for clients that take gzip: it looks for the
    word, so ``gzip;q=0`` (a refusal) got gzip, even on a trace inflated for that client."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not accepted(Headers(scope=scope).get("accept-encoding", ""), "gzip"):
            await self.app(scope, receive, send)
            return
        await super().__call__(scope, receive, send)
