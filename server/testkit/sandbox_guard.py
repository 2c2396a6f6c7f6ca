"""Test support for the sandbox: an outer guard cgroup, checks for leftovers, a light target.

Every sandbox a test starts lives inside a ``Guard``: a v1 memory + pids cgroup
with its own limits, under which the sandbox nests its cgroups
(``SandboxConfig.cgroup_parent``). A regression in the sandbox then fails a
test instead of taking the machine down; the guard kills and removes
whatever is left in it at the end.

``target`` is a tiny target (no torch) for tests of the runner itself; the
zygote imports this module, so it imports nothing heavy.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import mmap
import os
import resource
import signal
import threading
import time
from pathlib import Path

from gradstep.sandbox import protocol

CGROUP_ROOT = Path("/sys/fs/cgroup")
_count = itertools.count()
DEFAULT_UID_BASE = 61000  # Settings.uid_base


def uid_base(offset: int = 0) -> int:
    """The first uid of a test's or benchmark's sandbox: ``GRADSTEP_UID_BASE`` (else 61000, the
    server's default) + ``offset``. Runs side by side on one host (other checkouts, other test
    sessions) set disjoint GRADSTEP_UID_BASEs, 3000 apart: sandboxes sharing a uid share its
    RLIMIT_NPROC, and without seccomp their children could signal each other (kill(-1)). The
    offsets the tests and benchmarks use stay below 2500, each sandbox's range (its slots) within
    its own offset's step; those of servers in the emulated container (test_nonroot.py) below 500,
    as its user namespace maps uids up to 65535 only."""
    return int(os.environ.get("GRADSTEP_UID_BASE", DEFAULT_UID_BASE)) + offset


def guard_unavailable() -> str | None:
    """Why a guard can't be made here (None if it can)."""
    if os.geteuid() != 0:
        return "the sandbox tests need root (cgroups, namespaces, uid switching)"
    for c in ("memory", "pids"):
        if not (CGROUP_ROOT / c / "cgroup.procs").exists():
            return f"no cgroup v1 {c} hierarchy for the test guard"
    return None


class Guard:
    def __init__(self, memory_mb: int = 6144, pids: int = 400):
        self.name = f"gradstep-guard-{os.getpid()}-{next(_count)}"
        self.dirs = [CGROUP_ROOT / c / self.name for c in ("memory", "pids")]
        for d in self.dirs:
            d.mkdir()
        _write(self.dirs[0] / "memory.limit_in_bytes", memory_mb << 20)
        if (self.dirs[0] / "memory.memsw.limit_in_bytes").exists():
            _write(self.dirs[0] / "memory.memsw.limit_in_bytes", memory_mb << 20)
        _write(self.dirs[1] / "pids.max", pids)

    @property
    def parent(self) -> str:
        """The value for ``SandboxConfig.cgroup_parent``."""
        return "/" + self.name

    def contains(self, pid: int) -> bool:
        paths = {}
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, names, path = line.split(":", 2)
            for n in names.split(","):
                paths[n] = path
        return all(paths.get(c, "").startswith(self.parent) for c in ("memory", "pids"))

    def hold(self, pid: int) -> None:
        """Make sure ``pid`` is inside the guard (move it there if the sandbox did not)."""
        if not self.contains(pid):
            for d in self.dirs:
                _write(d / "cgroup.procs", pid)

    def tasks(self) -> set[int]:
        found: set[int] = set()
        for d in self.dirs:
            for procs in d.rglob("cgroup.procs"):
                try:
                    found.update(int(p) for p in procs.read_text().split())
                except OSError:
                    pass
        return found

    def destroy(self) -> list[str]:
        """Kill everything inside, remove every cgroup; returns what was left behind."""
        left = []
        end = time.monotonic() + 10
        pids = self.tasks()
        if pids:
            left.append(f"processes left in the guard: {sorted(pids)}")
        while pids and time.monotonic() < end:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
            pids = self.tasks()
        for d in self.dirs:
            subs = sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
            if subs:
                left.append(f"cgroups left in the guard: {[str(p) for p in subs]}")
            for p in [*subs, d]:
                while True:
                    try:
                        p.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        if time.monotonic() > end:
                            left.append(f"could not remove {p}")
                            break
                        time.sleep(0.05)
        return left


def guard_fixture(memory_mb: int, pids: int):
    """A module-scoped pytest fixture ``guard``: one Guard for a test module's sandboxes, and
    afterwards the proof that nothing they started is left (pytest imported here only: the
    benchmarks use this module too)."""
    import pytest

    @pytest.fixture(scope="module")
    def guard():
        g = Guard(memory_mb=memory_mb, pids=pids)
        yield g
        assert g.destroy() == []

    return guard


def write_attempts(targets: list[str], own: str) -> str:
    """Snippet code that tries to write each of ``targets`` (printing the errno it gets, or
    "wrote" when it can), then writes ``own`` and lists its working directory."""
    return (
        "import os\n"
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        open(path, 'w').write('pwned')\n"
        "        print('wrote', path)\n"
        "    except OSError as e:\n"
        "        print(type(e).__name__, e.errno)\n"
        f"open({own!r}, 'w').write('mine')\n"
        "print(os.getcwd(), sorted(os.listdir('.')))\n"
    )


# Snippet code printing the mount points of its root (/healthz does not list paths).
MOUNT_POINTS = "print(sorted({line.split()[4] for line in open('/proc/self/mountinfo')}))\n"


