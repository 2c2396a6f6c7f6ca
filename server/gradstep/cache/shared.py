"""The shared trace cache in Redis: what one replica computed, every replica serves.

Whoever can write to Redis (anything on its network, a snapshot restored, another application
given the same instance) could otherwise change the code, numbers, output and verified fixes
every replica serves. So an entry is ``MAGIC + MAC + expiry + the trace's brotli encoding``
(gradstep.encoding), stored with the cache's TTL under ``gradstep:trace:<key>``, where the MAC is
an HMAC-SHA256, with the replicas' shared secret (``GRADSTEP_CACHE_SECRET``), of the magic, the
key, the expiry and the brotli bytes: an entry moved to another key does not verify, and one
written back after its time (a copy kept, a snapshot restored: Redis's own TTL is not signed) is
past the expiry it was signed with. The expiry is wall-clock seconds since the epoch (8 bytes,
big-endian), the writer's time plus the cache's TTL: replicas share the clock within the
seconds that matter here. Nothing read back is trusted. It is a miss, counted under
``rejected`` and why, when it is
* longer than the entry cap (only that much plus one byte is ever read: ``oversized``);
* not framed by this version, or its MAC does not verify (``forged``);
* past the expiry it was signed with (``expired``);
* inflating past ``MAX_TRACE_BYTES`` or past the ratio a replica keeps (``encoding.largest_kept``),
  found while inflating, not after (``oversized``);
* not a valid trace (``invalid``), or its server fields (``code``, ``version``, ``torch``) are not
  those the caller expects for the key (``foreign``).

An outage is a miss, never an error: every call is bounded by ``timeout``,
and after a failure Redis is left alone for ``pause`` seconds (runs go to the
sandbox meanwhile) so requests do not each wait for a dead server.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import struct
import time

import orjson
import redis.asyncio as aioredis
from pydantic import ValidationError
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError

from gradstep.encoding import BR, Encoded, TooLarge, inflate, largest_kept
from gradstep.sandbox.config import SandboxConfig
from gradstep.settings import MIN_CACHE_SECRET
from gradstep.trace_dicts import validate

PREFIX = "gradstep:trace:"
# 5: a signed expiry after the MAC (4: a MAC before the brotli; 3: brotli; 2: gzip; 1: zlib of the JSON)
MAGIC = b"gradstep-trace/5\n"
MAC_BYTES = hashlib.sha256().digest_size
_EXPIRY = struct.Struct(">Q")  # whole seconds since the epoch
HEAD_BYTES = len(MAGIC) + MAC_BYTES + _EXPIRY.size
# The largest trace a replica makes: the run's output (the sandbox's cap) with the server's fields,
# and the diagnoses a check job returns (under the same cap).
MAX_TRACE_BYTES = 2 * SandboxConfig.max_output_bytes
SCHEMES = ("redis://", "rediss://", "unix://")
# Entries this large are checked, inflated and validated in a worker thread, not on the event loop:
# all of them, as a small entry may inflate to MBs (a 2 KB one to 1 MB, whose parse and check hold
# the GIL for ~10 ms), and a stranger's request must not cost the loop that (NOTE [read after
# admission] in gradstep.traces).
OFF_LOOP_BYTES = 0
REASONS = ("oversized", "forged", "expired", "invalid", "foreign")

log = logging.getLogger("gradstep.cache")


def _mac(secret: bytes, key: str, expiry: bytes, br: bytes) -> bytes:
    mac = hmac.new(secret, MAGIC + key.encode() + b"\n" + expiry, hashlib.sha256)
    mac.update(br)
    return mac.digest()


def encode_entry(key: str, stored: bytes, secret: bytes, ttl: float = 3600.0) -> bytes:
    """The entry for a stored trace: its brotli encoding (a gzip one read back would need checking
    against it; a replica makes gzip again when a client needs it), signed for ``key`` with its
    expiry, ``ttl`` seconds from now."""
    br = Encoded.unpack(stored).br
    expiry = _EXPIRY.pack(max(0, int(time.time() + ttl)))
    return MAGIC + _mac(secret, key, expiry, br) + expiry + br


def decode_entry(key: str, raw: bytes, secret: bytes, expect: dict | None = None) -> bytes | str:
    """The stored trace in ``raw`` if it is an entry this cache's replicas wrote for ``key`` holding
    a valid trace (with ``expect``'s fields, if given), before its signed expiry; else why not (one
    of ``REASONS``)."""
    if not raw.startswith(MAGIC) or len(raw) < HEAD_BYTES:
        return "forged"
    mac, expiry = raw[len(MAGIC) : len(MAGIC) + MAC_BYTES], raw[len(MAGIC) + MAC_BYTES : HEAD_BYTES]
    br = raw[HEAD_BYTES:]
    if not hmac.compare_digest(mac, _mac(secret, key, expiry, br)):
        return "forged"
    if time.time() > _EXPIRY.unpack(expiry)[0]:
        return "expired"
    try:  # bounded while inflating: a bomb costs the bound, not its size
        body = inflate(br, min(MAX_TRACE_BYTES, largest_kept(len(BR) + len(br))))
    except TooLarge:
        return "oversized"
    except ValueError:
        return "invalid"
    try:
        trace = orjson.loads(body)
        validate(trace)
    except (orjson.JSONDecodeError, ValidationError):
        return "invalid"
    if expect and any(trace.get(name) != value for name, value in expect.items()):
        return "foreign"
    return Encoded(br).pack()


class RedisCache:
    kind = "redis"

    def __init__(
        self,
        url: str,
        ttl: float,
        max_entry_bytes: int,
        secret: bytes,
        timeout: float = 0.5,
        pause: float = 5.0,
    ):
        if not url.startswith(SCHEMES):
            raise ValueError(f"GRADSTEP_CACHE_URL must start with one of {', '.join(SCHEMES)}")
        if len(secret) < MIN_CACHE_SECRET:
            raise ValueError(f"GRADSTEP_CACHE_SECRET must be at least {MIN_CACHE_SECRET} bytes")
        self.url, self.ttl, self.max_entry_bytes = url, ttl, max_entry_bytes
        self._secret = secret
        self.timeout, self.pause = timeout, pause
        self._client: aioredis.Redis | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._down_until = 0.0
        self.hits = self.misses = self.errors = self.rejected = self.skipped = self.too_big = 0
        self.reasons = dict.fromkeys(REASONS, 0)  # why entries were rejected

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

    async def get(self, key: str, expect: dict | None = None) -> bytes | None:
        """The entry for ``key``, if it verifies and holds a valid trace whose fields include
        ``expect`` (the server's fields for the key's code, when the caller knows them)."""
        if not self._available():
            return None
        try:
            # one round trip that reads at most the cap and one byte more: a longer value is a miss
            # (an absent key reads as empty)
            raw = await self._call(self._connection().getrange, PREFIX + key, 0, self.max_entry_bytes)
        except ResponseError as e:
            if not str(e).startswith("WRONGTYPE"):
                self._failed(e)
                return None
            self._rejected("invalid")  # not a string: nothing this cache wrote
            return None
        except Exception as e:  # whatever Redis or the network does, the request goes on without it
            self._failed(e)
            return None
        if not raw:
            self.misses += 1
            return None
        if len(raw) > self.max_entry_bytes:
            self._rejected("oversized")
            return None
        # Verified, inflated and validated off the event loop (a 1 MB trace takes milliseconds).
        body = (
            decode_entry(key, raw, self._secret, expect)
            if len(raw) < OFF_LOOP_BYTES
            else await asyncio.to_thread(decode_entry, key, raw, self._secret, expect)
        )
        if isinstance(body, str):
            self._rejected(body)
            return None
        self.hits += 1
        return body

    def _rejected(self, reason: str) -> None:
        self.rejected += 1
        self.reasons[reason] += 1

    async def put(self, key: str, body: bytes) -> None:
        entry = encode_entry(key, body, self._secret, self.ttl)
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
            **{f"rejected_{reason}": n for reason, n in self.reasons.items()},
            "skipped": self.skipped,
            "too_big": self.too_big,
        }
