"""Traces through the sandbox: what the server and the CLI share.

The sandboxed child writes bytes the snippet can forge (it may write its own result frame), so
its output is data, never authority:

* it is served only if it fits the trace schema, and the server writes in what it knows itself:
  the submitted ``code``, the trace ``version`` and the ``torch`` version;
* its ``diagnoses`` are proposals (gradstep.jobs): the server takes from them only which fix
  codes to run, runs those itself (each charged to the request's ``RunBudget``), and has a check
  job, in a sandbox too, decide what to show. A fix is offered only if the server ran its code
  and that run ended cleanly;
* a fix's run is kept (``Traced.fix_runs``) only when the check offered that fix, and is served
  only as the answer to that very code (Apply fix), never stored as that code's own trace: it ran
  with a share of the request's budget, not under a normal run's limits. What it proposes is not
  read from it: a propose job (rules, no snippet) says which fixes to run next;
* the server's own work on the bytes is linear in their size: checking them against the contract
  and compressing them, in checker processes of their own (gradstep.checker), with its own
  fields written in. Rules, narration and checks run in sandboxed children.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import orjson
import torch
from pydantic import TypeAdapter, ValidationError

from gradstep import encoding, limit_advice
from gradstep.checker import Checked, CheckerPool
from gradstep.diagnose import facts, proposed_codes
from gradstep.reach import reaches
from gradstep.runspec import RunSpec, TraceOptions, job_payload
from gradstep.sandbox import RunResult, Sandbox, SandboxConfig
from gradstep.schema import SERVER_FIELDS, VERSION, Diagnosis
from gradstep.settings import Settings
from gradstep.voice import Observed

TARGET = "gradstep.jobs:run"
MAX_FIX_CODE = 70_000  # characters of a proposed fix (a snippet is at most 60 000; a fix adds a little)
CHECK_CPU_SECONDS = 3  # a check job's CPU limit (its rules and comparisons, no snippet)
CHECK_WALL_SECONDS = 6.0
MAX_CHECK_BYTES = 16 << 20  # a check job's input: the trace and the fix runs that fit
MAX_DIAGNOSES = 32
_DIAGNOSES = TypeAdapter(list[Diagnosis])
# What the zygote imports before forking: torch and the tracer, and what snippets may import
# (after the uid drop a module not already imported may be unreadable when there is no minimal
# root: the stdlib can live under a 0700 home).
PRELOAD = [
    "torch",
    "torch.nn",
    "torch.optim",
    "gradstep.tracer",
    "torch.nn.functional",
    "numpy",
    "math",
    "random",
    "itertools",
    "functools",
    "collections",
    "dataclasses",
    "typing",
    "copy",
    "time",
    "encodings.idna",  # resolving a host name needs it: without it a network attempt is a LookupError
]

# Run by each child before its code arrives, to copy the pages a run writes to off the request's
# path (a forward, a backward and optimizer steps: what the tracer imports lazily).
PREWARM = """\
import torch
x = torch.randn(4, 3, requires_grad=True)
layer = torch.nn.Linear(3, 2)
loss = layer(x).pow(2).sum()
loss.backward()
for opt in (torch.optim.SGD(layer.parameters(), lr=0.1), torch.optim.Adam(layer.parameters())):
    opt.step()
    opt.zero_grad()
print(x.grad)
"""
# Tiny, the layers real snippets use most: run once in the zygote (WARMUP), before it forks. A first
# call pays one-time work (lazy imports, caches, dispatch set-up) that every child would otherwise
# pay again; after this the children inherit it done, as a warm process has it. It must warn about
# nothing (a warning torch gives once per process would then never reach a snippet) and leave no
# global setting changed.
COMMON_LAYERS = """\
from torch import nn
import torch.nn.functional as F
image = torch.randn(2, 3, 8, 8)
conv = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten())
F.cross_entropy(conv(image)[:, :5], torch.tensor([1, 3])).backward()
tokens = torch.tensor([[1, 2, 3], [4, 5, 6]])
encoder = nn.TransformerEncoder(
    nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, batch_first=True),
    num_layers=2,
    enable_nested_tensor=False,
)
hidden = encoder(nn.Embedding(8, 8)(tokens))
for rnn in (nn.LSTM(8, 4, batch_first=True), nn.GRU(8, 4, batch_first=True)):
    out, _ = rnn(hidden)
    F.mse_loss(nn.LayerNorm(4)(out), torch.zeros_like(out)).backward(retain_graph=True)
