"""The trace service behind ``POST /api/trace``: cache, sharing, rate, admission, then the sandbox.

One request's costs are its client's: its run and the fix runs it causes come out of the client's
rate budget (fix runs only as far as the budget goes, never into debt), and all of them stop when
the client goes away. What costs little is charged little: a cached trace, or a share of an
identical run already under way, costs ``HIT_COST`` of a run — so a class opening the same page
(one address behind a NAT) pays for about one run and its fixes, not thirty, while one client
asking for the same large answer over and over runs out of budget as if it ran it.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from dataclasses import dataclass, field

import anyio
from fastapi import HTTPException

from gradstep.cache import TraceCache, cache_key, fix_run_key
from gradstep.encoding import decompress
from gradstep.limits import Admission, ClientRuns, RateLimiter, retry_after
from gradstep.runs import Cancelled, RunBudget, Traced, TraceRunner, served_fields
from gradstep.settings import Settings

HIT_COST = 0.05  # of one run: an answer served without a run still costs its sending
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

    def server_timing(self) -> str:
        """The timings as a Server-Timing header (the browser's developer tools show them)."""
        return ", ".join(
            f'{part};desc="{DESCRIPTIONS[part]}";dur={ms:.1f}' for part, ms in self.timings.items()
        )


class TraceService:
    def __init__(self, settings: Settings, runner: TraceRunner, cache: TraceCache):
        self.settings, self.runner, self.cache = settings, runner, cache
        self.rate = RateLimiter(settings.rate, settings.burst)
        self.admission = Admission(settings.workers + settings.queue)
        self.client_runs = ClientRuns(settings.runs_per_client())
        self.threads = anyio.CapacityLimiter(settings.workers + settings.queue)
        self.in_flight: dict[str, asyncio.Future] = {}  # identical requests share one run
        self.spec = settings.run_spec()  # what every run is made under (gradstep.runspec)
        self.caps = self.spec.caps()  # in every key: replicas with other caps never share entries

    async def trace(self, code: str, options: dict, client: str, gone: threading.Event) -> Answer:
        """The trace for this request. Raises ``Cancelled`` once ``gone`` is set (every run of the
        request is stopped), HTTPException 429 / 503 when refused."""
        key = cache_key(code, options, self.caps)
        expect = served_fields(code)  # a shared entry with other fields than these is a miss
        answered = await self._answered(key, client, expect)
        if answered is not None:
            return answered
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
            self._charge(client, 1.0)
            if not self.admission.enter():
                raise HTTPException(503, "All workers are busy: try again shortly.", {"Retry-After": "2"})
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
                self.admission.leave()
                self.in_flight.pop(key, None)
        finally:
            self.client_runs.leave(client)

    async def _answered(self, key: str, client: str, expect: dict) -> Answer | None:
        """The cached trace, or a share of an identical run under way; None when it must be run."""
        while True:
            cached = await self.cache.get(key, expect)
            if cached is not None:
                self._charge(client, HIT_COST)
                return Answer(cached, "hit")
            shared = self.in_flight.get(key)
            if shared is None:
                return None
            self._charge(client, HIT_COST)
            try:
                return Answer(await asyncio.shield(shared), "shared")
            except Cancelled:
                continue  # its own client went away before it finished: run it for this one

    def _charge(self, client: str, cost: float) -> None:
        """Spend ``cost`` runs of ``client``'s rate budget, or refuse the request (429)."""
        wait = self.rate.acquire(client, cost)
        if wait > 0:
            raise HTTPException(
                429, "Too many runs from this client: slow down.", {"Retry-After": retry_after(wait)}
            )

    def keep(self, code: str, options: dict, stored: bytes) -> None:
        """A new stored form of this trace (gzip made for a client) goes into the cache's entry, if
        this process still holds one."""
        self.cache.refresh(cache_key(code, options, self.caps), stored)

    async def _run(self, key: str, code: str, options: dict, client: str, gone: threading.Event) -> Answer:
        # A fix that diagnoses verified, asked for by Apply fix: its run is in the cache
        # (shared by every replica) and needs no second run in the sandbox.
        verified = await self.cache.get(fix_run_key(code, options, self.caps), served_fields(code))
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
        return Answer(traced.stored, "miss" if verified is None else "verified", traced.timings)
