"""A small request cannot make the server send a lot for little, nor tell a stranger what others ran
(issue 47, items 5 and 6).

Each test attempts it against a real server (`gradstep serve`, its sandbox in the tests' uid
range): a 120-byte snippet whose trace inflates to ~1.7 MB, asked for again and again by a
client that takes no encoding, pulls at most its budget's worth of bytes (it pulled 1.7 MB per
twentieth of a run); whether an answer was cached (``X-Gradstep-Cache``) and what its parts took
(``Server-Timing``) go only to a local request.
"""

from __future__ import annotations

import httpx
import pytest
from gradstep.traces import SEND_BYTES
from testkit.browser_support import running_server
from testkit.sandbox_guard import guard_unavailable, uid_base

pytestmark = pytest.mark.skipif(guard_unavailable() is not None, reason=str(guard_unavailable()))

# ~1.7 MB of trace JSON, ~40 KB as brotli, from 120 characters of code
BIG_TRACE = (
    "import torch\nx = torch.ones(3, requires_grad=True)\ny = x\nfor i in range(4000):\n"
    "    y = y * 1.0 + x\ny.sum().backward()\n"
)
TRIVIAL = "import torch\nx = torch.ones(2, requires_grad=True)\n(x * 3).sum().backward()\n"
BURST = 4


def pulled(client: httpx.Client, url: str, code: str) -> tuple[int, int]:
    """(status, bytes of JSON received) of one request taking no encoding; a response cut off part-way
    counts what arrived."""
    got, status = 0, 0
    try:
        with client.stream("POST", url, json={"code": code}, headers={"accept-encoding": "identity"}) as r:
            status = r.status_code
            for chunk in r.iter_raw():
                got += len(chunk)
    except httpx.HTTPError:  # the server stopped sending: the client's budget ran out mid-way
        pass
    return status, got


def test_a_cached_trace_sent_uncompressed_costs_its_client_its_bytes():
    env = {"GRADSTEP_RATE": "0.001", "GRADSTEP_BURST": str(BURST), "GRADSTEP_WORKERS": "1"}
    with running_server(**env, GRADSTEP_UID_BASE=str(uid_base(2280))) as base:
        url = f"{base}/api/trace"
        me = httpx.Client(
            transport=httpx.HTTPTransport(local_address="127.0.0.5"), trust_env=False, timeout=120
        )
        first = me.post(url, json={"code": BIG_TRACE}, headers={"accept-encoding": "br"})
        assert first.status_code == 200 and first.json()["status"] == "ok"  # one run of its 4
        size = len(first.content)  # httpx decoded the brotli: the JSON's size
        assert size > SEND_BYTES
        attempts = [pulled(me, url, BIG_TRACE) for _ in range(20)]
        total = sum(got for _, got in attempts)
        # its whole budget buys at most BURST * SEND_BYTES of sending (and a chunk per request);
        # at a hit's old price the 20 requests pulled 20 full traces
        assert total <= BURST * SEND_BYTES + 20 * (64 << 10)
        assert attempts[0] == (200, size)  # paid for: served whole
        assert attempts[-1][0] == 429  # then refused
        # the same answer compressed costs its 40 KB: another client gets it many times over
        other = httpx.Client(
            transport=httpx.HTTPTransport(local_address="127.0.0.6"), trust_env=False, timeout=120
        )
        compressed = [
            other.post(url, json={"code": BIG_TRACE}, headers={"accept-encoding": "br"}) for _ in range(10)
        ]
        assert [r.status_code for r in compressed] == [200] * 10


def test_whether_an_answer_was_cached_is_told_only_to_a_local_request():
    with running_server(GRADSTEP_WORKERS="1", GRADSTEP_UID_BASE=str(uid_base(2280))) as base:
        url = f"{base}/api/trace"
        # a request a proxy forwarded (nginx on this host adds the header): a stranger's
        stranger = {"x-forwarded-for": "203.0.113.40"}
        for code in (TRIVIAL, TRIVIAL + "# other\n"):
            miss = httpx.post(url, json={"code": code}, headers=stranger, timeout=120, trust_env=False)
            hit = httpx.post(url, json={"code": code}, headers=stranger, timeout=120, trust_env=False)
            for r in (miss, hit):
                assert r.status_code == 200
                assert "x-gradstep-cache" not in r.headers and "server-timing" not in r.headers
            assert miss.content == hit.content  # the answer itself is the same either way
        local = httpx.post(
            url, json={"code": TRIVIAL}, timeout=120, trust_env=False
        )  # the operator, on the host
        assert local.headers["x-gradstep-cache"] == "hit"
        fresh = httpx.post(url, json={"code": TRIVIAL + "# local\n"}, timeout=120, trust_env=False)
        assert fresh.headers["x-gradstep-cache"] == "miss" and "run" in fresh.headers["server-timing"]
