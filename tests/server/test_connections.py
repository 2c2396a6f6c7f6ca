"""One address cannot hold every connection a real server takes: half-open connections from one
address past its cap are refused at once, while another address is still answered."""

from __future__ import annotations

import socket
import time

import httpx
import pytest
from testkit.browser_support import running_server
from testkit.sandbox_guard import guard_unavailable, uid_base

pytestmark = pytest.mark.skipif(guard_unavailable() is not None, reason=str(guard_unavailable()))

PER_ADDRESS, MAX = 16, 100
ATTACKER = "127.0.0.2"  # another loopback address: the tests' own requests come from 127.0.0.1


def half_open(port: int, n: int) -> list[socket.socket]:
    conns = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(ATTACKER, 0))
        s.sendall(b"POST /api/trace HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        conns.append(s)
    return conns


def answered_503(s: socket.socket) -> bool:
    s.settimeout(5)
    try:
        return s.recv(4096).startswith(b"HTTP/1.1 503")
    except TimeoutError:
        return False  # held open: the server is still waiting for its headers


def test_half_open_connections_from_one_address_do_not_lock_others_out():
    env = {
        "GRADSTEP_CLIENT_CONNECTIONS": str(PER_ADDRESS),
        "GRADSTEP_MAX_CONNECTIONS": str(MAX),
        "GRADSTEP_WORKERS": "1",
        "GRADSTEP_UID_BASE": str(uid_base(1950)),
    }
    with running_server(**env) as base:
        port = int(base.rsplit(":", 1)[1])
        conns = half_open(port, MAX + 20)  # more than the server takes in all
        try:
            time.sleep(0.5)
            start = time.monotonic()
            r = httpx.get(f"{base}/healthz", timeout=5, trust_env=False)
            assert r.status_code == 200, "another address was locked out"
            assert time.monotonic() - start < 5
            refused = [answered_503(s) for s in conns[PER_ADDRESS : PER_ADDRESS + 5]]
            assert all(refused), "connections past the address's cap were held, not refused"
        finally:
            for s in conns:
                s.close()
