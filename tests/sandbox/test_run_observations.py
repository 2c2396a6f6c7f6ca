"""What the runner saw of a run (NOTE [what the runner saw of a run], sandbox/config.py) is the truth
about the child, measured by the parent: CPU time, wall time, memory high-water, the limits it ran
under. Each is checked against what the snippet really did, with the server's target (the tracer),
and against a child that writes a forged result: nothing it writes changes them."""

from __future__ import annotations

import json

import orjson
import pytest
from gradstep.runs import payload_for, sandbox_config
from gradstep.sandbox import Sandbox
from gradstep.sandbox.config import data_mb
from gradstep.settings import Settings
from testkit.sandbox_guard import guard_fixture, guard_unavailable, settle, uid_base

pytestmark = pytest.mark.skipif(guard_unavailable() is not None, reason=str(guard_unavailable()))

MEMORY_MB = 512
CPU_SECONDS = 5
WALL_SECONDS = 8

guard = guard_fixture(memory_mb=3072, pids=300)


@pytest.fixture(scope="module")
def sb(guard):
    config = sandbox_config(
        Settings(),
        workers=1,
        extra_slots=1,
        memory_mb=MEMORY_MB,
        cpu_seconds=CPU_SECONDS,
        wall_seconds=WALL_SECONDS,
        cgroup_parent=guard.parent,
        uid_base=uid_base(2420),
    )
    sandbox = Sandbox(config)
    try:
        sandbox.start()
        guard.hold(sandbox.health()["zygote_pid"])
        yield sandbox
    finally:
        sandbox.close()


def run(sb: Sandbox, code: str):
    settle(sb)  # the run takes a ready spare, as a server's usually does
    result = sb.run(payload_for(code))
    trace = orjson.loads(result.output) if result.status == "ok" else None
    return result, trace


BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0:\n    pass\n"
SLEEP = "import time\ntime.sleep(1.5)\n"
TOUCH_200_MB = "block = bytearray(b'\\x01') * (200 << 20)\n"  # every byte written: 200 MB resident


def test_a_run_that_burns_a_second_of_cpu_is_measured_at_least_that(sb):
    r, trace = run(sb, BURN)
    assert trace["status"] == "ok"
    assert r.cpu_used - r.cpu_before >= 1.0 - 0.02  # /proc's clock ticks are 10 ms
    assert r.cpu_used >= 1.0
    assert r.wall_used >= 1.0


def test_a_run_that_sleeps_is_measured_by_its_wall_time_and_little_cpu(sb):
    r, trace = run(sb, SLEEP)
    assert trace["status"] == "ok"
    assert r.wall_used >= 1.5
    assert r.cpu_used - r.cpu_before < 0.5


def test_a_run_that_touches_200_mb_is_measured_at_least_that(sb):
    r, trace = run(sb, TOUCH_200_MB)
    assert trace["status"] == "ok"
    assert r.memory_peak_mb >= 200  # the slot's memory cgroup: the child's own pages
    assert r.vm_hwm_mb >= 200
    small, _ = run(sb, "x = 1\n")
    assert small.memory_peak_mb < 100  # the high-water mark starts again with each run


def test_the_limits_the_run_ran_under_are_the_sandboxs(sb):
    r, _ = run(sb, "x = 1\n")
    assert r.cpu_limit == CPU_SECONDS  # RLIMIT_CPU, in cpu_used's clock (the child's since its fork)
    assert r.wall_limit == WALL_SECONDS
    assert r.memory_limit_mb == MEMORY_MB
    assert data_mb(MEMORY_MB) <= r.data_limit_mb < data_mb(MEMORY_MB) + MEMORY_MB


def forged(trace: dict, then: str = "os._exit(0)\n") -> str:
    """A snippet writing ``trace`` as its own result frame (tests/server/test_trust.py ``forge``),
    with whatever the runner's fields could be mistaken for in it, then ``then``."""
    body = json.dumps({"version": 2, **trace})
    return (
        "import os, struct\n"
        f"body = {body!r}.encode()\n"
        "os.write(3, b'R' + struct.pack('<Q', len(body)) + body)\n"
        f"{then}"
    )


CLAIM = {
    "status": "limit",
    "limit": "cpu",
    "error": {"type": "StoppedAtLimit", "message": "your access is suspended"},
    "cpu_used": 99.0,
    "wall_used": 99.0,
    "memory_peak_mb": 99999,
    "timings": {"cpu_before": 0, "target": 99000},
}


@pytest.mark.parametrize(
    "then",
    ["os._exit(0)\n", "import time\ntime.sleep(3)\n", "while True:\n    pass\n"],
    ids=["exits", "sleeps-after", "spins-after"],
)
def test_a_forged_result_claiming_a_limit_changes_nothing_the_runner_measured(sb, then):
    r, claimed = run(sb, forged(CLAIM, then))
    assert claimed["status"] == "limit" and claimed["cpu_used"] == 99.0  # the child's words...
    assert r.status == "ok"  # ... are its bytes, nothing more
    assert r.cpu_used < 10 and r.wall_used < 10  # what it used up to its answer, not the 99 s it claims
    assert r.memory_peak_mb < 100
    assert (r.cpu_limit, r.wall_limit, r.memory_limit_mb) == (CPU_SECONDS, WALL_SECONDS, MEMORY_MB)


def test_a_run_that_lowers_its_own_cpu_limit_shows_the_lower_one_never_a_higher(sb):
    lower = "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (3, 3))\n"
    r, _ = run(sb, lower)
    assert r.cpu_limit == 3
    higher = "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (100, 100))\n"
    r, trace = run(sb, higher)
    assert trace["error"]["type"] == "ValueError"  # not allowed to raise its hard limit
    assert r.cpu_limit == CPU_SECONDS


def test_a_run_the_memory_cgroup_kills_is_measured_at_its_limit(sb):
    bomb = (  # shared: not data, only the memory cgroup stops it; written by one C call
        "import ctypes, mmap\nm = mmap.mmap(-1, 2 << 30)\n"
        "ctypes.memset(ctypes.addressof(ctypes.c_char.from_buffer(m)), 1, len(m))\n"
    )
    r, _ = run(sb, bomb)
    assert (r.status, r.limit) == ("limit", "memory")
    assert r.memory_peak_mb >= 0.95 * MEMORY_MB
