"""`gradstep serve`: uvicorn (httptools' HTTP parser, uvloop's event loop: the HTTP stack was what
held the GIL most under load, with h11 and asyncio's loop), with limits on slow and idle clients.

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive``, but waits forever for
a request that never arrives whole: a connection that sends nothing, or its headers a byte a
minute, is kept open (200 of them were never closed). ``SlowClientTimeout`` closes a connection
whose request (headers and body) has not arrived whole ``request_timeout`` seconds after the
connection opened, or after its first byte when it is kept alive between requests. In a
deployment, nginx in front does the same for the outside world (deploy/nginx/nginx.conf:
``client_header_timeout``, ``client_body_timeout``); this covers a server reached directly.

Within that timeout one address could still hold every connection the server takes
(``limit_concurrency``): 1,000 half-open connections answered everyone else 503. So one address
holds at most ``per_address`` connections at once; a connection past that is answered 503 and
closed. Behind a trusted proxy every connection is the proxy's: the cap is nginx's there
(``limit_conn``), not the replica's.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gradstep.limits import client_key
from gradstep.settings import Settings

TOO_MANY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"retry-after: 2\r\nconnection: close\r\ncontent-length: 41\r\n\r\n"
    b"Too many connections from this address.\r\n"
)


class SlowClientTimeout(HttpToolsProtocol):
    request_timeout = 10.0  # seconds; set per server by ``protocol``
    per_address = 0  # open connections one address may hold (0: no cap); set per server
    open_by_address: Counter  # this server's open connections per peer address

    _request_timer: asyncio.TimerHandle | None = None
    _address: str | None = None  # counted in open_by_address

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.per_address:
            peer = transport.get_extra_info("peername")
            address = client_key(peer[0]) if peer else "?"  # an IPv6 client is its /64, as in limits.py
            if self.open_by_address[address] >= self.per_address:
                transport.write(TOO_MANY)
                transport.close()
                return
            self.open_by_address[address] += 1
            self._address = address
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._request_timer is None and (self.cycle is None or self.cycle.response_complete):
            self._arm()  # the first byte of the next request on a kept-alive connection
        super().data_received(data)
        if self.cycle is not None and not self.cycle.more_body:
            self._disarm()  # the request is here, whole: the app's time is not the client's

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._address is not None:
            left = self.open_by_address[self._address] - 1
            if left:
                self.open_by_address[self._address] = left
            else:
                del self.open_by_address[self._address]  # the counter never grows with past clients
            self._address = None
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._request_timer = self.loop.call_later(self.request_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._request_timer is not None:
            self._request_timer.cancel()
            self._request_timer = None

    def _too_slow(self) -> None:
        self._request_timer = None
        if self.cycle is None or self.cycle.response_complete or self.cycle.more_body:
            self.transport.close()  # connection_lost tells a waiting app that the client is gone


def protocol(request_timeout: float, per_address: int = 0) -> type[SlowClientTimeout]:
    limits = {"request_timeout": request_timeout, "per_address": per_address, "open_by_address": Counter()}
    return type("SlowClientTimeout", (SlowClientTimeout,), limits)


def config(app, settings: Settings, **extra) -> uvicorn.Config:
    """uvicorn's config for ``app`` with the slow-client limits of ``settings``."""
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        http=protocol(settings.request_timeout, 0 if settings.trust_proxy else settings.client_connections),
        loop="uvloop",
        timeout_keep_alive=settings.keep_alive,  # type: ignore[arg-type]  # a float works
        limit_concurrency=settings.max_connections,
        # uvicorn's own proxy_headers would take the client from X-Forwarded-For of any request
        # from 127.0.0.1, whatever trust_proxy says: only routes/deps.client_of reads it.
        proxy_headers=False,
        **extra,
    )


def serve(app, settings: Settings, log_level: str = "info") -> None:
    uvicorn.Server(config(app, settings, log_level=log_level)).run()
