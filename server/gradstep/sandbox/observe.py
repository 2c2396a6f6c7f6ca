"""The parent's own look at a child: its CPU time, memory and limits, read from the host's /proc.

A child runs a stranger's code in the same process as the target, so whatever it writes about itself
(a trace saying ``status: limit``, timings) may be the code's words. What is read here is the
kernel's account of the process, read by the parent (the server) through ``/proc/<host pid>``,
which the child cannot write: NOTE [what the runner saw of a run].

Each read goes through a descriptor of the child's ``/proc/<pid>`` directory, opened while the
child was known to be alive (when the zygote reported its fork): a read through it fails once the
process is reaped, and never reaches another process that got its pid since.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # units of utime/stime in /proc/<pid>/stat


def open_process(pid: int) -> int | None:
    """A descriptor of ``/proc/<pid>`` (a directory), or None if it is not there."""
    try:
        return os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None


def _read(proc_fd: int, name: str) -> bytes | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd)
    except OSError:
        return None
    try:
        return os.read(fd, 1 << 16)
    except OSError:  # ESRCH: reaped between the open and the read
        return None
    finally:
        os.close(fd)


def cpu_seconds(proc_fd: int) -> float | None:
    """User + system CPU time of the whole process (every thread, those that ended too) since its
    fork, in seconds (to the clock tick, 10 ms): /proc/<pid>/stat's utime and stime."""
    data = _read(proc_fd, "stat")
    if not data:
        return None
    try:
        fields = data[data.rindex(b")") + 2 :].split()  # after "pid (comm) ": the comm may hold spaces
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    except (ValueError, IndexError):
        return None


def memory_kb(proc_fd: int) -> dict[str, int]:
    """VmPeak (the largest its address space was) and VmHWM (the most resident memory it had, the
    zygote's pages it shares included) in kB, from /proc/<pid>/status; {} once it has exited."""
    data = _read(proc_fd, "status") or b""
    found = {}
    for key in ("VmPeak", "VmHWM"):
        value = _field(data, key.encode() + b":")
        if value is not None:
            found[key] = int(value)
    return found


def _field(data: bytes, name: bytes) -> bytes | None:
    """The first word after ``name`` at the start of a line of ``data`` (None: no such line)."""
    at = data.find(b"\n" + name)
    if at < 0:
        return None
    words = data[at + 1 + len(name) : data.find(b"\n", at + 1)].split()
    return words[0] if words else None


@dataclass
class Limits:
    """The soft limits a process runs under, from /proc/<pid>/limits (None: unlimited or unread)."""

    cpu_seconds: float | None = None  # RLIMIT_CPU: seconds of its CPU time since its fork
    data_bytes: int | None = None  # RLIMIT_DATA: its whole data segment, what it started with included


def limits(proc_fd: int) -> Limits | None:
    data = _read(proc_fd, "limits")
    if not data:
        return None
    cpu, size = _field(data, b"Max cpu time"), _field(data, b"Max data size")
    return Limits(
        cpu_seconds=float(cpu) if cpu not in (None, b"unlimited") else None,
        data_bytes=int(size) if size not in (None, b"unlimited") else None,
    )
