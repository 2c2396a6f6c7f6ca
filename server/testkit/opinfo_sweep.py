"""PyTorch's OpInfo database (``op_db``, shipped in the torch wheel) as a peer suite for the tracer.

For every OpInfo that supports autograd, each CPU sample input in float64 and complex128 (where
the op's backward dtypes allow) becomes a small snippet (``Case.snippet``): it imports op_db
itself, looks the op up, seeds, draws sample k, calls the op, sums the real parts of the
differentiable outputs into a loss, calls backward, backward again (which fails exactly when
the first one freed what it needs), and, where the op supports gradgrad, takes the gradients
with ``create_graph=True`` and backpropagates through them. ``check`` runs that snippet under
the tracer and under plain torch (server/testkit/truth.py) and compares the two with every check in
``CHECKS``.

Used by tests/truth/test_opinfo.py and benchmarks/opinfo_coverage.py. Importing op_db needs expecttest
and takes about 4 s, so it happens on first use, not at import.
"""

from __future__ import annotations

import functools
import itertools
import multiprocessing
import multiprocessing.connection
import random
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from testkit import truth

DTYPES = {"float64": torch.float64, "complex128": torch.complex128}
SEED = 0
DEFAULT_SAMPLES = 10  # per op and dtype; all of them take ~3.7 CPU hours (benchmarks/opinfo_coverage.py)
# the harness checks, in the order a case's cause is picked from (the first one that disagrees)
CHECKS = (
    ("status", truth.compare_status),
    ("calls", truth.compare_calls),
    ("errors", truth.compare_errors),
    ("grads", truth.compare_grads),
    ("returned", truth.compare_returned),
    ("freed", truth.compare_freed),
    ("failed", truth.compare_failed),
    ("order", truth.compare_order),
    ("stale", truth.compare_stale),
)
STOPPED = "Tracing stopped"


@functools.cache
def op_db() -> list:
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def op_name(op) -> str:
    """``name`` or ``name.variant_test_name``, as the --ops option and test ids spell it."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def autograd_ops(names: Iterable[str] | None = None) -> list:
    """The OpInfos that support autograd, all or those named (``name`` matches every variant)."""
    ops = [op for op in op_db() if op.supports_autograd]
    if names is None:
        return ops
    wanted = set(names)
    chosen = [op for op in ops if op.name in wanted or op_name(op) in wanted]
    unknown = wanted - {op.name for op in chosen} - {op_name(op) for op in chosen}
    if unknown:
        raise ValueError(f"no OpInfo with autograd named {sorted(unknown)}")
    return chosen


def op_dtypes(op) -> list[str]:
    """Of float64 and complex128, those the op's backward supports on the CPU."""
    supported = op.supported_backward_dtypes("cpu")
    return [name for name, dtype in DTYPES.items() if dtype in supported]


def seeded() -> None:
    """The RNG state a case's snippet starts its sampling from (sample inputs are random)."""
    torch.manual_seed(SEED)
    random.seed(SEED)  # a few sample functions draw from Python's random


def sample_count(op, dtype: str) -> int:
    seeded()
    return sum(1 for _ in op.sample_inputs("cpu", DTYPES[dtype], requires_grad=True))


# ---------------------------------------------------------------- cases


SNIPPET_HEAD = """\
import random
from itertools import islice

import torch
from torch.testing._internal import common_methods_invocations as opinfo
from torch.utils._pytree import tree_leaves

op = next(o for o in opinfo.op_db if (o.name, o.variant_test_name) == ({name!r}, {variant!r}))
torch.manual_seed({seed})
random.seed({seed})
sample = next(islice(op.sample_inputs("cpu", torch.{dtype}, requires_grad=True), {index}, None))
inp, args, kwargs = sample.input, list(sample.args), sample.kwargs
leaves = [t for t in tree_leaves([inp, args, kwargs]) if isinstance(t, torch.Tensor) and t.requires_grad]


def scalar(outputs):
    \"\"\"The sum of the real parts of every differentiable output (a zero when there is none).\"\"\"
    diff = [t for t in tree_leaves(outputs) if isinstance(t, torch.Tensor) and t.requires_grad]
    dense = [t.to_dense() if t.layout != torch.strided else t for t in diff]  # sparse has no .real
    return sum((t.real.sum() for t in dense), torch.zeros(()))


def forward():
    return scalar(sample.output_process_fn_grad(op(inp, *args, **kwargs)))


loss = forward()
loss.backward()
try:
    loss.backward()  # again: fails exactly when the first call freed what it needs
except RuntimeError:
    pass
"""

