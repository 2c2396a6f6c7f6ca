"""`gradstep serve`: uvicorn (httptools' HTTP parser, uvloop's event loop: the HTTP stack was what
held the GIL most under load, with h11 and asyncio's loop), with limits on slow and idle clients.

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive``, but waits forever for
a request that never arrives whole: a connection that sends nothing, or its headers a byte a
minute, is kept open (200 of them were never closed). ``SlowClientTimeout`` closes a connection
whose request (headers and body) has not arrived whole ``request_timeout`` seconds after the
connection opened, or after its first byte when it is kept alive between requests. In a
deployment, nginx in front does the same for the outside world (deploy/nginx/nginx.conf:
``client_header_timeout``, ``client_body_timeout``); this covers a server reached directly.
"""

from __future__ import annotations

import asyncio

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gradstep.settings import Settings


class SlowClientTimeout(HttpToolsProtocol):
    request_timeout = 10.0  # seconds; set per server by ``protocol``

    _request_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._request_timer is None and (self.cycle is None or self.cycle.response_complete):
            self._arm()  # the first byte of the next request on a kept-alive connection
        super().data_received(data)
        if self.cycle is not None and not self.cycle.more_body:
            self._disarm()  # the request is here, whole: the app's time is not the client's

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
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


def protocol(request_timeout: float) -> type[SlowClientTimeout]:
    return type("SlowClientTimeout", (SlowClientTimeout,), {"request_timeout": request_timeout})


def config(app, settings: Settings, **extra) -> uvicorn.Config:
    """uvicorn's config for ``app`` with the slow-client limits of ``settings``."""
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        http=protocol(settings.request_timeout),
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