torch.softmax(hidden, -1).sum().backward()
"""
WARMUP = PREWARM + COMMON_LAYERS
NOT_CHECKED = (
    "Some fixes were not checked: this client has used its run budget for now. Run again in a few "
    "seconds to have them checked."
)


class Cancelled(Exception):
    """The request a run belonged to was withdrawn (its client went away): the runs were stopped."""


@dataclass
class RunBudget:
    """What one request may spend on the fix runs its own run causes.

    ``take(n)``: how many of ``n`` more runs the client may have now (its rate budget; at most n).
    The fix runs together get ``seconds`` of wall time from when the first starts, and as much
    CPU, split between them (the check job after them has small limits of its own: no snippet
    runs in it); ``cancel``, once set, stops every run of the request.
    """

    take: Callable[[int], int] = lambda n: n
    seconds: float = 10.0
    cancel: threading.Event | None = None


@dataclass
class Traced:
    """One run of a snippet, as the server serves it."""

    stored: bytes  # the trace (checked, the server's fields and verified diagnoses), encoding.compress'ed
    cacheable: bool  # False: a limit or the budget left something unchecked; run it again next time
    fix_runs: dict[str, bytes] = field(default_factory=dict)  # code -> each fix run made, stored so too
    timings: dict[str, float] = field(default_factory=dict)  # ms of each part: run, check, diagnose


def failed_trace(
    code: str, status: str, message: str, limit: str | None = None, reported: str | None = None
) -> bytes:
    """A run that gave no trace: ``message`` in the server's words; ``reported``, the child's own."""
    return orjson.dumps(
        {
            "version": VERSION,
            "status": status,
            "limit": limit,
            "error": {"type": status, "message": message, "line": None, "reported": reported},
            "code": code,
            "torch": torch.__version__,
        }
    )


class TraceRunner:
    def __init__(
        self, settings: Settings, sandbox: Sandbox | None = None, checker: CheckerPool | None = None
    ):
        self.workers = settings.workers
        self.spec = settings.run_spec()  # every job's, with each request's options (gradstep.runspec)
        self.sandbox = sandbox or Sandbox(sandbox_config(settings))
        self.checker = checker or CheckerPool(settings.workers)  # a check per run that may end at once
        # How a fix's code is read before it runs (its reaches; None: too costly to read, not run):
        # here in the caller's thread, or in a bounded reader process once a TraceService sets it
        # (gradstep.reading): a proposed fix is the child's text, which may be crafted to cost
        self.read_code: Callable[[str], list[dict] | None] = reaches

    def start(self) -> None:
        self.checker.start()
        self.sandbox.start()

    def close(self) -> None:
        self.sandbox.close()
        self.checker.close()

    def health(self) -> dict:
        return self.sandbox.health()

    def trace(
        self,
        code: str,
        options: dict | TraceOptions | None = None,
        *,
        verified: bytes | None = None,
        budget: RunBudget | None = None,
    ) -> Traced:
        """One run of ``code``, with verified diagnoses.

        ``verified``: the trace this very run gave when it verified a fix (a ``Traced.fix_runs``
        entry the caller kept, as JSON), served instead of running it again: Apply fix asks for
        exactly that run. Raises ``Cancelled`` once ``budget.cancel`` is set.
        """
        spec = self.spec.with_options(options)
        budget = budget or RunBudget(seconds=spec.fix_budget)
        timings: dict[str, float] = {}
        if verified is not None:  # a kept fix run: its fields are the server's, its proposals ignored
            trace = {**orjson.loads(verified), **served_fields(code), "diagnoses": []}
            with _timed(timings, "propose"):
                proposed = self._propose(trace, spec, budget)
        else:
            fields = served_fields(code)
            with self._running(job_payload(spec, code=code), budget, timings) as result:
                if result.status != "ok":
                    detail = (
                        result.detail
                        if result.limit is None
                        else limit_advice.killed(result.limit, result.detail)
                    )
                    failed = failed_trace(code, result.status, detail, result.limit, result.reported)
                    return Traced(encoding.compress(failed), cacheable=False, timings=timings)
                with _timed(timings, "check"):
                    checked = self._check_output(result, fields, observed(spec, result))
            if checked.problem is not None:
                failed = failed_trace(code, "crashed", checked.problem)
                return Traced(encoding.compress(failed), cacheable=False, timings=timings)
            if not checked.proposed:
                assert checked.stored is not None
                keep = encoding.worth_keeping(len(result.output), checked.stored)
                return Traced(checked.stored, cacheable=keep, timings=timings)
            assert checked.body is not None
            trace = orjson.loads(checked.body)  # checked, and in the server's words
            # code that reaches past torch could have written anything here: nothing is checked for it
            proposed = [] if fields["reaches"] else proposed_codes(trace.get("diagnoses") or [], MAX_FIX_CODE)
        trace["diagnoses"] = []  # proposals are never shown: only what the check below passes
        complete, ran = True, {}
        # Apply fix's answer (a kept run, nothing proposed) is only encoded again: not a diagnosis
        with _timed(timings, "diagnose" if proposed else "encode"):
            if proposed:
                trace["diagnoses"], complete, ran = self._diagnose(trace, proposed, spec, budget)
                if not complete and trace["diagnoses"]:
                    trace.setdefault("notes", []).append(NOT_CHECKED)
            fix_runs = {}
            offered = {f["code"] for d in trace["diagnoses"] for f in d["fixes"]}
            for fix_code, fix_trace in ran.items():
                if fix_code not in offered:
                    continue  # kept only for Apply fix, which only an offered fix has
                fix_body = orjson.dumps({**fix_trace, "diagnoses": []})
                fix_stored = self.checker.compress(fix_body)
                if encoding.worth_keeping(len(fix_body), fix_stored):
                    fix_runs[fix_code] = fix_stored
            body = orjson.dumps(trace)
            stored = self.checker.compress(body)
        # a kept fix run is never this code's own entry: it ran with a fix run's share of the budget
        cacheable = verified is None and complete and encoding.worth_keeping(len(body), stored)
        return Traced(stored, cacheable, fix_runs, timings)

    def _check_output(self, result: RunResult, fields: dict, seen: Observed, encode: bool = True) -> Checked:
        """``checker.check`` of a run's output, with new spares held back meanwhile: on 2 cores a
        spare's fork and warm-up (~25 ms CPU) made checking the 24-layer trace take 62 ms instead of 44."""
        with self.sandbox.spares_held():
            return self.checker.check(result.output, fields, seen, encode)

    def _run(self, payload: str, budget: RunBudget, deadline: float | None = None) -> RunResult:
        with self._running(payload, budget, deadline=deadline) as result:
            return result

    @contextlib.contextmanager
    def _running(
        self,
        payload: str,
        budget: RunBudget,
        timings: dict[str, float] | None = None,
        deadline: float | None = None,
    ) -> Iterator[RunResult]:
        """One run, whose child exits once the block is done with its result (timed as "run" in
        ``timings``): checking a big trace has the CPU to itself (NOTE [a child's exit waits for
        its release]). Raises ``Cancelled`` once ``budget.cancel`` is set."""
        start = time.monotonic()
        with self.sandbox.running(payload, deadline=deadline, cancel=budget.cancel) as result:
            if timings is not None:
                timings["run"] = (time.monotonic() - start) * 1e3
            if result.status == "cancelled":
                raise Cancelled(result.detail)
            yield result

    def _trace(
        self,
        code: str,
        spec: RunSpec,
        budget: RunBudget,
        deadline: float | None = None,
        cpu: int | None = None,
    ) -> dict | None:
        """One run of ``code``'s trace, with the server's fields; None when it is not a trace (the
        run failed, or wrote something else)."""
        found = self.read_code(code)
        if found is None:  # too costly to read: never parsed here, never run
            return None
        result = self._run(job_payload(spec, code=code, cpu_seconds=cpu), budget, deadline)
        if result.status != "ok":
            return None
        fields = served_fields(code, found)
        checked = self._check_output(result, fields, observed(spec, result, cpu), encode=False)
        if checked.problem is not None or checked.body is None:
            return None
        return orjson.loads(checked.body)  # in the server's words, its proposals still in it

    def _diagnose(
        self, trace: dict, codes: list[str], spec: RunSpec, budget: RunBudget
    ) -> tuple[list[dict], bool, dict[str, dict]]:
        """Run the proposed fixes (as many as the budget allows), then check them in a sandbox:
        (the diagnoses with the fixes that passed, whether every fix was run, every fix run made)."""
        granted = max(0, min(len(codes), budget.take(len(codes))))
        ran = self._run_fixes(codes[:granted], spec, budget) if granted else {}
        # only clean runs count: a fix whose run failed (or was cut by the deadline) is not offered
        # (NOTE [fix kept only if] in gradstep.diagnose: the check job sees only the runs given here)
        fixed = {code: t for code, t in ran.items() if facts.runs_cleanly(t)}
        diagnoses = self._check(trace, fixed, spec, budget)
        if diagnoses is None:  # the check itself failed (a limit, a crash): try again next time
            return [], False, ran
        for d in diagnoses:
            d["fixes"] = [f for f in d["fixes"] if f["code"] in fixed]
        return diagnoses, granted == len(codes), ran

    def _run_fixes(self, codes: list[str], spec: RunSpec, budget: RunBudget) -> dict[str, dict]:
        """Each fix run like any snippet (the same spec), within the request's budget: a deadline for
        all of them, an even share of its CPU each, and never every worker at once."""
        deadline = time.monotonic() + budget.seconds
        cpu = max(1, min(spec.cpu_seconds, math.floor(budget.seconds / len(codes))))

        def run(code: str) -> tuple[str, dict | None]:
            if budget.cancel is not None and budget.cancel.is_set():
                raise Cancelled("the request was withdrawn before this fix ran")
            if time.monotonic() >= deadline:
                return code, None  # the request's time for fixes is up: not run, not offered
            return code, self._trace(code, spec, budget, deadline, cpu)

        at_once = max(1, min(len(codes), self.workers - 1))  # leave a worker to everyone else
        with ThreadPoolExecutor(max_workers=at_once) as pool:
            futures = [pool.submit(run, code) for code in codes]
            try:
                ran = [f.result() for f in futures]
            except BaseException:
                pool.shutdown(cancel_futures=True)  # the fixes not yet started never start
                raise
        return {code: trace for code, trace in ran if trace is not None}

    def _propose(self, trace: dict, spec: RunSpec, budget: RunBudget) -> list[str]:
        """The fix codes the rules propose for ``trace``, from a propose job in the sandbox (none
        when it failed or the trace is too large to send)."""
        body = orjson.dumps(trace)
        if len(body) > MAX_CHECK_BYTES:
            return []
        payload = job_payload(spec, propose=orjson.Fragment(body), cpu_seconds=CHECK_CPU_SECONDS)
        result = self._run(payload, budget, time.monotonic() + CHECK_WALL_SECONDS)
        if result.status != "ok":
            return []
        try:
            found = _DIAGNOSES.validate_json(result.output)
        except ValidationError:
            return []
        return proposed_codes([d.model_dump(mode="json") for d in found[:MAX_DIAGNOSES]], MAX_FIX_CODE)

    def _check(
        self, trace: dict, fixed: dict[str, dict], spec: RunSpec, budget: RunBudget
    ) -> list[dict] | None:
        """The diagnoses of ``trace`` with the fixes that passed, from a check job in the sandbox
        (None when that job failed)."""
        head = orjson.dumps(trace)
        size, items = len(head), []
        for code, fix_trace in fixed.items():
            item = orjson.dumps([code, {**fix_trace, "diagnoses": []}])
            if size + len(item) + 1 > MAX_CHECK_BYTES:
                break  # checked without it: a fix missing from the check is not offered
            items.append(item)
            size += len(item) + 1
        if size > MAX_CHECK_BYTES:
            return []
        check = {"trace": orjson.Fragment(head), "fixes": orjson.Fragment(b"[" + b",".join(items) + b"]")}
        payload = job_payload(spec, check=check, cpu_seconds=CHECK_CPU_SECONDS)
        result = self._run(payload, budget, time.monotonic() + CHECK_WALL_SECONDS)
        if result.status != "ok":
            return None
        try:
            found = _DIAGNOSES.validate_json(result.output)
        except ValidationError:
            return None
        return [d.model_dump(mode="json") for d in found[:MAX_DIAGNOSES]]


