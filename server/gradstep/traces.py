"""The trace service behind ``POST /api/trace``: admission, reading, cache, sharing, rate, queue, then the sandbox.

One request's costs are its client's: its run and the fix runs it causes come out of the client's
rate budget (fix runs only as far as the budget goes, never into debt), and all of them stop when
the client goes away. What costs little is charged little: a cached trace, or a share of an
identical run already under way, costs ``HIT_COST`` of a run — so a class opening the same page
(one address behind a NAT) pays for about one run and its fixes, not thirty, while one client
asking for the same large answer over and over runs out of budget as if it ran it. What is sent
is paid for by its bytes too (``SEND_BYTES`` cost a run; a run's price pays for its first
``SEND_BYTES``, a hit's for its share of that): a 600-byte request for a trace that inflates to
7 MB for a client that takes no encoding costs 7 runs, not 1/20 of one.

Nothing a request sends is costly before it is admitted, and nothing costly runs on the event
loop (NOTE [read after admission]): every request first pays ``HIT_COST``; then code longer than
``reading.INLINE_CODE`` waits for its client's turn (one such read per client at once, fair across
clients) and is hashed and read (``gradstep.reach``, in a reader process bounded in CPU time:
``gradstep.reading``) in a worker thread; code too costly to read is refused (422) at a run's
price. Only then is the cache asked (a shared entry is inflated and checked off the loop).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import hashlib
import threading
import weakref
from dataclasses import dataclass, field

import anyio
from fastapi import HTTPException

from gradstep.cache import FIX_RUN, TraceCache, cache_key, fix_run_key
from gradstep.encoding import decompress
from gradstep.limits import ClientRuns, FairQueue, RateLimiter, Refused, retry_after
from gradstep.reading import INLINE_CODE, PARSE_SHARE, CodeReaders
from gradstep.runs import Cancelled, RunBudget, Traced, TraceRunner, served_fields
from gradstep.settings import Settings

HIT_COST = 0.05  # of one run: an answer served without a run still costs its sending
SEND_BYTES = 1 << 20  # bytes sent that cost as much as one run
GONE_CHECK = 0.1  # seconds between looks at whether a queued request's client went away
READ_MEMO = 64  # big snippets whose reading is remembered (a class opening the same page reads it once)
TOO_COSTLY = (
    "This code is too costly for gradstep to read before running it (reading it took more than"
    " {seconds:g} s of CPU, or its parse more than {parse:g} s: a very long f-string or expression,"
    " say). Shorten it or split it up."
)
DESCRIPTIONS = {
    "run": "sandboxed run",
    "check": "trace checked",
    "propose": "fixes proposed by the rules",
    "diagnose": "fixes run and checked",
    "encode": "kept run encoded again",
}


@dataclass(frozen=True)
class Answer:
    stored: bytes  # the trace, as stored (gradstep.encoding)
    how: str  # hit | shared | miss | verified
    timings: dict[str, float] = field(default_factory=dict)  # ms of this request's parts (DESCRIPTIONS)
    key: str = ""  # its cache key

    @property
    def paid_bytes(self) -> int:
        """The bytes of it the request's price has paid for sending (``SEND_BYTES`` a run)."""
        return int((1.0 if self.how in ("miss", "verified") else HIT_COST) * SEND_BYTES)

    def server_timing(self) -> str:
        """The timings as a Server-Timing header (the browser's developer tools show them)."""
        return ", ".join(
            f'{part};desc="{DESCRIPTIONS[part]}";dur={ms:.1f}' for part, ms in self.timings.items()
        )