def bound(mount_points: list[str]) -> list[str]:
    """What a child's minimal root holds besides itself, /proc, /tmp and the devices."""
    return [m for m in mount_points if m not in ("/", "/proc", "/tmp") and not m.startswith("/dev/")]


def work_dir_listing(own: str, visible: list[str]) -> str:
    """The last line of ``write_attempts``: the work dir holds the file it wrote and the way to
    what the minimal root shows under /tmp (a checkout there, with its venv)."""
    return f"/tmp {sorted({own, *(p.split('/')[2] for p in visible if p.startswith('/tmp/'))})}"


def settle(sb, timeout: float = 10.0) -> dict:
    """Wait until every slot is free again (its last child reaped) and has its spare; returns health().

    A run answers before its child has exited, so right after ``run()`` its slot
    may still be busy; it is free once the zygote has reaped that child.
    """
    end = time.monotonic() + timeout
    while True:
        h = sb.health()
        spares = h["slots"] if h["prefork"] and h["zygote"] else 0
        if h["busy"] == 0 and h["spares"] == spares:
            return h
        if time.monotonic() > end:
            raise AssertionError(f"the sandbox did not settle: {h}")
        time.sleep(0.005)


def at_once(sb, codes: list[str]) -> list:
    """``sb.run`` of each of ``codes``, from as many threads started together; the results, in order."""
    results: list = [None] * len(codes)
    start = threading.Barrier(len(codes))

    def call(i: int) -> None:
        start.wait()
        results[i] = sb.run(codes[i])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(codes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The largest number of (start, end) intervals that overlap at one instant."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])  # ends first at ties
    live = peak = 0
    for _, step in events:
        live += step
        peak = max(peak, live)
    return peak


def files_owned_by(uids: range, dirs, prefix: str | None = None) -> list[str]:
    """Entries directly in ``dirs`` owned by one of ``uids`` (a child's leftovers on the host),
    or, with ``prefix``, named with it."""
    found = []
    for d in dirs:
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            try:
                if (prefix and e.name.startswith(prefix)) or e.stat(follow_symlinks=False).st_uid in uids:
                    found.append(e.path)
            except OSError:
                pass
    return found


def mount_points() -> set[str]:
    return {line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()}


def _write(path: Path, value: int | str) -> None:
    with open(path, "w") as f:
        f.write(str(value))


_host_pid = os.getpid()


def _remember_host_pid() -> None:
    """In a child of the zygote, right after the fork (before any layer): its pid on the host.

    A confined child is pid 1 of its own PID namespace; the tests look at it from outside, by
    this pid. /proc here is still the zygote's, of the host's namespace.
    """
    global _host_pid
    try:
        _host_pid = int(os.readlink("/proc/self"))
    except (OSError, ValueError):
        _host_pid = os.getpid()


os.register_at_fork(after_in_child=_remember_host_pid)  # imported by the zygote, before it forks


def target(code: str) -> bytes:
    """A light target: ``bytes N``, ``raise``, ``str``, ``sleep S``, ``exit N``, ``pid``, ``env``,
    ``spin``, ``limits``, ``read PATH`` (a directory's sorted listing, a file's first bytes, or the
    error's name), ``span S`` (sleep S seconds; JSON: when it started and ended by the wall clock,
    its uid and pid), and ``early S`` / ``early-kill`` / ``early-oom``: write a whole
    result (``early <pid>``) first, then sleep S seconds / die (SIGKILL; as pid 1 of its own PID
    namespace, which drops that, SIGSEGV) / blow the memory cgroup. Every pid is the child's pid
    on the host, where the tests see it.
    """
    cmd, _, arg = code.partition(" ")
    if cmd == "span":
        start = time.time()
        time.sleep(float(arg))
        return json.dumps({"start": start, "end": time.time(), "uid": os.getuid(), "pid": _host_pid}).encode()
    if cmd == "read":
        try:
            if os.path.isdir(arg):
                return json.dumps(sorted(os.listdir(arg))).encode()
            with open(arg, "rb") as f:
                return f.read(200)
        except OSError as e:
            return type(e).__name__.encode()
    if cmd.startswith("early"):
        protocol.write_frame(3, protocol.RESULT, f"early {_host_pid}".encode())
        if cmd == "early-kill":
            os.kill(os.getpid(), signal.SIGKILL)
            ctypes.string_at(0)  # still here: pid 1 of its namespace
        if cmd == "early-oom":
            m = mmap.mmap(-1, 1 << 30)  # shared: not data, only the memory cgroup stops it
            for i in range(0, len(m), 4096):
                m[i] = 1
        time.sleep(float(arg or 0))
        return b"late"
    if cmd == "spin":
        while True:
            pass
    if cmd == "limits":
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu = resource.getrlimit(resource.RLIMIT_CPU)
        return json.dumps({"cpu_used": usage.ru_utime + usage.ru_stime, "rlimit_cpu": cpu}).encode()
    if cmd == "bytes":
        return b"x" * int(arg)
    if cmd == "raise":
        raise ValueError("the target failed on purpose")
    if cmd == "str":
        return "not bytes"  # type: ignore[return-value]
    if cmd == "sleep":
        time.sleep(float(arg))
        return b"slept"
    if cmd == "exit":
        os._exit(int(arg))
    if cmd == "pid":
        return str(_host_pid).encode()
    if cmd == "env":
        return "\n".join(f"{k}={v}" for k, v in sorted(os.environ.items())).encode()
    return code.encode()