@contextlib.contextmanager
def _timed(timings: dict[str, float], part: str) -> Iterator[None]:
    start = time.monotonic()
    try:
        yield
    finally:
        timings[part] = (time.monotonic() - start) * 1e3


def observed(spec: RunSpec, result: RunResult, cpu: int | None = None) -> Observed:
    """What the server knows of a run besides its word (NOTE [what the runner saw of a run]): the
    limits it ran under, as the runner read them (else its job's: ``cpu``, a fix run's lowered CPU
    limit), and what the runner measured of its child."""
    return Observed(
        memory_mb=spec.memory_mb,
        cpu_seconds=result.cpu_limit or cpu or spec.cpu_seconds,
        wall_seconds=result.wall_limit or spec.wall_seconds,
        cpu_used=result.cpu_used,
        wall_used=result.wall_used,
    )


def served_fields(code: str, found: list[dict] | None = None) -> dict:
    """What the server writes into every trace it serves: never the child's to say (a snippet can
    write its own result, claiming other code or versions). ``reaches``: the server's own look at
    the code (gradstep.reach); ``found``: that look, when a reader process already took it
    (gradstep.reading: big code is never parsed here again)."""
    if found is not None:
        _remember(code, tuple(found))
    return dict(zip(SERVER_FIELDS, (code, VERSION, torch.__version__, list(_reaches(code))), strict=True))


