"""Cross-cutting limits: request body size, per-client rate, bounded queue, withdrawn requests."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator

import orjson
from starlette.types import Receive


class BodyLimit:
    """ASGI middleware: a body over ``max_bytes`` gets 413 before the app reads it all."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await self._reject(send)
        seen = 0

        async def limited_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, limited_receive, send)
        except _TooLarge:
            await self._reject(send)

    async def _reject(self, send) -> None:
        body = orjson.dumps({"error": f"Request body is larger than {self.max_bytes} bytes."})
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


class RateLimiter:
    """Token bucket per client: ``burst`` runs at once, then ``rate`` per second."""

    def __init__(self, rate: float, burst: int, max_clients: int = 10_000):
        self.rate, self.burst, self.max_clients = rate, burst, max_clients
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def acquire(self, client: str, cost: float = 1.0) -> float:
        """0 when the client may have what costs ``cost`` runs now (spent); else the seconds until it may."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.pop(client, (float(self.burst), now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            wait = 0.0
            if tokens >= cost:
                tokens -= cost
            else:
                wait = (cost - tokens) / self.rate
            self._store(client, tokens, now)
            return wait

    def take(self, client: str, n: int) -> int:
        """Up to ``n`` more runs for ``client`` now, never waiting or going into debt: how many it may have.

        The runs a request causes beyond its own (fix runs) are charged here: a client whose
        budget is spent gets its trace, and fewer of them."""
        if self.rate <= 0:
            return n
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.pop(client, (float(self.burst), now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            granted = max(0, min(n, math.floor(tokens)))
            self._store(client, tokens - granted, now)
            return granted

    def _store(self, client: str, tokens: float, now: float) -> None:
        self._buckets[client] = (tokens, now)
        while len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)


class Admission:
    """At most ``capacity`` runs in the building (running or queued); the rest are turned away."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.inside = 0
        self._lock = threading.Lock()

    def enter(self) -> bool:
        with self._lock:
            if self.inside >= self.capacity:
                return False
            self.inside += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self.inside -= 1


class ClientRuns:
    """At most ``cap`` runs of one client in the building at once (running or queued), so one client
    cannot hold every worker while others wait. A further run waits for one of its own client's to
    end (a page run again while its last run is still being cancelled goes through), up to
    ``WAITING_PER_RUN`` per run allowed; beyond that it is refused."""

    WAITING_PER_RUN = 2

    def __init__(self, cap: int):
        self.cap = cap
        self._inside: dict[str, int] = {}  # only clients with runs under way: it never grows past them
        self._waiting: dict[str, collections.deque[asyncio.Future]] = {}

    def has_room(self, client: str) -> bool:
        """Whether ``enter`` would let ``client`` in at once."""
        return self._inside.get(client, 0) < self.cap

    async def enter(self, client: str) -> bool:
        """Wait for a place among ``client``'s runs; False (at once) when too many already wait."""
        n = self._inside.get(client, 0)
        if n < self.cap:
            self._inside[client] = n + 1
            return True
        queue = self._waiting.setdefault(client, collections.deque())
        if len(queue) >= self.cap * self.WAITING_PER_RUN:
            return False
        place = asyncio.get_running_loop().create_future()
        queue.append(place)
        try:
            await place  # leave() hands over its place
        except asyncio.CancelledError:
            if place.done() and not place.cancelled():
                self.leave(client)  # handed over just as it was cancelled: pass it on
            elif place in queue:
                queue.remove(place)
            raise
        finally:
            if not queue:
                self._waiting.pop(client, None)
        return True

    def leave(self, client: str) -> None:
        queue = self._waiting.get(client)
        while queue:
            place = queue.popleft()
            if not place.done():
                place.set_result(None)  # its place goes to the next waiting run of the same client
                return
        n = self._inside.pop(client) - 1
        if n:
            self._inside[client] = n


@contextlib.asynccontextmanager
async def withdrawn(receive: Receive) -> AsyncIterator[threading.Event]:
    """An event set when the client goes away (``http.disconnect``) while the block runs.

    Use once the request's body has been read: the server's ``receive`` then has nothing more
    to give until the client disconnects (or the response is complete)."""
    gone = threading.Event()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()

    task = asyncio.create_task(watch())
    try:
        yield gone
    finally:
        task.cancel()


def retry_after(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))
