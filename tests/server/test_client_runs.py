"""One client cannot hold every worker: on a real server with two workers, a client flooding it
with slow runs gets one under way, two waiting for it and the rest refused, and another client's
small run is answered while the flood's run still sleeps."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from testkit.browser_support import running_server
from testkit.sandbox_guard import guard_unavailable, uid_base

pytestmark = pytest.mark.skipif(guard_unavailable() is not None, reason=str(guard_unavailable()))

FLOODER = "127.0.0.2"  # another loopback address; the bystander's requests come from 127.0.0.1
SLOW = "import time\ntime.sleep(3)  # {}\n"


def test_a_flooding_client_leaves_a_worker_for_others():
    env = {"GRADSTEP_WORKERS": "2", "GRADSTEP_UID_BASE": str(uid_base(1980))}  # default: 1 run per client
    finished: list[str] = []
    statuses: list[int] = []
    with running_server(**env) as base:
        flood = httpx.Client(
            transport=httpx.HTTPTransport(local_address=FLOODER), timeout=60, trust_env=False
        )

        def slow(i: int) -> None:
            r = flood.post(f"{base}/api/trace", json={"code": SLOW.format(i)})
            statuses.append(r.status_code)
            if r.status_code == 200:
                finished.append("flood")

        threads = [threading.Thread(target=slow, args=(i,)) for i in range(5)]
        for t in threads:
            t.start()
        try:
            deadline = time.monotonic() + 60  # a safety net: the refusals come at once
            while len(statuses) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)  # the flood has arrived: one run sleeps, two wait, two were refused
            r = httpx.post(
                f"{base}/api/trace", json={"code": "x = 1  # bystander\n"}, timeout=60, trust_env=False
            )
            assert r.status_code == 200 and r.json()["status"] == "ok"
            finished.append("bystander")
        finally:
            for t in threads:
                t.join(60)
            flood.close()
    # one under way at a time, two waiting for it (ClientRuns.WAITING_PER_RUN), the rest refused at once
    assert sorted(statuses) == [200] * 3 + [429] * 2
    assert finished[0] == "bystander"  # answered while the flood's run still slept
