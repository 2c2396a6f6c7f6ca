"""Whom a request is charged to, on a real server: the connecting address, or behind a trusted
proxy the address that proxy appended to X-Forwarded-For (its last entry), never an entry the
client chose, and an IPv6 client by its /64. Each attack spends a one-run budget under a forged
header or another address of its own and shows the next run refused."""

from __future__ import annotations

import httpx
import pytest
from testkit.browser_support import running_server
from testkit.sandbox_guard import guard_unavailable, uid_base

pytestmark = pytest.mark.skipif(guard_unavailable() is not None, reason=str(guard_unavailable()))

ONE_RUN = {"GRADSTEP_RATE": "0.001", "GRADSTEP_BURST": "1", "GRADSTEP_WORKERS": "1"}


def run(base: str, code: str, forwarded: str | list[str] | None) -> int:
    headers = (
        []
        if forwarded is None
        else [("x-forwarded-for", v) for v in ([forwarded] if isinstance(forwarded, str) else forwarded)]
    )
    r = httpx.post(f"{base}/api/trace", json={"code": code}, headers=headers, timeout=60)
    return r.status_code


def test_forwarded_header_is_ignored_without_a_trusted_proxy():
    # uvicorn's own proxy_headers would rewrite the client of a request from 127.0.0.1
    with running_server(**ONE_RUN, GRADSTEP_UID_BASE=str(uid_base(1900))) as base:
        assert run(base, "x = 1\n", "203.0.113.1") == 200
        assert run(base, "x = 2\n", "203.0.113.2") == 429  # the same client: this address


def test_trusted_proxy_charges_the_address_it_appended_not_the_clients_first_entry():
    with running_server(**ONE_RUN, GRADSTEP_TRUST_PROXY="1", GRADSTEP_UID_BASE=str(uid_base(1900))) as base:
        # nginx appends the address it saw; the entries before it are the client's to choose
        assert run(base, "x = 1\n", "1.1.1.1, 203.0.113.5") == 200
        assert run(base, "x = 2\n", "2.2.2.2, 203.0.113.5") == 429
        # two X-Forwarded-For headers read as one list: the proxy's entry is still the last
        assert run(base, "x = 3\n", ["3.3.3.3", "203.0.113.5"]) == 429
        assert run(base, "x = 4\n", "1.1.1.1, 203.0.113.6") == 200  # another client behind the proxy


def test_ipv6_addresses_of_one_64_share_one_budget():
    # a host picks any of its /64's 2^64 addresses: each used to get a budget of its own
    with running_server(**ONE_RUN, GRADSTEP_TRUST_PROXY="1", GRADSTEP_UID_BASE=str(uid_base(1900))) as base:
        assert run(base, "x = 1\n", "2001:db8:1:2::1") == 200
        assert run(base, "x = 2\n", "2001:db8:1:2:ffff:ffff:ffff:fffe") == 429  # the same /64
        assert run(base, "x = 3\n", "2001:db8:1:2:0:0:0:7") == 429
        assert run(base, "x = 4\n", "2001:db8:1:3::1") == 200  # the next /64: another subscriber
        assert run(base, "x = 5\n", "198.51.100.7") == 200
        assert run(base, "x = 6\n", "::ffff:198.51.100.7") == 429  # IPv4-mapped: the same IPv4 client


def test_one_ipv6_64_holds_one_addresss_connections_however_many_addresses_it_uses():
    """The connection cap (serving.SlowClientTimeout) counts an IPv6 client as its /64, as the rate
    and the queue do: a host that picks a new address of its /64 per connection gets no more."""
    import asyncio

    from gradstep.serving import TOO_MANY, protocol
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    class Transport(asyncio.Transport):
        def __init__(self, peer: str):
            super().__init__()
            self.peer, self.written, self.closed = peer, b"", False

        def get_extra_info(self, name, default=None):
            return {"peername": (self.peer, 1234), "sockname": ("::1", 8000)}.get(name, default)

        def write(self, data):
            self.written += data

        def close(self):
            self.closed = True

        def is_closing(self):
            return self.closed

    async def refused(peers: list[str]) -> list[bool]:
        async def app(scope, receive, send):  # never reached: no request is sent
            raise AssertionError

        config = Config(app, http="httptools")
        config.load()
        cls, state, out = protocol(10.0, per_address=1), ServerState(), []
        for peer in peers:
            conn = cls(config=config, server_state=state, app_state={}, _loop=asyncio.get_running_loop())
            transport = Transport(peer)
            conn.connection_made(transport)
            out.append(transport.written == TOO_MANY)
            conn._disarm()
        return out

    peers = ["2001:db8:1:2::a", "2001:db8:1:2::b", "2001:db8:1:3::a", "::ffff:198.51.100.7", "198.51.100.7"]
    assert asyncio.run(refused(peers)) == [False, True, False, False, True]
