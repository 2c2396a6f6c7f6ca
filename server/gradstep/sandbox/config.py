"""The sandbox's two data types: what to run with (SandboxConfig) and what came back (RunResult)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

# Confinement layers, in the order a child applies them. Names are used by
# ``SandboxConfig.disable``, ``Sandbox.health()["layers"]`` and ``RunResult.timings``.
LAYERS = (
    "setsid",  # own session and process group: kill(0, ...) hits only the child
    "cgroup",  # per-slot memory + pids cgroup: the hard backstop
    "close_fds",  # nothing inherited but the result pipe; 0/1/2 are /dev/null
    "namespaces",  # unshare(NEWNS|NEWNET|NEWIPC|NEWUTS|NEWCGROUP): no network, private mounts
    "pidns",  # its own PID namespace, made by the zygote's fork (the child is its pid 1): checked
    "root",  # the zygote's minimal root (the interpreter and its libraries, no host files): checked
    "mounts",  # everything read-only/nosuid/nodev, tmpfs work dir, fresh /proc of pids only (hidden paths w/o root)
    "rlimits",  # DATA, CPU, FSIZE, NOFILE, NPROC, CORE=0
    "uid",  # per-slot unprivileged uid/gid, no supplementary groups
    "no_new_privs",  # PR_SET_NO_NEW_PRIVS + PR_SET_PDEATHSIG(SIGKILL)
    "seccomp",  # deny exec, fork, sockets, ptrace, signals to others, mount, bpf, ...
)


def data_mb(memory_mb: int) -> int:
    """How much data (RLIMIT_DATA, beyond what a child starts with) a run with ``memory_mb`` may
    allocate: an eighth less than its memory cgroup allows (at least 32 MB less), so an allocation
    past it is refused (MemoryError, torch's "can't allocate memory") and the run ends cleanly with
    what it recorded, instead of the cgroup's OOM kill leaving nothing. The rest is room for what is
    not data (the zygote's pages a run copies, page tables, shared mappings) and for writing the trace."""
    return max(16, memory_mb - max(32, memory_mb // 8))


EXTRA_SLOTS = 2  # SandboxConfig.extra_slots' default: see benchmarks/spares.py


@dataclass
class SandboxConfig:
    # Runs at once: children executing code, each counted until it is reaped (a child that wrote
    # its result early and lingers still counts). Callers beyond it queue.
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    # Slots beyond ``workers``: the sandbox has workers + extra_slots slots, each with its own uid
    # and cgroup and at most one child, and a free slot keeps a prewarmed spare. The extra slots
    # never raise the number of runs at once; they make a ready spare likely when a run arrives
    # (a slot's next spare is forked and prewarmed only after its last child is reaped).
    extra_slots: int = EXTRA_SLOTS
    memory_mb: int = 1024  # per child: memory cgroup limit, and RLIMIT_DATA a little below it (data_mb)
    cpu_seconds: int = 10  # per child: RLIMIT_CPU (SIGKILL at it: see sandbox/__init__.py, pidns)
    wall_seconds: float = 15.0  # per run, from request to result: then SIGKILL
    max_output_bytes: int = 8 << 20  # the target's return value, larger is "limit: output"
    tmp_mb: int = 16  # the child's private tmpfs work dir (/tmp in its mount namespace)
    max_tasks: int = 64  # per child: threads + processes (cgroup pids.max, RLIMIT_NPROC)
    max_files: int = 256  # per child: RLIMIT_NOFILE
    # What to run is the caller's: "module:function", run(code: str) -> bytes (required).
    target: str = ""
    preload: list[str] = field(default_factory=list)  # modules the zygote imports before forking
    warmup: str = ""  # passed once to the target in the zygote, before forking (empty: no warm-up run)
    # Passed to the target by each child, confined, before its code arrives (its output discarded;
    # empty: nothing): the zygote's pages a run writes to are copied then, off the request's path
    # (a forked child's first run of the tracer takes ~1,500 copy-on-write faults, ~10 ms).
    prewarm: str = ""
    # Paths a child must not see, and paths under them that stay visible. With the minimal
    # root ("root" layer) a hidden path is simply not bound into it (an empty tmpfs covers one
    # inside a visible directory); without it an empty read-only tmpfs is mounted over each and
    # the kept paths are bound back. None: hide the gradstep project (the package's repo, or
    # the package itself, and any other gradstep checkout on the import path), keep the
    # interpreter's prefixes (a venv inside the repo stays usable).
    hide: list[str] | None = None
    keep: list[str] | None = None
    # slot i runs as uid = gid = uid_base + i, for i < workers + extra_slots: one Sandbox per
    # range of that size (replicas on one host need disjoint ranges)
    uid_base: int = 61000
    # cgroup (path inside each v1 hierarchy) under which this sandbox creates its
    # own; None: the cgroup the server process is in.
    cgroup_parent: str | None = None
    pythonpath: list[str] = field(default_factory=list)  # extra import paths for the zygote
    disable: frozenset[str] = frozenset()  # layer names to skip (benchmarks, tests)
    # Keep one spare child per free slot, forked and confined before any code
    # arrives (False: fork when a run asks, the same path otherwise; benchmarks, tests).
    prefork: bool = True
    # Back the zygote's heap with transparent huge pages (MADV_COLLAPSE, best effort):
    # each fork and each child's exit then cost a fraction of the CPU; and have malloc ask
    # for them on the heap it grows (a child's run takes a third of the page faults).
    huge_pages: bool = True

    @property
    def slots(self) -> int:
        """How many slots (uids, cgroups, children alive at most): workers + extra_slots."""
        return self.workers + self.extra_slots


Status = Literal["ok", "timeout", "limit", "crashed", "cancelled"]  # cancelled: run(cancel=) was set


@dataclass
class RunResult:
    status: Status
    output: bytes = b""  # the target's return value when status == "ok"
    limit: str | None = None  # "memory", "cpu", "wall", "output" when status is "limit"/"timeout"
    signal: str | None = None  # the signal that ended the child, if one did ("SIGKILL")
    detail: str = ""  # one human sentence: which limit, which signal, what failed (the server's words)
    reported: str | None = None  # what the child wrote about its own failure: untrusted, its words only
    seconds: float = 0.0  # wall time of run(), queueing included
    # milliseconds: "queue" (waiting for a slot), "spare" (from handing over the code until
    # the child had it, confined: ~0 for a ready spare), the child's own "fork" and one
    # entry per confinement layer (off the request's path for a spare), "cpu_before" (CPU
    # the child used before the target, counted by RLIMIT_CPU), "target"
    timings: dict[str, float] = field(default_factory=dict)
    # NOTE [what the runner saw of a run]
    # What the parent measured of the child itself, never what the child wrote: the kernel's
    # account of the process (/proc/<host pid>, the wait status's rusage, the slot's memory
    # cgroup), read by the server's process, which the child cannot reach (observe.py). The child's
    # own bytes (its output, a trace claiming ``status: limit``, ``reported``) change none of them.
    # None: not measured (no child ran: a queue timeout, a closed sandbox; or not readable here:
    # no cgroup layer). Whether a run hit a limit is decided from these (gradstep.voice).
    #
    # Seconds of CPU time (user + system, every thread) the child had used since its fork when the
    # run ended (its result read, or it was killed or found dead): /proc/<pid>/stat read while the
    # child is held after its result (NOTE [a child's exit waits for its release]), else wait4's
    # rusage once the zygote reaped it. The clock RLIMIT_CPU counts (``cpu_limit``), so it includes
    # ``cpu_before``; to the clock tick (10 ms).
    cpu_used: float | None = None
    cpu_before: float | None = None  # of cpu_used, what the child had used before its code ran (its fork,
    # confinement, the prewarm): read as soon as it reports itself confined with its code, just
    # before the target starts (the target may have begun a moment before: an upper bound)
    wall_used: float | None = None  # seconds from the hand-over of the code to the run's end (result
    # read, or the kill): the clock of ``wall_seconds``, measured by the parent
    # The slot's memory cgroup's high-water mark (memory.max_usage_in_bytes, reset at the hand-over),
    # MB: the most memory charged to the child at once during the run, what ``memory_mb`` limits (its
    # new allocations, the zygote's pages it wrote to, files it brought in; not the zygote's pages it
    # only shares). A run the cgroup OOM-killed reads its limit. None without the cgroup layer.
    memory_peak_mb: float | None = None
    # The child's VmHWM (peak resident memory, the zygote's ~250 MB of shared pages included; wait4's
    # ru_maxrss once it is gone) and VmPeak (peak address space: torch maps ~620 MB it never touches),
    # MB, from /proc/<pid>/status while it is held
    vm_hwm_mb: float | None = None
    vm_peak_mb: float | None = None
    # The limits the child ran under, as the parent read them (/proc/<pid>/limits): RLIMIT_CPU's soft
    # limit in cpu_used's clock (s; read at the run's end while the child is there: the job may have
    # lowered it for a fix run, the code may lower it too, neither can raise it above what the sandbox
    # set; else as read when it reported itself confined), RLIMIT_DATA's soft limit (MB, its whole data
    # segment: what the child started with + data_mb(memory_mb), as read then), the wall-clock
    # time the run was given from the hand-over (s: ``wall_seconds``, or less when the caller's
    # deadline came first), and its memory cgroup's limit (MB; None without the cgroup layer)
    cpu_limit: float | None = None
    data_limit_mb: float | None = None
    wall_limit: float | None = None
    memory_limit_mb: float | None = None
