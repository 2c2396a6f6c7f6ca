"""The server harness the benchmarks share: start ``gradstep serve``, account for what it leaves.

``Server`` starts the server on a free loopback port as a subprocess, waits for
its sandbox, and on ``stop()`` lists every process, cgroup, temp entry or mount
it or its sandbox left behind. Used by load.py, latency.py, soak.py and scale.py.
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from gradstep.sandbox.config import EXTRA_SLOTS
from testkit.sandbox_guard import files_owned_by, mount_points, uid_base  # the tests' leftover probes

HOST = "127.0.0.1"  # loopback only: these scripts never send traffic anywhere else
SANDBOX_UID_BASE = uid_base()  # SandboxConfig.uid_base (GRADSTEP_UID_BASE, else 61000): slot i runs as it + i
TEMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
START_TIMEOUT = 180.0  # seconds for the server to import torch, start the zygote and answer /healthz
STOP_TIMEOUT = 30.0  # seconds for a graceful stop (SIGTERM) before SIGKILL
SETTLE = 5.0  # seconds given to the sandbox's children to disappear after the server exits

SEED = "import torch\nx = torch.ones(3, requires_grad=True)\ny = (x*2).sum()\ny.backward()\n"


# -- /proc --------------------------------------------------------------------------------


def proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, start time in clock ticks) for every live process."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        table[int(entry.name)] = (int(fields[1]), int(fields[19]))
    return table


def descendants(root: int, table: dict[int, tuple[int, int]]) -> set[int]:
    children = collections.defaultdict(list)
    for pid, (ppid, _) in table.items():
        children[ppid].append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of ``pid`` and of its children it has reaped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0.0, 0.0
    fields = stat[stat.rindex(b")") + 2 :].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    tick = os.sysconf("SC_CLK_TCK")
    return (utime + cutime) / tick, (stime + cstime) / tick


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(ticks[:8]) - idle) / tick, sum(ticks[:8]) / tick


def count_entries(path: str) -> int:
    try:
        return len(os.listdir(path))
    except OSError:
        return 0


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def cgroup_text(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return ""


def zygotes() -> set[tuple[int, int]]:
    """Every gradstep zygote on this machine, as (pid, start time)."""
    return {
        (pid, start) for pid, (_, start) in proc_table().items() if "gradstep.sandbox.zygote" in cmdline(pid)
    }


def temp_entries(uids: range) -> set[str]:
    """Entries in the temp dirs named gradstep* or owned by a sandbox uid."""
    return set(files_owned_by(uids, TEMP_DIRS, prefix="gradstep"))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if q < 100 else max(values)


# -- the server -----------------------------------------------------------------------------


@dataclass
class Leftovers:
    processes: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    temp: list[str] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)
    other_zygotes: list[str] = field(default_factory=list)  # new, but not this server's: not counted
    stop: str = ""  # how the server stopped

    @property
    def clean(self) -> bool:
        return not (self.processes or self.cgroups or self.temp or self.mounts)

    def report(self) -> list[str]:
        lines = [f"server stop: {self.stop}"]
        for label, items in (
            ("leftover processes", self.processes),
            ("leftover cgroups", self.cgroups),
            ("leftover temp entries", self.temp),
            ("leftover mounts", self.mounts),
        ):
            lines.append(f"{label}: {len(items)}" + "".join(f"\n    {i}" for i in items))
        if self.other_zygotes:
            lines.append(
                "note: zygotes that appeared during the run but belong to other processes (not counted): "
                + ", ".join(self.other_zygotes)
            )
        return lines


class Server:
    """``gradstep serve`` on a free loopback port, as a subprocess; ``stop()`` checks what it left."""

    def __init__(
        self,
        workers: int | None = None,
        env: dict[str, str] | None = None,
        uid_base: int = SANDBOX_UID_BASE,
        wrapper: list[str] | None = None,  # a command the server runs under (it must pass SIGTERM on)
        executable: str = sys.executable,  # the interpreter that runs `-m gradstep serve`
    ):
        self.workers = workers or os.cpu_count() or 1
        self.wrapper = wrapper or []
        self.executable = executable
        # replicas on one machine need disjoint sandbox uid ranges (GRADSTEP_UID_BASE)
        # load from one address: neither its rate nor its runs at once are capped
        self.env = {
            "GRADSTEP_RATE": "0",
            "GRADSTEP_CLIENT_RUNS": "10000",
            "GRADSTEP_UID_BASE": str(uid_base),
            **(env or {}),
        }
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.TemporaryFile()  # unnamed: nothing in /tmp to mistake for a leak
        self.seen: dict[int, int] = {}  # every process seen in the server's tree: pid -> start time
        self.cgroup_dirs: list[Path] = []
        self._before_temp: set[str] = set()
        self._before_mounts: set[str] = set()
        self._before_zygotes: set[tuple[int, int]] = set()
        extra = int(self.env.get("GRADSTEP_EXTRA_SLOTS", EXTRA_SLOTS))
        self._uids = range(uid_base, uid_base + self.workers + extra)  # one per sandbox slot

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> Server:
        return self.launch().wait_ready()

    def launch(self) -> Server:
        """Start the process (without waiting for it: replicas can import torch side by side)."""
        self._before_temp = temp_entries(self._uids)
        self._before_mounts = mount_points()
        self._before_zygotes = zygotes()
        self.port = free_port()
        cmd = [
            *self.wrapper,
            self.executable,
            "-m",
            "gradstep",
            "serve",
            "--host",
            HOST,
            "--port",
            str(self.port),
        ]
        cmd += ["--workers", str(self.workers), "--log-level", "warning"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("GRADSTEP_")}
        env.update(self.env)
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        return self

    def wait_ready(self) -> Server:
        """Wait until /healthz reports the sandbox's zygote."""
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT
        with httpx.Client(base_url=self.url, trust_env=False, timeout=5) as client:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the server exited with {self.proc.returncode}:\n{self.output()}")
                try:
                    health = client.get("/healthz").json()
                    if health["sandbox"]["zygote"]:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the server did not get ready in {START_TIMEOUT:.0f} s")
                time.sleep(0.1)
        self.health = self._with_zygote_pid(health)
        self.cgroup_dirs = self._cgroup_dirs()
        self.sample()
        return self

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def _cgroup_dirs(self) -> list[Path]:
        """The cgroups the sandbox made for this server (gradstep-<server pid>-<n>), in each hierarchy."""
        found = []
        for line in cgroup_text(self.pid).splitlines():
            _, names, path = line.split(":", 2)
            for name in names.split(","):
                if name in ("memory", "pids", "cpu"):  # the sandbox's cpu group sits beside the server
                    base = Path("/sys/fs/cgroup") / name / path.strip("/")
                    found += sorted(base.glob(f"gradstep-{self.pid}-*"))
        return found

    def remove_cgroups(self, timeout: float = 10.0) -> list[str]:
        """Remove the sandbox's cgroups once empty (a server killed with SIGKILL cannot); what is left."""
        deadline = time.monotonic() + timeout
        for top in self.cgroup_dirs:
            while top.exists() and time.monotonic() < deadline:
                inner = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts))
                for d in [*reversed(inner), top]:  # deepest first: a cgroup with children cannot go
                    try:
                        d.rmdir()
                    except OSError:
                        pass
                if top.exists():
                    time.sleep(0.05)
        return [str(d) for d in self.cgroup_dirs if d.exists()]

    def sample(self) -> set[int]:
        """Remember every process now in the server's tree; returns their pids."""
        table = proc_table()
        tree = descendants(self.pid, table)
        for pid in tree:
            self.seen[pid] = table[pid][1]
        return tree

    def rss(self) -> dict[str, int]:
        """VmRSS in kB: the server process, its descendants (zygote + running children), and both."""
        tree = self.sample()
        own = rss_kb(self.pid)
        kids = sum(rss_kb(p) for p in tree)
        return {"server": own, "children": kids, "total": own + kids, "processes": len(tree)}

    def cpu(self) -> tuple[float, float]:
        """(user, system) CPU seconds used so far by the server and its whole tree."""
        tree = self.sample()
        user = system = 0.0
        for pid in (self.pid, *tree):
            u, s = cpu_times(pid)
            user, system = user + u, system + s
        return user, system

    def fds(self) -> int:
        return count_entries(f"/proc/{self.pid}/fd")

    def threads(self) -> int:
        return count_entries(f"/proc/{self.pid}/task")

    def get_health(self) -> dict:
        """/healthz, with the zygote's pid added (for tests that check it survived an attack)."""
        with httpx.Client(base_url=self.url, trust_env=False, timeout=10) as client:
            return self._with_zygote_pid(client.get("/healthz").json())

    def zygote_pid(self) -> int | None:
        """The server's zygote, found in its process tree: /healthz gives counts, never process ids."""
        table = proc_table()
        mine = {pid for pid in descendants(self.pid, table) if "gradstep.sandbox.zygote" in cmdline(pid)}
        roots = [pid for pid in mine if table[pid][0] not in mine]  # not one of its forked children
        return roots[0] if len(roots) == 1 else None

    def _with_zygote_pid(self, health: dict) -> dict:
        sandbox = health.get("sandbox")
        if isinstance(sandbox, dict) and sandbox.get("zygote"):
            sandbox.setdefault("zygote_pid", self.zygote_pid())
        return health

    def stop(self) -> Leftovers:
        """SIGTERM (uvicorn's graceful stop runs the lifespan's close), SIGKILL if it hangs; then look."""
        assert self.proc is not None
        left = Leftovers()
        if self.proc.poll() is None:
            self.sample()
            self.proc.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            try:
                self.proc.wait(STOP_TIMEOUT)
                # uvicorn re-raises SIGTERM once its graceful shutdown (lifespan included) is done
                how = (
                    "SIGTERM" if self.proc.returncode == -signal.SIGTERM else f"status {self.proc.returncode}"
                )
                left.stop = f"exited ({how}) {time.monotonic() - t0:.1f} s after SIGTERM"
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                left.stop = f"did NOT exit within {STOP_TIMEOUT:.0f} s of SIGTERM; killed (SIGKILL)"
        else:
            left.stop = f"had already exited ({self.proc.returncode})"
        deadline = time.monotonic() + SETTLE
        while True:
            left.processes = self._leftover_processes()
            left.cgroups = [str(d) for d in self.cgroup_dirs if d.exists()]
            if not (left.processes or left.cgroups) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        left.temp = sorted(temp_entries(self._uids) - self._before_temp)
        left.mounts = sorted(mount_points() - self._before_mounts)
        for pid, _ in sorted(zygotes() - self._before_zygotes):
            if pid not in self.seen:
                left.other_zygotes.append(str(pid))
        return left

    def _leftover_processes(self) -> list[str]:
        """Live processes that were in the server's tree, sit in its cgroups, or descend from either."""
        table = proc_table()
        mark = f"/gradstep-{self.pid}-"
        roots = {pid for pid, (_, start) in table.items() if self.seen.get(pid) == start}
        roots |= {pid for pid in table if mark in cgroup_text(pid)}
        if self.proc is not None and self.proc.poll() is None:
            roots.add(self.pid)
        found = set(roots)
        for pid in roots:
            found |= descendants(pid, table)
        return [
            f"pid {pid} ppid {table[pid][0]}: {cmdline(pid)[:100]}" for pid in sorted(found) if pid in table
        ]


def print_leftovers(left: Leftovers) -> None:
    for line in left.report():
        print(line)
    print("nothing leaked" if left.clean else "LEAK: something was left behind (see above)")
