"""Cross-cutting limits: request body size, who a client is, per-client rate, a fair and bounded
queue, bytes sent paid for as they go, withdrawn requests."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ipaddress
import itertools
import math
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send


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


def client_key(address: str) -> str:
    """Whom requests from ``address`` are charged to: an IPv4 address as it is; an IPv6 address by
    its /64, the prefix one subscriber gets (a host picks any of its 2^64 addresses, so charging
    each address gave one machine as many budgets as it liked); an IPv4-mapped IPv6 address as its
    IPv4 address. Anything else (no address at all) as it is."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # a zone ("fe80::1%eth0") names no one else
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def network_of(client: str) -> str:
    """The network a client (``client_key``) is in, for fair shares: an IPv4 /24, an IPv6 /48 (a
    site's usual prefix). A wave of distinct addresses from one network shares one network's turn."""
    try:
        net = ipaddress.ip_network(client, strict=False)
    except ValueError:
        return client
    prefix = 24 if net.version == 4 else 48
    return str(net.supernet(new_prefix=prefix)) if net.prefixlen > prefix else str(net)


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


class Refused(Exception):
    """A place in the queue was refused or taken back: the request is answered 503 with ``retry``."""

    def __init__(self, why: str, retry: float = 2.0):
        super().__init__(why)
        self.retry = retry


class FairQueue:
    """At most ``capacity`` runs in the building (``inside``: in service or waiting). ``serving`` of
    them are let through at once (to the sandbox, whose workers take them in turn); the others
    wait here, and a freed place goes to a waiting run of the network with the fewest runs let
    through, among those the one whose last turn was longest ago (never, for a newcomer), and
    within it to its client by the same rule, oldest run first: networks, then clients, take
    turns, so one with many runs waiting gets a turn as often as one with a single run, not one
    per run it sent.

    Bounded in length and in time: a run waits at most ``max_wait`` seconds (past that it is
    refused: a queue that would take minutes to drain says so at once), and when every place is
    taken a newcomer takes the place of the newest waiting run of the network holding the most
    places, if that network holds more than the newcomer's would; else the newcomer is refused. So
    a wave of requests from many addresses of one network cannot hold the whole queue.
    Used from the event loop only (``inside`` may be set by a test to fill it)."""

    def __init__(self, capacity: int, serving: int, max_wait: float = 10.0):
        self.capacity, self.serving, self.max_wait = capacity, max(1, serving), max_wait
        self.inside = 0
        self.refused = self.pushed_out = self.timed_out = 0
        # by client and by "net:" + network, for those inside only (they never grow with past ones):
        self._held: collections.Counter[str] = collections.Counter()  # runs inside
        self._served: collections.Counter[str] = collections.Counter()  # runs let through
        self._turns: dict[str, int] = {}  # when each last had a turn
        self._waiting: list[_Waiter] = []
        self._through = 0
        self._order = itertools.count()
        self.recent: collections.deque[str] = collections.deque(maxlen=16)  # networks of the last turns

    async def enter(self, client: str) -> None:
        """Wait for a place to be let through; raises ``Refused`` (nothing held) when refused."""
        net = "net:" + network_of(client)
        if self.inside >= self.capacity:
            self._push_out_for(net)  # raises Refused when the newcomer is not owed a place
        self.inside += 1
        self._held[client] += 1
        self._held[net] += 1
        if self._through < self.serving and not self._waiting:
            self._let_through(client, net)
            return
        waiter = _Waiter(client, net, next(self._order), asyncio.get_running_loop().create_future())
        self._waiting.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter.place), self.max_wait)
        except TimeoutError:
            if waiter.place.done() and waiter.place.exception() is None:  # let through just now
                return
            self._forget(waiter)
            self.timed_out += 1
            raise Refused(f"The queue took longer than {self.max_wait:g} s: try again shortly.") from None
        except BaseException:
            if waiter.place.done() and not waiter.place.cancelled() and waiter.place.exception() is None:
                self.leave(client)  # let through as it was withdrawn: the place goes on
            else:
                self._forget(waiter)
            raise

    def leave(self, client: str) -> None:
        """A run that was let through is done."""
        net = "net:" + network_of(client)
        self._through -= 1
        self._served[client] -= 1
        self._served[net] -= 1
        self._out(client, net)
        self._next()

    def _let_through(self, client: str, net: str) -> None:
        self._through += 1
        self.recent.append(net[4:])
        turn = next(self._order)
        for key in (client, net):
            self._served[key] += 1
            self._turns[key] = turn

    def _rank(self, w: _Waiter) -> tuple:
        served, turns = self._served, self._turns
        return (served[w.net], turns.get(w.net, -1), served[w.client], turns.get(w.client, -1), w.order)

    def _next(self) -> None:
        while self._waiting and self._through < self.serving:
            waiter = min(self._waiting, key=self._rank)
            self._waiting.remove(waiter)
            self._let_through(waiter.client, waiter.net)
            waiter.place.set_result(None)

    def _push_out_for(self, net: str) -> None:
        if self._waiting:
            fullest = max({w.net for w in self._waiting}, key=lambda n: (self._held[n], n != net))
            if self._held[fullest] > self._held[net] + 1:
                newest = max((w for w in self._waiting if w.net == fullest), key=lambda w: w.order)
                self._forget(newest)
                self.pushed_out += 1
                newest.place.set_exception(Refused("All workers are busy: try again shortly."))
                return
        self.refused += 1
        raise Refused("All workers are busy: try again shortly.")

    def _forget(self, waiter: _Waiter) -> None:
        if waiter in self._waiting:
            self._waiting.remove(waiter)
            self._out(waiter.client, waiter.net)

    def _out(self, client: str, net: str) -> None:
        self.inside -= 1
        for key in (client, net):
            self._held[key] -= 1
            if self._held[key] <= 0:  # nothing of it inside: forgotten
                del self._held[key]
                self._served.pop(key, None)
                self._turns.pop(key, None)

    def stats(self) -> dict:
        """Counts; per network inside, its runs inside and let through; the networks of the last
        turns (for /healthz's local detail)."""
        nets = {
            k[4:]: {"inside": n, "through": self._served[k]}
            for k, n in self._held.items()
            if k.startswith("net:")
        }
        return {
            "inside": self.inside,
            "waiting": len(self._waiting),
            "refused": self.refused,
            "pushed_out": self.pushed_out,
            "timed_out": self.timed_out,
            "networks": nets,
            "recent": list(self.recent),  # oldest first
        }


