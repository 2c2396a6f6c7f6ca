"""What comes back from the shared cache is an entry the replicas wrote, bounded, or a miss.

Each test writes what an attacker who can reach Redis would write straight into a real
redis-server on loopback, then reads it back the way a replica does: a forged body (a real trace
of other code, relabelled) without a MAC or signed with another secret, a valid entry moved to
another key, a brotli bomb, an entry over the cap, a value of another type. Each is a miss and,
through the app, the server answers with its own run of the code (checked against plain torch).
"""

from __future__ import annotations

import asyncio
import os
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

import brotli
import gradstep
import orjson
import pytest
import redis
from gradstep import trace as trace_in_process
from gradstep.cache import RedisCache, TieredCache, cache_key
from gradstep.cache.memory import MemoryCache
from gradstep.cache.shared import MAGIC, PREFIX, encode_entry
from gradstep.encoding import BR, RATIO_FROM, TooLarge, compress, inflate
from gradstep.routes.trace import TraceOptions
from gradstep.runs import served_fields
from gradstep.settings import Settings, SettingsError
from testkit.cache_support import CODE, final_grad, plain_grad, redis_backed_client

SECRET = b"0123456789abcdef0123456789abcdef-replicas"
# What an attacker traces instead: other gradients, and output of its own.
EVIL = (
    "import torch\nx = torch.ones(3, requires_grad=True)\ny = (x * 7).sum()\ny.backward()\nprint('pwned')\n"
)


def trace_dict(code: str) -> dict:
    return orjson.loads(trace_in_process(code).model_dump_json())


def forged(code: str) -> bytes:
    """A real trace of EVIL, relabelled as ``code``'s (its server fields say so), as stored."""
    return compress(orjson.dumps({**trace_dict(EVIL), **served_fields(code)}))


def unsigned(key: str, stored: bytes) -> bytes:
    """``stored``'s brotli framed under the key with no MAC (the shared cache's layout before it had one)."""
    return MAGIC + key.encode() + b"\n" + stored[len(BR) :]


def moved(raw: bytes, src: str, dst: str) -> bytes:
    """An entry copied from key ``src`` to ``dst``, its framing's key rewritten if it names one."""
    return raw.replace(src.encode(), dst.encode())


