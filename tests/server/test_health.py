"""/healthz tells any client only what a load balancer needs; the detail (layers, counts, paths a
run's root holds, the cache) goes to a local request, or to all with GRADSTEP_HEALTH_DETAIL."""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient
from gradstep.app import create_app
from gradstep.settings import Settings
from testkit.browser_support import running_server
from testkit.sandbox_guard import guard_unavailable, uid_base

pytestmark = pytest.mark.skipif(guard_unavailable() is not None, reason=str(guard_unavailable()))

PUBLIC = {"status", "version"}


@pytest.fixture(scope="module")
def app():
    with TestClient(create_app(Settings(workers=1, rate=0, uid_base=uid_base(1990)))) as c:
        yield c.app


def ask(app, client=("203.0.113.9", 40000), **headers) -> dict:
    # no `with`: the app was started once, by the fixture's client (a second lifespan would stop it)
    return TestClient(app, client=client).get("/healthz", headers=headers).json()


def test_a_remote_client_gets_the_status_and_nothing_else(app):
    body = ask(app)
    assert set(body) == PUBLIC and body["status"] == "ok"


def test_a_local_client_gets_the_detail(app):
    body = ask(app, client=("127.0.0.1", 40000))
    assert body["sandbox"]["layers"] and "cache" in body


def test_a_request_a_proxy_forwarded_from_loopback_is_not_local(app):
    # nginx on the same host connects from 127.0.0.1 and says whom it forwards
    assert set(ask(app, client=("127.0.0.1", 40000), **{"x-forwarded-for": "203.0.113.9"})) == PUBLIC


def test_the_detail_for_every_client_is_a_setting():
    settings = Settings(workers=1, rate=0, uid_base=uid_base(1990), health_detail=True)
    with TestClient(create_app(settings), client=("203.0.113.9", 40000)) as c:
        assert "sandbox" in c.get("/healthz").json()


def test_a_real_server_answers_another_address_publicly():
    with running_server(GRADSTEP_WORKERS="1", GRADSTEP_UID_BASE=str(uid_base(1990))) as base:
        remote = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), trust_env=False)
        # 127.0.0.2 is loopback too: what a stranger sees is shown by the forwarded header nginx adds
        seen = remote.get(f"{base}/healthz", headers={"x-forwarded-for": "198.51.100.7"}).json()
        assert set(seen) == PUBLIC
        assert "visible" in httpx.get(f"{base}/healthz", trust_env=False).json()["sandbox"]