class _Waiter:
    __slots__ = ("client", "net", "order", "place")

    def __init__(self, client: str, net: str, order: int, place: asyncio.Future):
        self.client, self.net, self.order, self.place = client, net, order, place


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


class Metered(Response):
    """A response whose body is paid for as it is sent: its first ``paid`` bytes are paid
    for already (by the request's price), each further part costs ``pay(nbytes)``, which answers 0
    when it is paid, else the seconds until it could be. Unpaid before anything was sent, the
    response is a 429 with Retry-After instead; unpaid part-way (a trace inflated for a client that
    takes no encoding, a chunk at a time), it stops there and the connection is closed."""

    def __init__(self, response: Response, paid: int, pay: Callable[[int], float]):
        # not Response.__init__: the headers are the wrapped response's own list (a route's
        # dependency may add to them), its body is sent by it
        self.response, self.paid, self.pay = response, paid, pay
        self.status_code, self.raw_headers = response.status_code, response.raw_headers
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        held: dict | None = None  # the response's start, sent with its first paid part
        paid, sent = self.paid, 0

        async def metered(message: dict) -> None:
            nonlocal held, paid, sent
            if message["type"] == "http.response.start":
                held = message
                return
            size = len(message.get("body", b""))
            if sent + size > paid:
                wait = self.pay(sent + size - paid)
                if wait > 0:
                    raise _Unpaid(wait, started=held is None)
                paid = sent + size
            if held is not None:
                start, held = held, None
                await send(start)
            sent += size
            await send(message)

        try:
            await self.response(scope, receive, metered)
        except _Unpaid as e:
            if e.started:
                return  # part of the body went out: the server closes the unfinished response
            await self._refuse(send, e.wait)
            return
        if self.background is not None:
            await self.background()

    async def _refuse(self, send: Send, wait: float) -> None:
        body = orjson.dumps({"error": "Too many bytes sent to this client: slow down."})
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", retry_after(wait).encode()),
        ]
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class _Unpaid(Exception):
    def __init__(self, wait: float, started: bool):
        self.wait, self.started = wait, started


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