def bomb(code: str) -> tuple[bytes, int]:
    """A valid trace of ``code`` padded with repeated steps to 15.5 MB of JSON, as stored (~1 KB),
    and its JSON's size: every read of it used to cost the full inflation, parse and validation."""
    t = {**trace_dict(code), **served_fields(code)}
    step = t["steps"][-1]
    unit = len(orjson.dumps(step)) + 1
    body = orjson.dumps({**t, "steps": t["steps"] + [step] * (15_500_000 // unit)})
    return BR + brotli.compress(body, quality=11, lgwin=24), len(body)


def run(coro):
    return asyncio.run(coro)


async def _get(cache, key, expect=None):
    try:
        return await cache.get(key, expect)
    finally:
        await cache.close()


@pytest.fixture
def raw(redis_server):
    with redis.Redis.from_url(redis_server.url) as client:
        client.flushdb()
        yield client


@pytest.fixture
def store(redis_server, raw):
    return RedisCache(redis_server.url, ttl=60, max_entry_bytes=1 << 20, secret=SECRET)


def rejected(cache: RedisCache, reason: str) -> int:
    return cache.stats()[f"rejected_{reason}"]


# -- the cache, read as a replica reads it ----------------------------------------------------------


def test_a_signed_entry_reads_back_as_written(store, raw):
    key, body = cache_key(CODE, {}), compress(orjson.dumps(trace_dict(CODE)))
    raw.set(PREFIX + key, encode_entry(key, body, SECRET))
    assert run(_get(store, key)) == body


def test_a_forged_entry_without_a_mac_is_a_miss(store, raw):
    key = cache_key(CODE, {})
    raw.set(PREFIX + key, unsigned(key, forged(CODE)))
    assert run(_get(store, key)) is None
    assert rejected(store, "forged") == 1


def test_a_forged_entry_signed_with_another_secret_is_a_miss(store, raw):
    key = cache_key(CODE, {})
    raw.set(PREFIX + key, encode_entry(key, forged(CODE), b"not the replicas' secret, 32 bytes+"))
    assert run(_get(store, key)) is None
    assert rejected(store, "forged") == 1


def test_a_signed_entry_with_its_body_changed_is_a_miss(store, raw):
    key = cache_key(CODE, {})
    entry = encode_entry(key, compress(orjson.dumps(trace_dict(CODE))), SECRET)
    mac_end = len(MAGIC) + 32
    raw.set(PREFIX + key, entry[:mac_end] + forged(CODE)[len(BR) :])
    assert run(_get(store, key)) is None
    assert rejected(store, "forged") == 1


def test_a_valid_entry_moved_to_another_key_is_a_miss(store, raw):
    src, dst = cache_key(EVIL, {}), cache_key(CODE, {})
    run(_put(store, src, compress(orjson.dumps(trace_dict(EVIL)))))
    raw.set(PREFIX + dst, moved(raw.get(PREFIX + src), src, dst))
    assert run(_get(store, dst)) is None
    assert rejected(store, "forged") == 1


async def _put(cache, key, body):
    try:
        await cache.put(key, body)
    finally:
        await cache.close()


def test_an_entry_written_back_after_its_signed_expiry_is_a_miss(store, raw):
    """Redis's TTL is not signed: a copy of a genuine entry, kept and written back (SET without EX)
    once the TTL has passed, used to verify. Its expiry is inside the MAC now."""
    key, body = cache_key(CODE, {}), compress(orjson.dumps(trace_dict(CODE)))
    raw.set(PREFIX + key, encode_entry(key, body, SECRET, ttl=-1))  # signed with a TTL that is over
    assert run(_get(store, key)) is None
    assert rejected(store, "expired") == 1


def test_an_entry_whose_expiry_is_moved_later_is_a_miss(store, raw):
    key, body = cache_key(CODE, {}), compress(orjson.dumps(trace_dict(CODE)))
    entry = encode_entry(key, body, SECRET, ttl=-1)
    at = len(MAGIC) + 32
    later = struct.pack(">Q", int(time.time()) + 3600)
    raw.set(PREFIX + key, entry[:at] + later + entry[at + 8 :])
    assert run(_get(store, key)) is None
    assert rejected(store, "forged") == 1


def test_an_entry_signed_with_the_caches_ttl_reads_back_until_then(store, raw):
    key, body = cache_key(CODE, {}), compress(orjson.dumps(trace_dict(CODE)))
    run(_put(store, key, body))
    (expiry,) = struct.unpack(">Q", raw.get(PREFIX + key)[len(MAGIC) + 32 : len(MAGIC) + 40])
    assert time.time() < expiry <= time.time() + store.ttl + 1
    assert run(_get(store, key)) == body


def test_an_unsigned_brotli_bomb_is_a_miss_without_being_inflated(store, raw):
    key = cache_key(CODE, {})
    stored, inflated = bomb(CODE)
    assert len(stored) < 1100 and inflated > 15_000_000
    raw.set(PREFIX + key, unsigned(key, stored))
    start = time.process_time()
    assert run(_get(store, key)) is None
    assert time.process_time() - start < 0.2  # it cost 0.85 s of CPU here, on every read
    assert rejected(store, "forged") == 1


def test_a_signed_brotli_bomb_is_a_miss_found_while_inflating(store, raw):
    # A replica never keeps a trace inflating more than encoding.MAX_RATIO times its size past
    # RATIO_FROM: one that does is refused once the inflation passes that bound, not after.
    key = cache_key(CODE, {})
    stored, _ = bomb(CODE)
    raw.set(PREFIX + key, encode_entry(key, stored, SECRET))
    start = time.process_time()
    assert run(_get(store, key)) is None
    assert time.process_time() - start < 0.2
    assert rejected(store, "oversized") == 1


def test_inflating_stops_at_the_limit_with_more_to_come():
    stored, inflated = bomb(CODE)
    with pytest.raises(TooLarge):
        inflate(stored[len(BR) :], RATIO_FROM)
    assert len(inflate(stored[len(BR) :], inflated)) == inflated  # exactly the limit is whole


def test_an_entry_over_the_cap_is_a_miss_and_no_more_than_the_cap_is_read(redis_server, raw):
    cap = 64 << 10
    cache = RedisCache(redis_server.url, ttl=60, max_entry_bytes=cap, secret=SECRET)
    key = cache_key(CODE + "# big\n", {})
    t = {**trace_dict(CODE), "stdout": os.urandom(1 << 20).hex()}  # does not compress: a 1 MB entry
    entry = encode_entry(key, compress(orjson.dumps(t)), SECRET)
    assert len(entry) > 16 * cap
    raw.set(PREFIX + key, entry)
    sent = raw.info("stats")["total_net_output_bytes"]
    assert run(_get(cache, key)) is None
    assert raw.info("stats")["total_net_output_bytes"] - sent < cap + 4096  # (and INFO's own reply)
    assert rejected(cache, "oversized") == 1


def test_a_value_of_another_type_is_a_miss_not_an_outage(store, raw):
    key = cache_key(CODE, {})
    raw.rpush(PREFIX + key, b"not a string")
    assert run(_get(store, key)) is None
    stats = store.stats()
    assert (stats["rejected_invalid"], stats["errors"], stats["available"]) == (1, 0, True)


def test_a_signed_entry_for_other_code_than_expected_is_a_miss(store, raw):
    key = cache_key(CODE, {})
    # signed (a replica's bug, or a leaked secret), but its server fields are another code's
    raw.set(PREFIX + key, encode_entry(key, compress(orjson.dumps(trace_dict(EVIL))), SECRET))
    assert run(_get(store, key, expect=served_fields(CODE))) is None
    assert rejected(store, "foreign") == 1


def test_a_signed_entry_with_the_expected_fields_is_a_hit_kept_locally(store, raw):
    key, body = cache_key(CODE, {}), compress(orjson.dumps({**trace_dict(CODE), **served_fields(CODE)}))
    raw.set(PREFIX + key, encode_entry(key, body, SECRET))
    tiered = TieredCache(MemoryCache(1 << 20, 60), store)
    assert run(_get(tiered, key, expect=served_fields(CODE))) == body
    assert tiered.local.get_now(key) == body


def test_a_secret_shorter_than_32_bytes_is_refused():
    with pytest.raises(ValueError, match="GRADSTEP_CACHE_SECRET"):
        RedisCache("redis://127.0.0.1:6379/0", ttl=60, max_entry_bytes=1 << 20, secret=b"short")


# -- through the app: the server answers with its own run ------------------------------------------


@pytest.fixture(scope="module")
def app_client(redis_server):
    yield from redis_backed_client(redis_server.url, SECRET, cache_entry_bytes=64 << 10, health_detail=True)


def app_key(client, code: str) -> str:
    return cache_key(code, TraceOptions().model_dump(), client.app.state.settings.result_caps())


def shared_stats(client) -> dict:
    return client.app.state.cache.shared.stats()


def answers_with_its_own_run(client, code: str) -> None:
    r = client.post("/api/trace", json={"code": code})
    assert r.status_code == 200
    assert r.headers["x-gradstep-cache"] == "miss"
    assert final_grad(r.content, "x") == plain_grad(code, "x")
    assert "pwned" not in r.content.decode(errors="replace")


def test_the_app_does_not_serve_a_forged_entry_without_a_mac(app_client, redis_server):
    code, before = CODE + "# forged\n", shared_stats(app_client)["rejected_forged"]
    with redis.Redis.from_url(redis_server.url) as client:
        client.set(PREFIX + app_key(app_client, code), unsigned(app_key(app_client, code), forged(code)))
    answers_with_its_own_run(app_client, code)
    assert shared_stats(app_client)["rejected_forged"] == before + 1


def test_the_app_does_not_serve_a_valid_entry_moved_to_another_key(app_client, redis_server):
    code, other = CODE + "# moved here\n", EVIL + "# moved from here\n"
    src, dst = app_key(app_client, other), app_key(app_client, code)
    assert app_client.post("/api/trace", json={"code": other}).headers["x-gradstep-cache"] == "miss"
    with redis.Redis.from_url(redis_server.url) as client:
        client.set(PREFIX + dst, moved(client.get(PREFIX + src), src, dst))
    answers_with_its_own_run(app_client, code)


def test_the_app_does_not_serve_a_brotli_bomb(app_client, redis_server):
    code = CODE + "# bomb\n"
    stored, _ = bomb(code)
    with redis.Redis.from_url(redis_server.url) as client:
        client.set(PREFIX + app_key(app_client, code), unsigned(app_key(app_client, code), stored))
    answers_with_its_own_run(app_client, code)


def test_the_app_does_not_serve_an_entry_over_its_cap(app_client, redis_server):
    code = CODE + "# over the cap\n"
    key = app_key(app_client, code)
    t = {**trace_dict(code), **served_fields(code), "stdout": "pwned " + os.urandom(256 << 10).hex()}
    with redis.Redis.from_url(redis_server.url) as client:
        client.set(PREFIX + key, encode_entry(key, compress(orjson.dumps(t)), SECRET))  # valid, but too big
    before = shared_stats(app_client)["rejected_oversized"]
    answers_with_its_own_run(app_client, code)
    assert shared_stats(app_client)["rejected_oversized"] == before + 1


def test_the_app_serves_an_entry_another_replica_signed(app_client, redis_server):
    code = CODE + "# signed by another replica\n"
    key, body = app_key(app_client, code), compress(orjson.dumps({**trace_dict(code), **served_fields(code)}))
    with redis.Redis.from_url(redis_server.url) as client:
        client.set(PREFIX + key, encode_entry(key, body, SECRET))
    r = app_client.post("/api/trace", json={"code": code})
    assert r.headers["x-gradstep-cache"] == "hit"
    assert final_grad(r.content, "x") == plain_grad(code, "x")


def test_the_app_does_not_serve_an_entry_replayed_after_its_expiry(app_client, redis_server):
    code = CODE + "# replayed\n"
    key, body = app_key(app_client, code), compress(orjson.dumps({**trace_dict(EVIL), **served_fields(code)}))
    with redis.Redis.from_url(redis_server.url) as client:
        client.set(PREFIX + key, encode_entry(key, body, SECRET, ttl=-60))  # genuine, signed long ago
    before = shared_stats(app_client)["rejected_expired"]
    answers_with_its_own_run(app_client, code)
    assert shared_stats(app_client)["rejected_expired"] == before + 1


def test_the_secret_is_not_in_healthz(app_client):
    health = app_client.get("/healthz")
    assert health.json()["cache"]["shared"]["kind"] == "redis"
    assert SECRET.decode() not in health.text
    assert SECRET.decode() not in repr(app_client.app.state.settings)


# -- start-up: the secret setting ------------------------------------------------------------------


def serve(**env: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join(
        [str(Path(gradstep.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
    )
    return subprocess.run(
        [sys.executable, "-m", "gradstep", "serve", "--port", "0"],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": path, **env},
        capture_output=True,
        timeout=60,
    )


def test_the_server_refuses_to_start_with_a_cache_url_and_no_secret():
    r = serve(GRADSTEP_CACHE_URL="redis://127.0.0.1:6379/0")
    assert r.returncode == 2
    assert "GRADSTEP_CACHE_SECRET: not set; with GRADSTEP_CACHE_URL set" in r.stderr.decode()
    assert "at least 32 bytes" in r.stderr.decode()


def test_the_server_refuses_a_short_secret_without_printing_it():
    r = serve(GRADSTEP_CACHE_URL="redis://127.0.0.1:6379/0", GRADSTEP_CACHE_SECRET="hunter2-hunter2")
    assert r.returncode == 2
    assert "GRADSTEP_CACHE_SECRET: 15 bytes given" in r.stderr.decode()
    assert "hunter2" not in r.stderr.decode() + r.stdout.decode()


def test_a_secret_is_read_from_the_environment_and_kept_out_of_repr(monkeypatch):
    monkeypatch.setenv("GRADSTEP_CACHE_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("GRADSTEP_CACHE_SECRET", SECRET.decode())
    s = Settings.from_env()
    assert s.cache_secret == SECRET.decode() and SECRET.decode() not in repr(s)


def test_without_a_cache_url_no_secret_is_needed():
    assert Settings().cache_secret == ""
    with pytest.raises(SettingsError, match="GRADSTEP_CACHE_SECRET"):
        Settings(cache_url="redis://127.0.0.1:6379/0", cache_secret="x" * 31)


# -- what deploy/ ships ------------------------------------------------------------------------------

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def rates(text: str) -> list[float]:
    """Every GRADSTEP_RATE a manifest sets (compose's `KEY: value`, Kubernetes' `{ name, value }`)."""
    return [float(v) for v in re.findall(r'GRADSTEP_RATE\b\W+(?:value:\s*)?"?([\d.]+)', text)]


def test_compose_takes_the_cache_secret_from_its_environment_and_requires_it():
    compose = (DEPLOY / "docker-compose.yml").read_text()
    assert re.search(r'GRADSTEP_CACHE_SECRET: "\$\{GRADSTEP_CACHE_SECRET:\?[^}]+\}"', compose)


def test_kubernetes_takes_the_cache_secret_from_a_secret():
    k8s = (DEPLOY / "k8s" / "gradstep.yaml").read_text()
    assert re.search(
        r"name: GRADSTEP_CACHE_SECRET\b.*\n\s*valueFrom: \{ secretKeyRef: \{ name: \S+, key: \S+ \} \}", k8s
    )


def test_compose_and_kubernetes_keep_a_per_client_run_limit():
    for manifest in (DEPLOY / "docker-compose.yml", DEPLOY / "k8s" / "gradstep.yaml"):
        assert all(rate > 0 for rate in rates(manifest.read_text())), manifest.name
    assert rates('      GRADSTEP_RATE: "0"') == [0.0]  # what compose shipped: the pattern finds it


def test_the_app_does_not_serve_a_signed_entry_of_other_code(app_client, redis_server):
    # signed (a replica's bug, or a leaked secret), but its code, numbers and output are EVIL's
    code = CODE + "# signed, but another code's trace\n"
    key = app_key(app_client, code)
    with redis.Redis.from_url(redis_server.url) as client:
        client.set(PREFIX + key, encode_entry(key, compress(orjson.dumps(trace_dict(EVIL))), SECRET))
    before = shared_stats(app_client)["rejected_foreign"]
    answers_with_its_own_run(app_client, code)
    assert shared_stats(app_client)["rejected_foreign"] == before + 1