_READ_CODES = 256  # a run and its fix runs, the run again on Apply fix
_read: OrderedDict[str, tuple[dict, ...]] = OrderedDict()  # code -> its reaches, the last read last
_read_lock = threading.Lock()


def _remember(code: str, found: tuple[dict, ...]) -> tuple[dict, ...]:
    with _read_lock:
        _read[code] = found
        _read.move_to_end(code)
        while len(_read) > _READ_CODES:
            _read.popitem(last=False)
    return found


def _reaches(code: str) -> tuple[dict, ...]:
    with _read_lock:
        found = _read.get(code)
        if found is not None:
            _read.move_to_end(code)
            return found
    return _remember(code, tuple(reaches(code)))


def payload_for(code: str, options: dict | None = None, *, spec: RunSpec | None = None) -> str:
    """A trace job for ``code`` (gradstep.runspec.job_payload) under ``spec``; without it, under
    the default settings' spec (tests, benchmarks, the zygote's warm-up)."""
    spec = spec or Settings().run_spec()
    return job_payload(spec.with_options(options) if options is not None else spec, code=code)


def sandbox_config(settings: Settings, **overrides) -> SandboxConfig:
    """The sandbox the server runs snippets in (``overrides``: tests put it in a guard cgroup)."""
    spec = settings.run_spec()
    config = SandboxConfig(
        workers=settings.workers,
        extra_slots=settings.extra_slots,
        uid_base=settings.uid_base,
        target=TARGET,
        preload=list(PRELOAD),
        warmup=payload_for(WARMUP, spec=spec),
        prewarm=payload_for(PREWARM, spec=spec),  # in each child, confined: see SandboxConfig.prewarm
        **spec.sandbox_fields(),  # the run caps that are the sandbox's: wall, CPU, memory
    )
    for name, value in overrides.items():
        setattr(config, name, value)
    return config