SNIPPET_GRADGRAD = """\
for leaf in leaves:
    leaf.grad = None  # what follows is the double backward's alone
loss = forward()
grads = torch.autograd.grad(loss, leaves, create_graph=True, allow_unused=True)
gradgrad = scalar(grads)
if gradgrad.requires_grad:  # a linear op's gradient is constant: nothing to differentiate
    gradgrad.backward()
"""


@dataclass(frozen=True)
class Case:
    op: str  # OpInfo.name
    variant: str  # OpInfo.variant_test_name
    dtype: str  # a key of DTYPES
    index: int  # which sample, in sample_inputs order after seeding
    gradgrad: bool  # the op supports double backward: the snippet checks it too

    @property
    def label(self) -> str:
        name = f"{self.op}.{self.variant}" if self.variant else self.op
        return f"{name}[{self.dtype}#{self.index}]"

    def snippet(self) -> str:
        head = SNIPPET_HEAD.format(
            name=self.op, variant=self.variant, seed=SEED, dtype=self.dtype, index=self.index
        )
        return head + SNIPPET_GRADGRAD if self.gradgrad else head


def case(op, dtype: str, index: int) -> Case:
    return Case(op.name, op.variant_test_name, dtype, index, bool(op.supports_gradgrad))


def cases_of(op, samples: int | None = None) -> list[Case]:
    """The op's cases: its first ``samples`` sample inputs (all if None) in each dtype."""
    out = []
    for dtype in op_dtypes(op):
        n = sample_count(op, dtype)
        out += [case(op, dtype, k) for k in range(n if samples is None else min(n, samples))]
    return out


# ---------------------------------------------------------------- checking


@dataclass
class Outcome:
    case: Case
    problems: list[str] = field(default_factory=list)  # why the trace disagrees; empty when it agrees
    cause: str | None = None  # the first problem with the case's particulars left out: a grouping key
    torch_errors: list[str] = field(default_factory=list)  # what plain torch raised, bar the expected ones
    seconds: float = 0.0

    @property
    def agrees(self) -> bool:
        return not self.problems


def stem(message: str, limit: int = 140) -> str:
    """A message with the case's particulars (values, numbers, names, node seqs) blanked out."""
    s = message.split("\n", 1)[0]
    s = re.sub(r"^call \d+( \(line \d+\))?: ", "", s)
    s = re.sub(r"\b(leaves|args|inp|kwargs|leaf|grads)(\[[^\]]+\])?(/\w+(\[[^\]]+\])?)*", "<tensor>", s)
    s = re.sub(r"\[[^\[\]]*(\[[^\[\]]*\][^\[\]]*)*\]", "[…]", s)  # lists, one level of nesting
    s = re.sub(r"tensor\(.*", "tensor(…)", s)
    s = re.sub(r"0x[0-9a-f]+", "0x…", s)
    s = re.sub(r"\d+(\.\d+)?(e[+-]?\d+)?", "N", s)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def expected_error(error: dict) -> bool:
    """The second backward through a freed graph fails by design: not the op's own failure."""
    return truth.FREED_MARK in error["message"]


def plain_errors(run: truth.PlainRun) -> list[str]:
    errors = [c.error for c in run.calls if c.error and not expected_error(c.error)]
    if run.error and run.error not in errors and not expected_error(run.error):
        errors.append(run.error)
    return [f"{e['type']}: {e['message'].splitlines()[0] if e['message'] else ''}" for e in errors]


def problems_of(trace: dict, run: truth.PlainRun) -> list[tuple[str, str]]:
    """(check, mismatch) for every way the trace disagrees with the plain run."""
    stopped = [n for n in trace.get("notes", []) if n.startswith(STOPPED)]
    found = [("stopped", n) for n in stopped]
    for name, compare in CHECKS:
        found += [(name, m) for m in compare(trace, run)]
        if name == "calls" and found and found[-1][0] == "calls":
            break  # the calls do not pair up: every later check would say the same
    return found


