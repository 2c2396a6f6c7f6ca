"""Scale-out for real: Debian's nginx (deploy/nginx/nginx.conf) in front of two `gradstep serve`
replicas sharing a redis-server, all on loopback, started (and installed, if needed) by the test.

A trace computed through one replica is served from the cache by the other; a replica killed in
the middle of a load run loses only the requests it was running (nginx never re-sends a POST
that reached a replica, and retries everything else on the survivor); Redis stopped in the
middle of a run costs nothing but cache hits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
import pytest
from gradstep.schema import Trace
from testkit import truth
from testkit.sandbox_guard import uid_base
from testkit.services import Nginx, RedisServer, installed

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from harness import Server  # noqa: E402

CODE = "import torch\nx = torch.ones(3, requires_grad=True)\ny = (x * x * 3).sum()\ny.backward()\n"
GRACE = 0.5  # seconds for nginx to see a killed replica's connections closed
SNIPPETS = Path(__file__).resolve().parents[2] / "snippets"
UID_BASES = (uid_base(200), uid_base(300))  # away from uid_base(0), which the other server tests use


def plain_grad(code: str) -> list[float]:
    scope: dict = {}
    exec(compile(code, "<plain>", "exec"), scope)
    return scope["x"].grad.tolist()


def final_grad(body: bytes) -> list[float] | None:
    last = Trace.model_validate_json(body).steps[-1]
    return next((t.grad.values for t in last.tensors.rows() if t.name == "x" and t.grad), None)


@dataclass
class Cluster:
    redis: RedisServer
    replicas: list[Server]
    nginx: Nginx


@pytest.fixture(scope="module")
def cluster():
    installed("nginx", "redis-server")
    with contextlib.ExitStack() as stack:
        redis = stack.enter_context(RedisServer())
        # every load client is 127.0.0.1: as many runs under way per client as the load makes
        env = {
            "GRADSTEP_CACHE_URL": redis.url,
            "GRADSTEP_CACHE_SECRET": secrets.token_hex(32),  # one for both replicas: they share entries
            "GRADSTEP_TRUST_PROXY": "1",
            "GRADSTEP_QUEUE": "64",
            "GRADSTEP_CLIENT_RUNS": "64",
        }
        replicas = [Server(1, env, uid_base=base) for base in UID_BASES]
        for r in replicas:
            stack.callback(r.remove_cgroups)  # a killed replica leaves its sandbox's cgroups
            stack.callback(r.__exit__)
            r.launch()  # both import torch at once
        for r in replicas:
            r.wait_ready()
        upstreams = [f"127.0.0.1:{r.port}" for r in replicas]
        # the load below comes from one address: lift the per-client limit for it
        nginx = stack.enter_context(Nginx(upstreams, rate="10000r/s"))
        yield Cluster(redis, replicas, nginx)


def post(url: str, code: str) -> httpx.Response:
    return httpx.post(f"{url}/api/trace", json={"code": code}, timeout=60, trust_env=False)


# -- load ----------------------------------------------------------------------------------------


@dataclass
class Outcome:
    started: float
    ended: float
    status: int  # 0: no HTTP response at all
    body: bytes = b""
    error: str = ""  # the client's exception when there was no response


@dataclass
class Load:
    outcomes: list[Outcome] = field(default_factory=list)
    event_at: float = 0.0  # when the mid-run event (a kill) was set off

    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status != 200 or orjson.loads(o.body).get("status") != "ok"]


async def _client(url: str, cid: int, deadline: float, load: Load, repeat_every: int) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60, trust_env=False) as client:
        n = 0
        while time.monotonic() < deadline:
            n += 1
            # most requests run a new snippet; some repeat one (cache hits, or runs when Redis is down)
            tag = "repeat" if n % repeat_every == 0 else f"{cid}-{n}-{os.urandom(3).hex()}"
            code = f"{CODE}# load {tag}\n"
            start = time.monotonic()
            try:
                r = await client.post("/api/trace", json={"code": code})
                load.outcomes.append(Outcome(start, time.monotonic(), r.status_code, r.content))
            except httpx.HTTPError as e:
                load.outcomes.append(Outcome(start, time.monotonic(), 0, error=repr(e)))


def run_load(url: str, clients: int, seconds: float, event_after: float, event) -> Load:
    load = Load()

    async def main():
        deadline = time.monotonic() + seconds

        async def trigger():
            await asyncio.sleep(event_after)
            load.event_at = time.monotonic()
            await asyncio.to_thread(event)

        await asyncio.gather(trigger(), *(_client(url, i, deadline, load, 4) for i in range(clients)))

    asyncio.run(main())
    return load


# -- tests ---------------------------------------------------------------------------------------


def test_a_trace_computed_through_one_replica_is_served_from_the_cache_by_the_other(cluster):
    code = CODE + f"# shared {os.urandom(4).hex()}\n"
    first, second = (post(r.url, code) for r in cluster.replicas)
    assert (first.headers["x-gradstep-cache"], second.headers["x-gradstep-cache"]) == ("miss", "hit")
    assert second.content == first.content
    assert final_grad(second.content) == plain_grad(code)


def test_apply_fix_on_the_other_replica_gets_the_run_that_verified_the_fix(cluster):
    code = (SNIPPETS / "backward_twice_fails.py").read_text() + f"# apply fix {os.urandom(4).hex()}\n"
    fix = Trace.model_validate_json(post(cluster.replicas[0].url, code).content).diagnoses[0].fixes[0]
    applied = post(cluster.replicas[1].url, fix.code)  # what Apply fix sends, to the other replica
    assert applied.headers["x-gradstep-cache"] == "verified"  # not run in its sandbox again
    fixed, plain = orjson.loads(applied.content), truth.run_plain(fix.code)
    assert fixed["status"] == "ok" and plain.error is None
    assert truth.mismatches(fixed, plain) == []


def test_nginx_spreads_requests_over_both_replicas(cluster):
    for i in range(6):
        assert post(cluster.nginx.url, CODE + f"# spread {i} {os.urandom(4).hex()}\n").status_code == 200
    served_by = {
        line.split("upstream=")[1].split()[0] for line in cluster.nginx.access_log.read_text().splitlines()
    }
    assert {f"127.0.0.1:{r.port}" for r in cluster.replicas} <= served_by


def test_nginx_limits_runs_per_client_with_a_json_429_and_retry_after(cluster):
    code = CODE + "# rate\n"
    post(cluster.replicas[0].url, code)  # cached: what is measured is nginx's limit, not the runs

    async def burst(url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, timeout=60, trust_env=False) as client:
            return await asyncio.gather(*(client.post("/api/trace", json={"code": code}) for _ in range(80)))

    with Nginx([f"127.0.0.1:{r.port}" for r in cluster.replicas]) as limited:  # the config's own rate
        responses = asyncio.run(burst(limited.url))
    refused = [r for r in responses if r.status_code == 429]
    assert refused and len(refused) < len(responses)
    assert all(r.headers["retry-after"] == "1" and "Too many runs" in r.json()["error"] for r in refused)


def test_nginx_refuses_a_body_over_the_apps_limit_with_a_json_413(cluster):
    r = post(cluster.nginx.url, "#" * (64 * 1024 + 1))
    assert r.status_code == 413
    assert "64 KB" in r.json()["error"]


def test_versioned_static_files_are_cached_for_good_and_others_revalidate(cluster):
    with httpx.Client(base_url=cluster.nginx.url, trust_env=False) as client:
        versioned = client.get("/static/app.js?v=build1")
        plain = client.get("/static/app.js")
    assert versioned.status_code == plain.status_code == 200
    assert "immutable" in versioned.headers["cache-control"]
    assert plain.headers["cache-control"] == "no-cache"


def test_stopping_redis_mid_run_keeps_every_request_answered(cluster):
    load = run_load(cluster.nginx.url, clients=4, seconds=4, event_after=1.5, event=cluster.redis.kill)
    after = [o for o in load.outcomes if o.started > load.event_at]
    assert after, "no request was made after Redis stopped"
    assert load.failed() == []
    health = httpx.get(f"{cluster.replicas[0].url}/healthz", trust_env=False).json()
    assert health["cache"]["shared"]["errors"] >= 1


def test_killing_a_replica_mid_load_loses_no_request_nginx_can_retry(cluster):
    victim, survivor = cluster.replicas

    def kill_victim():
        os.kill(victim.pid, signal.SIGKILL)
        victim.proc.wait()

    clients = 6
    load = run_load(cluster.nginx.url, clients=clients, seconds=5, event_after=1.5, event=kill_victim)
    after = [o for o in load.outcomes if o.started > load.event_at]
    assert len(after) >= clients, "too few requests after the kill to say anything"
    failed = load.failed()
    # only requests the victim had already received may fail: those in flight at the kill (and, in
    # the instant before nginx sees the victim's connections close, one sent on such a connection)...
    assert all(o.started <= load.event_at + GRACE for o in failed)
    assert len(failed) <= clients
    # ...and they fail with nginx's readable 503, which a client may retry, but for a response the
    # victim had begun to send: nginx has passed its status line on and can only cut the connection
    nginx_log = (cluster.nginx.dir / "error.log").read_text()
    cut = nginx_log.count("while reading upstream")
    assert all(o.started <= load.event_at for o in failed if o.status == 0)
    assert len([o for o in failed if o.status == 0]) <= cut, (failed, nginx_log[-3000:])
    assert all(o.status == 503 and b"try again" in o.body for o in failed if o.status != 0), failed
    r = post(cluster.nginx.url, CODE + "# after the kill\n")
    assert r.status_code == 200 and final_grad(r.content) == plain_grad(CODE)
    assert httpx.get(f"{survivor.url}/healthz", trust_env=False).json()["status"] == "ok"
