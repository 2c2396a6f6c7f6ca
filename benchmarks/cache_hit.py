"""A shared-cache hit with signed entries vs the read path before them, in one run; and what the
entries an attacker writes into Redis cost a replica to refuse.

    PYTHONPATH=server:benchmarks .venv/bin/python benchmarks/cache_hit.py [--rounds 7] [--reads 40]

Starts redis-server on loopback, puts two traces in it (a small snippet's, ~1 KB stored, and the
24-layer TransformerEncoder's of benchmarks/tracer_overhead.py, ~1 MB of JSON, ~115 KB stored),
each both as the cache writes it now and as it wrote it before (no MAC, under its key framed in the
entry), then interleaves, round after round, ``reads`` reads of each way:
* before: GET of the whole value, inflate (capped at 16 MB), parse and validate the trace, as
  ``RedisCache.get`` did;
* now: ``RedisCache.get(key, expect=served_fields(code))``: GETRANGE up to the entry cap, verify the
  HMAC, inflate up to the ratio a replica keeps, parse and validate, compare the server's fields.
Printed: the median latency of a hit each way and their ratio (goal: <= 1.1x), then the CPU a read
of each attack costs before and now (median of 5 reads) (a 1 KB brotli bomb of 15.5 MB of valid trace, unsigned and
signed; a 1 MB entry over a 64 KB cap). Targets are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import time

import brotli
import orjson
import redis.asyncio as aioredis
from gradstep import trace as trace_in_process
from gradstep.cache import RedisCache, cache_key
from gradstep.cache.shared import MAX_TRACE_BYTES, PREFIX, encode_entry
from gradstep.encoding import BR, Encoded, compress
from gradstep.runs import served_fields
from gradstep.trace_dicts import validate
from testkit.services import RedisServer
from tracer_overhead import SNIPPET

SMALL = "import torch\nx = torch.ones(3, requires_grad=True)\ny = (x * x * 3).sum()\ny.backward()\n"
OLD_MAGIC = b"gradstep-trace/3\n"
OLD = "bench-before:"  # the entries as written before, under keys of their own
OFF_LOOP_BYTES = 64 << 10
ATTACK_READS = 5


def old_decode(key: str, raw: bytes) -> bytes | None:
    """``shared.decode_entry`` before entries were signed."""
    head = OLD_MAGIC + key.encode() + b"\n"
    if not raw.startswith(head):
        return None
    br = raw[len(head) :]
    inflate = brotli.Decompressor()
    try:
        body = inflate.process(br, output_buffer_limit=MAX_TRACE_BYTES)
    except brotli.error:
        return None
    if not inflate.is_finished() or len(body) > MAX_TRACE_BYTES:
        return None
    try:
        validate(orjson.loads(body))
    except Exception:
        return None
    return Encoded(br).pack()


class CacheBefore(RedisCache):
    """``RedisCache`` with ``get`` as it was before entries were signed (its entries under ``OLD``)."""

    async def get(self, key: str, expect: dict | None = None) -> bytes | None:
        if not self._available():
            return None
        try:
            raw = await self._call(self._connection().get, OLD + key)
        except Exception as e:
            self._failed(e)
            return None
        if raw is None:
            self.misses += 1
            return None
        body = (
            old_decode(key, raw)
            if len(raw) < OFF_LOOP_BYTES
            else await asyncio.to_thread(old_decode, key, raw)
        )
        if body is None:
            self.rejected += 1
            return None
        self.hits += 1
        return body


def stored_trace(code: str) -> bytes:
    return compress(
        orjson.dumps({**orjson.loads(trace_in_process(code).model_dump_json()), **served_fields(code)})
    )


def bomb(code: str) -> bytes:
    """A valid trace of ``code`` padded with repeated steps to 15.5 MB of JSON, as stored (~1 KB)."""
    t = {**orjson.loads(trace_in_process(code).model_dump_json()), **served_fields(code)}
    step = t["steps"][-1]
    body = orjson.dumps({**t, "steps": t["steps"] + [step] * (15_500_000 // (len(orjson.dumps(step)) + 1))})
    return BR + brotli.compress(body, quality=11, lgwin=24)


async def cpu_of(read, times: int = ATTACK_READS) -> float:
    """The median CPU seconds (every thread of this process) of one ``read()``."""
    spent = []
    for _ in range(times):
        start = time.process_time()
        await read()
        spent.append(time.process_time() - start)
    return statistics.median(spent)


async def main(args: argparse.Namespace) -> None:
    secret = secrets.token_bytes(32)
    with RedisServer() as server:
        raw = aioredis.Redis.from_url(server.url)
        cache = RedisCache(server.url, ttl=600, max_entry_bytes=4 << 20, secret=secret)
        before_cache = CacheBefore(server.url, ttl=600, max_entry_bytes=4 << 20, secret=secret)
        cases = {}
        for name, code in (("small snippet", SMALL), ("24-layer transformer", SNIPPET)):
            key, stored = cache_key(code, {}), stored_trace(code)
            await raw.set(PREFIX + key, encode_entry(key, stored, secret))
            await raw.set(OLD + key, OLD_MAGIC + key.encode() + b"\n" + Encoded.unpack(stored).br)
            assert (
                await cache.get(key, served_fields(code)) == stored and await before_cache.get(key) == stored
            )
            cases[name] = (key, code, stored)
        times = {name: {"before": [], "now": []} for name in cases}
        for round_ in range(args.rounds):
            for name, (key, code, _) in cases.items():
                expect = served_fields(code)
                ways = [
                    ("before", lambda key=key: before_cache.get(key)),
                    ("now", lambda key=key, expect=expect: cache.get(key, expect)),
                ]
                for way, read in ways[:: 1 if round_ % 2 else -1]:  # each way first every other round
                    t = time.perf_counter()
                    for _ in range(args.reads):
                        await read()
                    times[name][way].append((time.perf_counter() - t) / args.reads)
        print(
            f"shared-cache hit, {args.rounds} interleaved rounds of {args.reads} reads, {os.cpu_count()} CPUs"
        )
        for name, (_, _, stored) in cases.items():
            before, now = statistics.median(times[name]["before"]), statistics.median(times[name]["now"])
            print(
                f"  {name:22s} ({len(stored) / 1024:6.1f} KB stored)  before {before * 1e3:7.3f} ms"
                f"  now {now * 1e3:7.3f} ms  ratio {now / before:5.2f}x  (goal <= 1.1x)"
            )

        print("\nCPU to read (and refuse) what an attacker writes, before -> now")
        key = cache_key(SMALL + "# attacked\n", {})
        expect = served_fields(SMALL + "# attacked\n")
        boom = bomb(SMALL + "# attacked\n")
        await raw.set(OLD + key, OLD_MAGIC + key.encode() + b"\n" + boom[len(BR) :])
        await raw.set(PREFIX + key, OLD_MAGIC + key.encode() + b"\n" + boom[len(BR) :])
        before = await cpu_of(lambda: before_cache.get(key))
        now = await cpu_of(lambda: cache.get(key, expect))
        print(
            f"  {len(boom)} B bomb (15.5 MB of trace), unsigned  {before * 1e3:7.1f} ms -> {now * 1e3:6.2f} ms"
        )
        await raw.set(PREFIX + key, encode_entry(key, boom, secret))
        now = await cpu_of(lambda: cache.get(key, expect))
        print(f"  the same bomb, signed with the secret     {before * 1e3:7.1f} ms -> {now * 1e3:6.2f} ms")
        capped = RedisCache(server.url, ttl=600, max_entry_bytes=64 << 10, secret=secret)
        t = {**orjson.loads(trace_in_process(SMALL).model_dump_json()), "stdout": os.urandom(1 << 20).hex()}
        big = compress(orjson.dumps(t))
        await raw.set(OLD + key, OLD_MAGIC + key.encode() + b"\n" + big[len(BR) :])
        await raw.set(PREFIX + key, encode_entry(key, big, secret))
        sent = (await raw.info("stats"))["total_net_output_bytes"]
        before = await cpu_of(lambda: before_cache.get(key))
        read_before = ((await raw.info("stats"))["total_net_output_bytes"] - sent) / ATTACK_READS
        sent = (await raw.info("stats"))["total_net_output_bytes"]
        now = await cpu_of(lambda: capped.get(key, expect))
        read_now = ((await raw.info("stats"))["total_net_output_bytes"] - sent) / ATTACK_READS
        print(
            f"  {len(big) / 1024:.0f} KB entry, cap 64 KB                  {before * 1e3:7.1f} ms -> {now * 1e3:6.2f} ms"
            f"   (read {read_before / 1024:.0f} KB -> {read_now / 1024:.0f} KB each)"
        )
        print(f"  rejected now: {cache.stats()}")
        print(f"                {capped.stats()}")
        await cache.close()
        await before_cache.close()
        await capped.close()
        await raw.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reads", type=int, default=40)
    asyncio.run(main(parser.parse_args()))
