"""The trace cache: in-process by default, shared through a real redis-server when GRADSTEP_CACHE_URL is set.

Whatever is read back from Redis is checked before it is served; a corrupt or
foreign entry and a Redis that is down are misses, never errors.
"""

from __future__ import annotations

import asyncio
import gzip

import brotli
import orjson
import pytest
import redis
from fastapi.testclient import TestClient
from gradstep import trace as trace_in_process
from gradstep.app import create_app
from gradstep.cache import MemoryCache, RedisCache, TieredCache, cache_key, open_cache, shared
from gradstep.cache.shared import PREFIX, encode_entry
from gradstep.encoding import BR, Encoded, compress, decompress, with_gzip
from gradstep.routes.trace import TraceOptions
from gradstep.settings import Settings
from testkit.cache_support import CODE, SECRET, final_grad, plain_grad, redis_backed_client
from testkit.sandbox_guard import uid_base
from testkit.services import free_port


def trace_bytes(code: str) -> bytes:
    """A trace as the caches hold it: compressed, as served (gradstep.encoding)."""
    return compress(trace_in_process(code).model_dump_json().encode())


@pytest.fixture
def store(redis_server):
    redis.Redis.from_url(redis_server.url).flushdb()
    return RedisCache(redis_server.url, ttl=60, max_entry_bytes=1 << 20, secret=SECRET)


@pytest.fixture
def raw(redis_server):
    with redis.Redis.from_url(redis_server.url) as client:
        yield client


def run(coro):
    return asyncio.run(coro)


async def _get_then_close(cache, key):
    try:
        return await cache.get(key)
    finally:
        await cache.close()


async def _put_then_close(cache, key, body):
    try:
        await cache.put(key, body)
    finally:
        await cache.close()


def test_a_trace_put_in_redis_comes_back_as_its_brotli_encoding_byte_for_byte(store):
    body, key = trace_bytes(CODE), cache_key(CODE, {})
    run(_put_then_close(store, key, with_gzip(body)))  # gzip made for a client stays local
    back = run(_get_then_close(store, key))
    assert back == body and Encoded.unpack(back).gzip is None
    assert final_grad(back, "x") == final_grad(body, "x") == plain_grad(CODE, "x")


def test_an_entry_past_the_off_loop_size_round_trips_through_a_worker_thread(store, monkeypatch):
    monkeypatch.setattr(shared, "OFF_LOOP_BYTES", 0)  # every entry takes the large-entry path
    body, key = trace_bytes(CODE), cache_key(CODE + "# large\n", {})
    run(_put_then_close(store, key, body))
    assert run(_get_then_close(store, key)) == body


def test_an_absent_key_is_a_miss(store):
    assert run(_get_then_close(store, cache_key("never stored", {}))) is None
    assert store.stats()["misses"] == 1


def test_entries_are_stored_with_the_cache_ttl(store, raw):
    key = cache_key(CODE, {"ttl": 1})
    run(_put_then_close(store, key, trace_bytes(CODE)))
    assert 0 < raw.ttl(PREFIX + key) <= 60


def test_an_entry_stored_under_another_key_is_a_miss(store, raw):
    body = trace_bytes(CODE)
    mine, other = cache_key(CODE, {}), cache_key(CODE + "# other\n", {})
    raw.set(PREFIX + mine, encode_entry(other, body, SECRET))
    assert run(_get_then_close(store, mine)) is None
    assert store.stats()["rejected"] == 1


def test_garbage_under_the_key_is_a_miss(store, raw):
    key = cache_key(CODE, {})
    raw.set(PREFIX + key, b"\x00\xffnot an entry at all")
    assert run(_get_then_close(store, key)) is None


def test_a_well_framed_entry_that_is_not_a_trace_is_a_miss(store, raw):
    key = cache_key(CODE, {})
    raw.set(PREFIX + key, encode_entry(key, compress(orjson.dumps({"version": 1, "steps": "no"})), SECRET))
    assert run(_get_then_close(store, key)) is None
    assert store.stats()["rejected"] == 1


def test_a_truncated_entry_is_a_miss(store, raw):
    key = cache_key(CODE, {})
    raw.set(PREFIX + key, encode_entry(key, trace_bytes(CODE), SECRET)[:-20])
    assert run(_get_then_close(store, key)) is None


def test_an_entry_that_inflates_past_the_cap_is_a_miss(store, raw):
    key = cache_key(CODE, {})
    bomb = encode_entry(key, BR + brotli.compress(b" " * (4 * shared.MAX_TRACE_BYTES), quality=5), SECRET)
    assert len(bomb) < 1024
    raw.set(PREFIX + key, bomb)
    assert run(_get_then_close(store, key)) is None


def test_an_entry_with_bytes_after_its_brotli_stream_is_a_miss(store, raw):
    key = cache_key(CODE, {})
    raw.set(PREFIX + key, encode_entry(key, trace_bytes(CODE), SECRET) + b"{}")
    assert run(_get_then_close(store, key)) is None


def test_an_entry_of_the_gzip_format_before_is_a_miss(store, raw):
    key = cache_key(CODE, {})
    old = b"gradstep-trace/2\n" + key.encode() + b"\n" + gzip.compress(decompress(trace_bytes(CODE)))
    raw.set(PREFIX + key, old)
    assert run(_get_then_close(store, key)) is None


