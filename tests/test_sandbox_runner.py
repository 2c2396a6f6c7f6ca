"""The sandbox runner itself: results, limits, failures, slots and the zygote's life.

These use a light target (tests/sandbox_guard.py, no torch), so zygotes start
in a fraction of a second; every sandbox runs inside a guard cgroup.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from gradstep.sandbox import LAYERS, Sandbox, SandboxConfig
from sandbox_guard import Guard, guard_unavailable

pytestmark = pytest.mark.skipif(guard_unavailable() is not None, reason=str(guard_unavailable()))

TESTS = str(Path(__file__).resolve().parent)
SECRET = f"gradstep-runner-secret-{os.getpid()}"


def light(guard: Guard, **kw) -> SandboxConfig:
    options = dict(
        workers=2,
        memory_mb=256,
        cpu_seconds=2,
        wall_seconds=3,
        max_output_bytes=1 << 20,
        preload=[],
        target="sandbox_guard:target",
        warmup="pid",
        pythonpath=[TESTS],
        cgroup_parent=guard.parent,
        uid_base=62200,
    )
    options.update(kw)
    return SandboxConfig(**options)


@pytest.fixture(scope="module")
def guard():
    g = Guard(memory_mb=2048, pids=200)
    yield g
    assert g.destroy() == []


@pytest.fixture(scope="module")
def sandbox(guard):
    os.environ["GRADSTEP_TEST_SECRET"] = SECRET
    sb = Sandbox(light(guard))
    try:
        sb.start()
        guard.hold(sb.health()["zygote_pid"])
        yield sb
    finally:
        sb.close()
        os.environ.pop("GRADSTEP_TEST_SECRET", None)


def idle(sb: Sandbox) -> None:
    end = time.monotonic() + 10
    while sb.health()["busy"] and time.monotonic() < end:
        time.sleep(0.01)
    assert sb.health()["busy"] == 0


def test_the_targets_bytes_come_back(sandbox):
    r = sandbox.run("echo hello")
    assert (r.status, r.output, r.limit, r.signal) == ("ok", b"echo hello", None, None)
    assert set(LAYERS) <= set(r.timings), "each layer reports its time"


def test_every_layer_is_active_here(sandbox):
    h = sandbox.health()
    assert h["zygote"] and h["zygote_threads"] == 1
    assert h["layers"] == {name: "active" for name in LAYERS}


def test_output_up_to_the_cap_is_returned_whole(sandbox):
    r = sandbox.run(f"bytes {1 << 20}")
    assert r.status == "ok" and r.output == b"x" * (1 << 20)


def test_output_over_the_cap_is_a_limit(sandbox):
    r = sandbox.run(f"bytes {(1 << 20) + 1}")
    assert (r.status, r.limit, r.output) == ("limit", "output", b"")
    assert "over the limit" in r.detail


def test_an_exception_in_the_target_is_a_crash_with_its_message(sandbox):
    r = sandbox.run("raise")
    assert r.status == "crashed"
    assert "ValueError: the target failed on purpose" in r.detail


def test_a_target_that_returns_no_bytes_is_a_crash(sandbox):
    r = sandbox.run("str")
    assert r.status == "crashed" and "not bytes" in r.detail


def test_a_child_that_exits_without_a_result_is_a_crash(sandbox):
    r = sandbox.run("exit 3")
    assert r.status == "crashed" and "status 3" in r.detail


def test_the_wall_clock_limit_stops_a_run(sandbox):
    r = sandbox.run("sleep 100")
    assert (r.status, r.limit, r.signal) == ("timeout", "wall", "SIGKILL")
    idle(sandbox)
    assert sandbox.run("echo after").output == b"echo after"


def test_each_run_is_a_fresh_child(sandbox):
    pids = {sandbox.run("pid").output for _ in range(3)}
    assert len(pids) == 3


def test_the_zygote_has_a_minimal_environment(sandbox):
    env = dict(line.split("=", 1) for line in sandbox.run("env").output.decode().splitlines())
    assert SECRET not in str(env)
    assert set(env) <= {
        "PATH",
        "LANG",
        "HOME",
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONPATH",
        "LC_CTYPE",
    }
    assert env["HOME"] == "/nonexistent" and env["OMP_NUM_THREADS"] == "1"


def test_concurrent_callers_queue_for_the_slots(sandbox):
    results = []
    threads = [threading.Thread(target=lambda: results.append(sandbox.run("sleep 0.2"))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status for r in results] == ["ok"] * 6
    assert sum(r.timings["queue"] > 0 for r in results) >= 1
    idle(sandbox)


def test_the_zygote_restarts_after_it_dies(sandbox, guard):
    before = sandbox.health()
    os.kill(before["zygote_pid"], signal.SIGKILL)
    end = time.monotonic() + 10
    while sandbox.health()["zygote"] and time.monotonic() < end:
        time.sleep(0.01)
    r = sandbox.run("echo back")
    assert r.status == "ok" and r.output == b"echo back"
    after = sandbox.health()
    assert after["zygote"] and after["starts"] == before["starts"] + 1
    assert guard.contains(after["zygote_pid"])


def test_a_run_in_flight_when_the_zygote_dies_is_a_crash(sandbox):
    results = []
    t = threading.Thread(target=lambda: results.append(sandbox.run("sleep 2")))
    t.start()
    end = time.monotonic() + 10
    while not sandbox.health()["busy"] and time.monotonic() < end:
        time.sleep(0.01)
    time.sleep(0.2)  # let the child start
    os.kill(sandbox.health()["zygote_pid"], signal.SIGKILL)
    t.join()
    assert results[0].status == "crashed" and "zygote died" in results[0].detail
    idle(sandbox)
    assert sandbox.run("echo ok").status == "ok"


def test_a_disabled_layer_is_reported_as_disabled(guard):
    with Sandbox(light(guard, workers=1, uid_base=62300, disable=frozenset({"seccomp"}))) as sb:
        assert sb.health()["layers"]["seccomp"] == "disabled"
        assert sb.run("echo x").status == "ok"


def test_an_unavailable_layer_is_reported_and_warned_about(guard, capfd):
    config = light(guard, workers=1, uid_base=62400, cgroup_parent=guard.parent + "/no/such/cgroup")
    with Sandbox(config) as sb:
        guard.hold(sb.health()["zygote_pid"])
        state = sb.health()["layers"]["cgroup"]
        assert state.startswith("unavailable:")
        assert sb.run("echo x").status == "ok"
    assert "confinement layer 'cgroup' is unavailable" in capfd.readouterr().err


def test_close_leaves_no_process_and_no_cgroup(guard):
    cgroups = Path("/sys/fs/cgroup/memory", guard.name)
    before = {p for p in cgroups.iterdir() if p.is_dir()}
    sb = Sandbox(light(guard, workers=1, uid_base=62500))
    sb.start()
    assert {p for p in cgroups.iterdir() if p.is_dir()} != before
    zygote = sb.health()["zygote_pid"]
    assert sb.run("echo x").status == "ok"
    sb.close()
    assert not Path(f"/proc/{zygote}").exists()
    assert {p for p in cgroups.iterdir() if p.is_dir()} == before
    assert sb.run("echo x").status == "crashed"


def test_large_code_reaches_the_child_whole(sandbox):
    code = "echo " + "y" * (600 << 10)
    r = sandbox.run(code)
    assert r.status == "ok" and r.output == code.encode()
