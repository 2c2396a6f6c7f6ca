"""The shared trace cache in Redis: what one replica computed, every replica serves.

An entry is ``MAGIC + key + "\\n" + the trace's brotli encoding`` (gradstep.encoding), stored
with the cache's TTL under ``gradstep:trace:<key>``. Nothing read back is trusted: an entry
with another magic or key, one that does not decompress within the size cap,
or one that is not a valid trace is a miss (and counted as ``rejected``).

An outage is a miss, never an error: every call is bounded by ``timeout``,
and after a failure Redis is left alone for ``pause`` seconds (runs go to the
sandbox meanwhile) so requests do not each wait for a dead server.
"""

from __future__ import annotations

import asyncio
import logging
import time

import brotli
import orjson
import redis.asyncio as aioredis
from pydantic import ValidationError
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from gradstep.encoding import Encoded
from gradstep.trace_dicts import validate

PREFIX = "gradstep:trace:"
MAGIC = b"gradstep-trace/3\n"  # 3: the trace's brotli encoding (2: gzip; 1: zlib of the JSON)
MAX_TRACE_BYTES = 16 << 20  # decompressed; more than the sandbox ever returns (8 MB output cap)
SCHEMES = ("redis://", "rediss://", "unix://")
OFF_LOOP_BYTES = 64 << 10  # entries this large are inflated and validated in a worker thread

log = logging.getLogger("gradstep.cache")


def encode_entry(key: str, stored: bytes) -> bytes:
    """The entry for a stored trace: its brotli encoding (a gzip one read back would need checking
    against it; a replica makes gzip again when a client needs it)."""
    return MAGIC + key.encode() + b"\n" + Encoded.unpack(stored).br


def decode_entry(key: str, raw: bytes) -> bytes | None:
    """The stored trace in ``raw`` if it is a well-formed entry for ``key`` holding a valid trace."""
    head = MAGIC + key.encode() + b"\n"
    if not raw.startswith(head):
        return None
    br = raw[len(head) :]
    inflate = brotli.Decompressor()
    try:
        # the limit bounds the output (to one decoder block past it): no decompression bomb
        body = inflate.process(br, output_buffer_limit=MAX_TRACE_BYTES)
    except brotli.error:  # not brotli, or more after its end
        return None
    if not inflate.is_finished() or len(body) > MAX_TRACE_BYTES:  # cut short, or over the cap
        return None
    try:
        validate(orjson.loads(body))
    except (orjson.JSONDecodeError, ValidationError):
        return None
    return Encoded(br).pack()


class RedisCache:
    kind = "redis"

    def __init__(self, url: str, ttl: float, max_entry_bytes: int, timeout: float = 0.5, pause: float = 5.0):
        if not url.startswith(SCHEMES):
            raise ValueError(f"GRADSTEP_CACHE_URL must start with one of {', '.join(SCHEMES)}")
        self.url, self.ttl, self.max_entry_bytes = url, ttl, max_entry_bytes
        self.timeout, self.pause = timeout, pause
        self._client: aioredis.Redis | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._down_until = 0.0
        self.hits = self.misses = self.errors = self.rejected = self.skipped = self.too_big = 0

    def _connection(self) -> aioredis.Redis:
        # A client belongs to the event loop it was made in (tests run several loops).
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = aioredis.Redis.from_url(
                self.url,
                socket_timeout=self.timeout,
                socket_connect_timeout=self.timeout,
                retry=Retry(NoBackoff(), 0),  # one attempt: a miss is cheaper than waiting
            )
            self._loop = loop
        return self._client

    def _available(self) -> bool:
        if time.monotonic() < self._down_until:
            self.skipped += 1
            return False
        return True

    def _failed(self, e: BaseException) -> None:
        if time.monotonic() >= self._down_until:
            log.warning("trace cache: Redis unreachable (%s); running snippets without it", type(e).__name__)
        self.errors += 1
        self._down_until = time.monotonic() + self.pause

    async def _call(self, command, *args, **kwargs):
        return await asyncio.wait_for(command(*args, **kwargs), self.timeout * 2)

    async def get(self, key: str) -> bytes | None:
        if not self._available():
            return None
        try:
            raw = await self._call(self._connection().get, PREFIX + key)
        except Exception as e:  # whatever Redis or the network does, the request goes on without it
            self._failed(e)
            return None
        if raw is None:
            self.misses += 1
            return None
        # Large entries are inflated and validated off the event loop (a 1 MB trace takes milliseconds).
        body = (
            decode_entry(key, raw)
            if len(raw) < OFF_LOOP_BYTES
            else await asyncio.to_thread(decode_entry, key, raw)
        )
        if body is None:
            self.rejected += 1
            return None
        self.hits += 1
        return body

    async def put(self, key: str, body: bytes) -> None:
        entry = encode_entry(key, body)
        if len(entry) > self.max_entry_bytes:
            self.too_big += 1
            return
        if not self._available():
            return
        try:
            await self._call(self._connection().set, PREFIX + key, entry, ex=max(1, int(self.ttl)))
        except Exception as e:
            self._failed(e)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            try:
                await client.aclose()
            except (RedisError, OSError):  # closing a broken connection
                pass

    def stats(self) -> dict:
        return {
            "kind": self.kind,
            "available": time.monotonic() >= self._down_until,
            "hits": self.hits,
            "misses": self.misses,
            "errors": self.errors,
            "rejected": self.rejected,
            "skipped": self.skipped,
            "too_big": self.too_big,
        }
