"""The sandbox's cgroups (v1 memory + pids): one per slot, one for the zygote, one around them;
and one cpu cgroup for all of them, where the host has a v1 cpu hierarchy.

Layout, in each of the memory and pids hierarchies::

    <parent>/gradstep-<server pid>-<n>/          pids.max: every slot's tasks + the zygote's
    <parent>/gradstep-<server pid>-<n>/zygote/   the zygote (children start here)
    <parent>/gradstep-<server pid>-<n>/slot-<i>/ memory + pids limits; a child joins its slot

The parent process (root) creates and removes them; a child writes its own
pid into its slot's ``cgroup.procs`` before it drops privileges.
cgroup v2 is not supported yet: there the layer reports itself unavailable.

The cpu cgroup, ``<the server's cpu cgroup>/gradstep-<server pid>-<n>/`` with ``cpu.shares``
``CPU_SHARES``, holds the zygote, so every child it forks (a child cannot leave it: it never sees
cgroupfs again). Without it each child outranked the server: a child's
``setsid`` gives it an autogroup of its own (``/proc/sys/kernel/sched_autogroup_enabled``), which
the scheduler weighs like the server's whole session, so two runs took two thirds of the CPUs
from the server's event loop and checkers (``benchmarks/stall.py``: /healthz p99 22-29 ms under
load, 8-12 ms with the group). Its place is beside the server's own process whatever
``cgroup_parent`` says, as the weight is relative to the server. Where it cannot be made the
limits still hold: ``cpu_state`` says why, and the server warns.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
CPU_HIERARCHY = ROOT / "cpu"
CONTROLLERS = ("memory", "pids")
# The sandbox's children together weigh as much as one nice-0 process (or session): under load
# they share the CPUs with the server half and half, instead of each child weighing as much as it.
CPU_SHARES = 1024
_instances = itertools.count()


def cgroup_of(controller: str, pid: int | str = "self") -> str:
    """The path of a process's cgroup (this one's by default) in a v1 hierarchy ("/" if it can't tell)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            return path
    return "/"


class Cgroups:
    def __init__(self, parent: str | None, slots: int, memory_mb: int, max_tasks: int):
        self.slots = slots
        self.memory_bytes = memory_mb << 20
        self.max_tasks = max_tasks
        name = f"gradstep-{os.getpid()}-{next(_instances)}"
        self.tops = {
            c: ROOT / c / (parent if parent is not None else cgroup_of(c)).strip("/") / name
            for c in CONTROLLERS
        }
        self.cpu = CPU_HIERARCHY / cgroup_of("cpu").strip("/") / name
        self.cpu_state = "not created"
        self.created: list[Path] = []

    # -- paths ---------------------------------------------------------------

    def _dirs(self, leaf: str) -> list[Path]:
        return [top / leaf for top in self.tops.values()]

    def zygote_procs(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self._dirs("zygote")]

    def slot_procs(self, slot: int) -> list[str]:
        return [str(d / "cgroup.procs") for d in self._dirs(f"slot-{slot}")]

    # -- lifecycle -----------------------------------------------------------

    def create(self) -> None:
        """Make every cgroup and set its limits; raises OSError (cleaned up) if the host won't."""
        for c in CONTROLLERS:
            if not (ROOT / c / "cgroup.procs").exists():
                raise OSError(f"no cgroup v1 {c} hierarchy at {ROOT / c} (cgroup v2 is not supported yet)")
        try:
            for c, top in self.tops.items():
                self._mkdir(top)
                if c == "pids":
                    _write(top / "pids.max", self.slots * self.max_tasks + 64)
                self._mkdir(top / "zygote")
                for i in range(self.slots):
                    slot = top / f"slot-{i}"
                    self._mkdir(slot)
                    if c == "memory":
                        _write(slot / "memory.limit_in_bytes", self.memory_bytes)
                        if (slot / "memory.memsw.limit_in_bytes").exists():
                            _write(slot / "memory.memsw.limit_in_bytes", self.memory_bytes)
                    else:
                        _write(slot / "pids.max", self.max_tasks)
        except OSError:
            self.remove()
            raise
        self.cpu_state = self._create_cpu()

    def _create_cpu(self) -> str:
        """The cpu cgroup's state: "active", or "unavailable: <why>" (no path: /healthz shows it)."""
        if not (CPU_HIERARCHY / "cpu.shares").exists():
            return "unavailable: no cgroup v1 cpu hierarchy"
        try:
            self._mkdir(self.cpu)
            _write(self.cpu / "cpu.shares", CPU_SHARES)
        except OSError as e:
            return f"unavailable: {e.strerror}"  # a directory it made is in ``created``: ``remove`` takes it
        return "active"

    def _mkdir(self, path: Path) -> None:
        path.mkdir()
        self.created.append(path)

    def join_zygote(self, pid: int) -> None:
        for procs in self.zygote_procs():
            _write(Path(procs), pid)
        if self.cpu_state == "active":
            _write(self.cpu / "cgroup.procs", pid)  # its children are forked into it

    def oom_kills(self, slot: int) -> int:
        """How many times the OOM killer has killed a task in this slot's cgroup."""
        try:
            text = (self.tops["memory"] / f"slot-{slot}" / "memory.oom_control").read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def _peak_file(self, slot: int) -> str:
        return f"{self.tops['memory']}/slot-{slot}/memory.max_usage_in_bytes"

    def reset_memory_peak(self, slot: int) -> bool:
        """Start the slot's memory high-water mark again from what it holds now (a run begins)."""
        try:  # os calls, not open(): a text file object costs ~10 times as much, on the run's path
            fd = os.open(self._peak_file(slot), os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        except OSError:
            return False
        return True

    def memory_peak(self, slot: int) -> int | None:
        """The most memory (bytes) the slot's cgroup was charged since its last reset: what counts
        against its limit (pages its child wrote or brought in, not the zygote's it only shares)."""
        try:
            fd = os.open(self._peak_file(slot), os.O_RDONLY)
            try:
                return int(os.read(fd, 64))
            finally:
                os.close(fd)
        except (OSError, ValueError):
            return None

    def pids(self, leaf: str | None = None) -> set[int]:
        """Pids in one of our cgroups (``None``: all of them)."""
        found: set[int] = set()
        for d in self.created:
            if leaf is not None and d.name != leaf:
                continue
            try:
                found.update(int(p) for p in (d / "cgroup.procs").read_text().split())
            except OSError:
                pass
        return found

    def kill(self, leaf: str | None = None, spare: int | None = None) -> None:
        """SIGKILL every task in a slot's cgroup (or all of ours), except ``spare``."""
        for pid in self.pids(leaf) - {spare}:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def empty(self, leaf: str, timeout: float = 5.0) -> bool:
        """Kill every task in one of our cgroups and wait until none is left."""
        end = time.monotonic() + timeout
        while self.pids(leaf):
            self.kill(leaf)
            if time.monotonic() > end:
                return False
            time.sleep(0.002)
        return True

    def remove(self, timeout: float = 5.0) -> list[str]:
        """Kill what is left, then rmdir everything, leaves first. Returns what could not be removed."""
        end = time.monotonic() + timeout
        left = []
        for path in reversed(self.created):
            while True:
                self.kill_in(path)
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if time.monotonic() > end:
                        left.append(f"{path}: {e}")
                        break
                    time.sleep(0.01)
        self.created = []
        return left

    @staticmethod
    def kill_in(path: Path) -> None:
        try:
            pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
        except OSError:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _write(path: Path, value: int | str) -> None:
    with open(path, "w") as f:
        f.write(str(value))