def cause_of(check: str, mismatch: str) -> str:
    if check == "stopped":
        return "tracing stopped: " + stem(re.sub(r"^Tracing stopped after step \d+: ", "", mismatch))
    return f"{check}: {stem(mismatch)}"


def check(case: Case) -> Outcome:
    """Run the case's snippet traced and plain, and say where the two disagree."""
    from gradstep.tracer import record

    code = case.snippet()
    start = time.perf_counter()
    outcome = Outcome(case)
    run = truth.run_plain(code, seed=SEED)
    outcome.torch_errors = plain_errors(run)
    try:
        trace = record(code)
    except Exception as e:  # the tracer itself must never raise: that is a finding too
        outcome.problems = [f"record() raised {type(e).__name__}: {e}"]
        outcome.cause = f"record() raised {type(e).__name__}: {stem(str(e))}"
    else:
        found = problems_of(trace, run)
        outcome.problems = [f"{name}: {m}" for name, m in found]
        outcome.cause = cause_of(*found[0]) if found else None
    outcome.seconds = time.perf_counter() - start
    return outcome


# ---------------------------------------------------------------- the sweep, in worker processes
#
# The tracer's node reader is C: an op that crashes it must not take the sweep down. Each
# (op, dtype) job runs in a forked child that sends one outcome per case; a child that dies or
# overruns ``timeout`` on a case has that case recorded as crashed/timed out and is restarted
# on the next sample.


@dataclass(frozen=True)
class Job:
    cases: tuple[Case, ...]


def jobs_of(ops: list, samples: int | None) -> list[Job]:
    """One job per op and dtype, biggest first so the slowest ones do not finish last."""
    jobs = []
    for op in ops:
        by_dtype = itertools.groupby(cases_of(op, samples), key=lambda c: c.dtype)
        jobs += [Job(tuple(cs)) for _, cs in by_dtype]
    return sorted(jobs, key=lambda j: -len(j.cases))


def _child(cases: tuple[Case, ...], conn: multiprocessing.connection.Connection) -> None:
    torch.set_num_threads(1)  # parallelism is across jobs
    for c in cases:
        conn.send(("start", c))
        conn.send(("done", check(c)))
    conn.close()


def _lost(case: Case, why: str, seconds: float) -> Outcome:
    return Outcome(case, [f"{why}"], why, seconds=seconds)


@dataclass
class _Running:
    proc: Any
    conn: multiprocessing.connection.Connection
    pending: list[Case]
    current: Case | None = None
    started: float = 0.0


def sweep(jobs: list[Job], workers: int = 1, timeout: float = 300.0) -> Iterator[Outcome]:
    """Every case's outcome, in the order they finish."""
    ctx = multiprocessing.get_context("fork")
    queue = [list(j.cases) for j in jobs]
    running: list[_Running] = []

    def start(cases: list[Case]) -> None:
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(tuple(cases), child), daemon=True)
        proc.start()
        child.close()
        running.append(_Running(proc, parent, cases))

    while queue or running:
        while queue and len(running) < workers:
            start(queue.pop(0))
        ready = multiprocessing.connection.wait([r.conn for r in running], timeout=1.0)
        for r in list(running):
            if r.conn in ready:
                try:
                    kind, payload = r.conn.recv()
                except EOFError:  # the child exited: normally, or by a crash in r.current
                    r.proc.join()
                    running.remove(r)
                    if r.current is not None:
                        why = f"worker crashed (exit code {r.proc.exitcode})"
                        yield _lost(r.current, why, time.perf_counter() - r.started)
                        rest = r.pending[r.pending.index(r.current) + 1 :]
                        if rest:
                            queue.insert(0, rest)
                    continue
                if kind == "start":
                    r.current, r.started = payload, time.perf_counter()
                else:
                    r.current = None
                    yield payload
            elif r.current is not None and time.perf_counter() - r.started > timeout:
                r.proc.kill()
                r.proc.join()
                running.remove(r)
                yield _lost(r.current, f"timed out after {timeout:.0f} s", timeout)
                rest = r.pending[r.pending.index(r.current) + 1 :]
                if rest:
                    queue.insert(0, rest)