class TraceService:
    def __init__(self, settings: Settings, runner: TraceRunner, cache: TraceCache):
        self.settings, self.runner, self.cache = settings, runner, cache
        self.rate = RateLimiter(settings.rate, settings.burst)
        # the sandbox's workers take what the queue lets through: a run on deck for each worker
        self.admission = FairQueue(
            settings.workers + settings.queue, 2 * settings.workers, settings.queue_seconds
        )
        self.client_runs = ClientRuns(settings.runs_per_client())
        self.threads = anyio.CapacityLimiter(settings.workers + settings.queue)
        readers = max(1, settings.workers // 2)
        self.readers = CodeReaders(readers, settings.read_seconds)
        weakref.finalize(self, self.readers.close)  # its reader processes go with it
        runner.read_code = (
            self.readers.read
        )  # a fix's code is read as a request's is (NOTE [read after admission])
        self.reading = FairQueue(readers * 64, readers, settings.queue_seconds)  # who reads next
        self.reading_threads = anyio.CapacityLimiter(readers)
        self.small_reads = anyio.CapacityLimiter(4)  # never behind runs holding the other threads
        self.client_reads = ClientRuns(1)  # one big read of a client's at once; others wait their turn
        self._reading: dict[str, asyncio.Future] = {}  # big code being read, by its digest: read once
        self._was_read: collections.OrderedDict[str, dict | None] = collections.OrderedDict()  # the last read
        self.in_flight: dict[str, asyncio.Future] = {}  # identical requests share one run
        self.spec = settings.run_spec()  # what every run is made under (gradstep.runspec)
        self.caps = self.spec.caps()  # in every key: replicas with other caps never share entries

    async def trace(
        self, code: str, options: dict, client: str, gone: threading.Event, cached_only: bool = False
    ) -> Answer:
        """The trace for this request. Raises ``Cancelled`` once ``gone`` is set (every run of the
        request is stopped), HTTPException 422 (code too costly to read) / 429 / 503 when refused;
        with ``cached_only``, 404 when it would have to be run (nothing is run)."""
        self._charge(client, HIT_COST)  # before anything costs: every request pays its least
        key, expect = await self._read(code, options, client)
        answered = await self._answered(key, client, expect)
        if answered is not None:
            return answered
        if cached_only:
            raise HTTPException(404, "This code's trace is not in the cache (and was not run).")
        waits = not self.client_runs.has_room(client)
        if not await self.client_runs.enter(client):  # before the rate: a refused run spends no budget
            raise HTTPException(
                429,
                f"This client already has {self.client_runs.cap} run(s) under way and more waiting:"
                " wait for one to finish.",
                {"Retry-After": "2"},
            )
        try:
            if waits:  # it may have been answered while this one waited
                answered = await self._answered(key, client, expect)
                if answered is not None:
                    return answered
            self._charge(client, 1.0 - HIT_COST)
            await self._entered(self.admission, client, gone)
            future = asyncio.get_running_loop().create_future()
            self.in_flight[key] = future
            try:
                answer = await self._run(key, code, options, client, gone)
                future.set_result(answer.stored)
                return answer
            except BaseException as e:
                future.set_exception(e)
                future.exception()  # retrieved: waiters get it; no "never retrieved" warning
                raise
            finally:
                self.admission.leave(client)
                self.in_flight.pop(key, None)
        finally:
            self.client_runs.leave(client)

    @staticmethod
    async def _entered(queue: FairQueue, client: str, gone: threading.Event) -> None:
        """A turn in ``queue``; HTTPException 503 when refused, ``Cancelled`` (its place given back)
        once the client has gone away while it waited."""
        enter = asyncio.ensure_future(queue.enter(client))
        while not (await asyncio.wait({enter}, timeout=GONE_CHECK))[0]:
            if gone.is_set():
                enter.cancel()
                with contextlib.suppress(asyncio.CancelledError, Refused):
                    await enter
                if enter.done() and not enter.cancelled() and enter.exception() is None:
                    queue.leave(client)  # let through just as it was withdrawn
                raise Cancelled("the client went away while its run waited in the queue")
        try:
            enter.result()
        except Refused as e:
            raise HTTPException(503, str(e), {"Retry-After": retry_after(e.retry)}) from None

    # NOTE [read after admission]: a request's code is hashed and parsed only once the request is
    # admitted (it paid HIT_COST; big code had its client's turn at a reader) and never on the
    # event loop: ast.parse holds the GIL for the whole parse (60 KB of crafted f-string: ~1 s),
    # so big code is parsed only in a reader process bounded in CPU (gradstep.reading). Code it
    # gave up on is refused without a parse in this process; what it found is the run's
    # (runs.served_fields keeps it for the run, its fix runs and Apply fix).
    async def _read(self, code: str, options: dict, client: str) -> tuple[str, dict]:
        """The request's cache key and the server's fields for its code (``runs.served_fields``),
        worked out in worker threads: big code after its client's turn to be read, and read in a
        reader process first (NOTE [read after admission]). Identical big code is read once: a
        request for code being read waits for that read, and the last reads are remembered."""

        def keys() -> tuple[str, str]:
            digest = hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()
            return cache_key(code, options, self.caps), digest

        key, digest = await anyio.to_thread.run_sync(keys, limiter=self.small_reads)
        if len(code) <= INLINE_CODE:  # its parse is bounded by its size: a few ms at worst
            return key, await anyio.to_thread.run_sync(served_fields, code, limiter=self.small_reads)
        if digest in self._was_read:
            expect = self._was_read[digest]
            self._was_read.move_to_end(digest)
        elif digest in self._reading:
            expect = await asyncio.shield(self._reading[digest])
        else:
            future = asyncio.get_running_loop().create_future()
            self._reading[digest] = future
            try:
                expect = await self._read_big(code, client)
                future.set_result(expect)
            except BaseException as e:
                future.set_exception(e)
                future.exception()  # retrieved: sharers get it
                raise
            finally:
                del self._reading[digest]
            self._was_read[digest] = expect
            while len(self._was_read) > READ_MEMO:
                self._was_read.popitem(last=False)
        if expect is None:
            seconds = self.settings.read_seconds
            raise HTTPException(422, TOO_COSTLY.format(seconds=seconds, parse=seconds * PARSE_SHARE))
        return key, expect

    async def _read_big(self, code: str, client: str) -> dict | None:
        """Big code's served fields, read at its client's turn; None (charged a run) when its
        reader gave up on it."""

        def read() -> dict | None:
            found = self.readers.read(code)
            # what the reader found is the run's too: big code is parsed only in the reader
            return None if found is None else served_fields(code, found)

        if not await self.client_reads.enter(client):
            raise HTTPException(
                429, "This client has too many big snippets waiting to be read.", {"Retry-After": "2"}
            )
        try:
            try:
                await self.reading.enter(client)
            except Refused as e:
                raise HTTPException(503, str(e), {"Retry-After": retry_after(e.retry)}) from None
            try:
                expect = await anyio.to_thread.run_sync(read, limiter=self.reading_threads)
            finally:
                self.reading.leave(client)
        finally:
            self.client_reads.leave(client)
        if expect is None:
            self._charge(client, 1.0 - HIT_COST)  # a read given up cost a run's worth of a reader
        return expect

    async def _answered(self, key: str, client: str, expect: dict) -> Answer | None:
        """The cached trace, or a share of an identical run under way; None when it must be run.
        Already paid for (``HIT_COST``, with the request)."""
        while True:
            cached = await self.cache.get(key, expect)
            if cached is not None:
                return Answer(cached, "hit", key=key)
            shared = self.in_flight.get(key)
            if shared is None:
                return None
            try:
                return Answer(await asyncio.shield(shared), "shared", key=key)
            except Cancelled:
                continue  # its own client went away before it finished: run it for this one

    def pay_sent(self, client: str, size: int) -> float:
        """Charge ``size`` more bytes sent to ``client``: 0 when paid, else the seconds until it could be."""
        return self.rate.acquire(client, size / SEND_BYTES)

    def _charge(self, client: str, cost: float) -> None:
        """Spend ``cost`` runs of ``client``'s rate budget, or refuse the request (429)."""
        wait = self.rate.acquire(client, cost)
        if wait > 0:
            raise HTTPException(
                429, "Too many runs from this client: slow down.", {"Retry-After": retry_after(wait)}
            )

    def keep(self, key: str, stored: bytes) -> None:
        """A new stored form of the trace under ``key`` (gzip made for a client) goes into the
        cache's entry, if this process still holds one."""
        self.cache.refresh(key, stored)

    async def _run(self, key: str, code: str, options: dict, client: str, gone: threading.Event) -> Answer:
        # A fix that diagnoses verified, asked for by Apply fix: its run is in the cache
        # (shared by every replica) and needs no second run in the sandbox.
        verified = await self.cache.get(FIX_RUN + key, served_fields(code))  # served_fields: read already
        budget = RunBudget(
            take=functools.partial(self.rate.take, client), seconds=self.spec.fix_budget, cancel=gone
        )

        def run() -> Traced:  # in a worker thread: the run, its check and compression (gradstep.checker)
            return self.runner.trace(
                code, options, verified=None if verified is None else decompress(verified), budget=budget
            )

        traced = await anyio.to_thread.run_sync(run, limiter=self.threads)
        if traced.cacheable:
            await self.cache.put(key, traced.stored)
        for fix_code, fix_body in traced.fix_runs.items():
            await self.cache.put(fix_run_key(fix_code, options, self.caps), fix_body)
        return Answer(traced.stored, "miss" if verified is None else "verified", traced.timings, key)