def test_an_entry_over_the_size_cap_is_not_stored(redis_server, raw):
    cache = RedisCache(redis_server.url, ttl=60, max_entry_bytes=64, secret=SECRET)
    key = cache_key(CODE + "# big\n", {})
    run(_put_then_close(cache, key, trace_bytes(CODE)))
    assert raw.exists(PREFIX + key) == 0
    assert cache.stats()["too_big"] == 1


def test_an_unreachable_redis_is_a_miss_and_is_left_alone_for_a_while():
    cache = RedisCache(
        f"redis://127.0.0.1:{free_port()}/0", ttl=60, max_entry_bytes=1 << 20, secret=SECRET, pause=60
    )
    key = cache_key(CODE, {})

    async def twice():
        try:
            return await cache.get(key), await cache.get(key)
        finally:
            await cache.close()

    assert run(twice()) == (None, None)
    stats = cache.stats()
    assert (stats["errors"], stats["skipped"], stats["available"]) == (1, 1, False)


def test_a_put_to_an_unreachable_redis_does_not_raise():
    cache = RedisCache(f"redis://127.0.0.1:{free_port()}/0", ttl=60, max_entry_bytes=1 << 20, secret=SECRET)
    run(_put_then_close(cache, cache_key(CODE, {}), trace_bytes(CODE)))
    assert cache.stats()["errors"] == 1


def test_a_cache_url_that_is_not_redis_is_refused_with_its_setting_named():
    with pytest.raises(ValueError, match="GRADSTEP_CACHE_URL"):
        open_cache(Settings(cache_url="http://localhost:6379", cache_secret=SECRET.decode()))


def test_without_a_url_the_cache_is_in_process_only():
    assert isinstance(open_cache(Settings()), MemoryCache)


def test_a_shared_hit_is_kept_in_the_local_tier(store):
    body, key = trace_bytes(CODE), cache_key(CODE, {})
    run(_put_then_close(store, key, body))
    tiered = TieredCache(MemoryCache(1 << 20, 60), store)
    assert run(_get_then_close(tiered, key)) == body
    assert tiered.local.get_now(key) == body


def test_a_refresh_replaces_a_local_entry_only_while_it_is_held(store):
    body, key = trace_bytes(CODE), cache_key(CODE + "# refresh\n", {})
    tiered = TieredCache(MemoryCache(1 << 20, 60), store)
    tiered.refresh(key, with_gzip(body))
    assert tiered.local.get_now(key) is None, "nothing to refresh: not added"
    run(_put_then_close(tiered, key, body))
    tiered.refresh(key, with_gzip(body))
    assert tiered.local.get_now(key) == with_gzip(body)
    assert tiered.local.stats()["bytes"] == len(with_gzip(body))


def test_the_memory_cache_drops_entries_older_than_the_ttl():
    cache = MemoryCache(1 << 20, ttl=0)
    cache.put_now("k", b"trace")
    assert cache.get_now("k") is None


def test_the_memory_cache_evicts_the_least_recently_used_first():
    cache = MemoryCache(40, ttl=60)
    for key in ("a", "b", "c", "d"):
        cache.put_now(key, b"0123456789")
    cache.get_now("a")
    cache.put_now("e", b"0123456789")
    assert [k for k in "abcde" if cache.get_now(k) is not None] == ["a", "c", "d", "e"]


# -- through the app --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_client(redis_server):
    yield from redis_backed_client(redis_server.url)


def test_a_trace_another_process_computed_is_served_from_redis(shared_client, redis_server):
    code = CODE + "# computed elsewhere\n"
    caps = shared_client.app.state.settings.result_caps()
    with redis.Redis.from_url(redis_server.url) as client:
        client.set(
            PREFIX + cache_key(code, _default_options(), caps),
            encode_entry(cache_key(code, _default_options(), caps), trace_bytes(code), SECRET),
        )
    r = shared_client.post("/api/trace", json={"code": code})
    assert r.headers["x-gradstep-cache"] == "hit"
    assert final_grad(r.content, "x") == plain_grad(code, "x")


def test_a_run_is_stored_in_redis_for_the_other_replicas(shared_client, redis_server):
    code = CODE + "# stored for others\n"
    r = shared_client.post("/api/trace", json={"code": code})
    assert r.headers["x-gradstep-cache"] == "miss"
    key = cache_key(code, _default_options(), shared_client.app.state.settings.result_caps())
    other_replica = RedisCache(redis_server.url, ttl=60, max_entry_bytes=1 << 20, secret=SECRET)
    assert decompress(run(_get_then_close(other_replica, key))) == r.content


def test_with_redis_down_runs_still_answer(redis_server):
    settings = Settings(
        workers=1,
        queue=4,
        rate=0,
        uid_base=uid_base(),
        cache_url=f"redis://127.0.0.1:{free_port()}/0",
        cache_secret=SECRET.decode(),
        health_detail=True,
    )
    code = CODE + "# redis is down\n"
    with TestClient(create_app(settings)) as client:
        r = client.post("/api/trace", json={"code": code})
        health = client.get("/healthz").json()
    assert r.status_code == 200
    assert final_grad(r.content, "x") == plain_grad(code, "x")
    assert health["cache"]["shared"]["available"] is False


def _default_options() -> dict:
    return TraceOptions().model_dump()
