"""Throughput under load: many concurrent clients against a local server, then a leak check.

    .venv/bin/python benchmarks/load.py [--seconds 30] [--clients 64] [--workers N] [--queue Q]

Starts ``gradstep serve`` on a free loopback port (rate limit off, workers =
CPU count unless ``--workers``), warms it, then runs ``--clients`` concurrent
clients for ``--seconds``. Every request carries distinct code (a unique
comment), so nothing is served from the cache. A client that gets 503 or 429
waits its Retry-After, as a well-behaved client does. Printed: runs/s, p50/p95
latency of the 200s, responses by status code (and the traces by their
``status``), CPU per run (server and sandbox, load generator, the whole
machine), server RSS before and after (and its children's), and, after the
server is stopped, any process, cgroup, temp entry or mount left behind. Exit
status 1 on a 5xx other than 503, a failed run, a transport error or a leak.

Baselines, measured in the same run: the latency of a single run on the idle
server before the load starts, and the throughput the measured CPU cost per
run allows on this machine's CPUs.

This file also holds the harness the other server benchmarks (latency.py,
soak.py) import: ``Server`` starts and stops the server and accounts for
everything it and its sandbox created.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
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
import orjson

HOST = "127.0.0.1"  # loopback only: these scripts never send traffic anywhere else
SANDBOX_UID_BASE = 61000  # SandboxConfig.uid_base: slot i runs as uid 61000 + i
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
    found = set()
    for d in TEMP_DIRS:
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            try:
                if e.name.startswith("gradstep") or e.stat(follow_symlinks=False).st_uid in uids:
                    found.add(e.path)
            except OSError:
                pass
    return found


def mount_points() -> set[str]:
    return {line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()}


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

    def __init__(self, workers: int | None = None, env: dict[str, str] | None = None):
        self.workers = workers or os.cpu_count() or 1
        self.env = {"GRADSTEP_RATE": "0", **(env or {})}
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.TemporaryFile()  # unnamed: nothing in /tmp to mistake for a leak
        self.seen: dict[int, int] = {}  # every process seen in the server's tree: pid -> start time
        self.cgroup_dirs: list[Path] = []
        self._before_temp: set[str] = set()
        self._before_mounts: set[str] = set()
        self._before_zygotes: set[tuple[int, int]] = set()
        self._uids = range(SANDBOX_UID_BASE, SANDBOX_UID_BASE + self.workers)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> Server:
        self._before_temp = temp_entries(self._uids)
        self._before_mounts = mount_points()
        self._before_zygotes = zygotes()
        self.port = free_port()
        cmd = [sys.executable, "-m", "gradstep", "serve", "--host", HOST, "--port", str(self.port)]
        cmd += ["--workers", str(self.workers), "--log-level", "warning"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("GRADSTEP_")}
        env.update(self.env)
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
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
        self.health = health
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
                if name in ("memory", "pids"):
                    base = Path("/sys/fs/cgroup") / name / path.strip("/")
                    found += sorted(base.glob(f"gradstep-{self.pid}-*"))
        return found

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
        with httpx.Client(base_url=self.url, trust_env=False, timeout=10) as client:
            return client.get("/healthz").json()

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


# -- the load ---------------------------------------------------------------------------------


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)  # seconds, 200 responses
    codes: collections.Counter = field(default_factory=collections.Counter)
    trace_status: collections.Counter = field(default_factory=collections.Counter)
    errors: collections.Counter = field(default_factory=collections.Counter)  # transport errors
    unexpected: list[str] = field(default_factory=list)


async def client_loop(
    cid: int, client: httpx.AsyncClient, deadline: float, budget: itertools.count, cap: int, stats: Stats
) -> None:
    token = os.urandom(4).hex()
    for n in itertools.count():
        if time.monotonic() >= deadline or next(budget) >= cap:
            return
        code = f"{SEED}# load client {cid} request {n} {token}\n"
        t = time.perf_counter()
        try:
            r = await client.post("/api/trace", json={"code": code})
        except httpx.HTTPError as e:
            stats.errors[type(e).__name__] += 1
            await asyncio.sleep(0.1)
            continue
        dt = time.perf_counter() - t
        stats.codes[r.status_code] += 1
        if r.status_code == 200:
            stats.latencies.append(dt)
            status = orjson.loads(r.content).get("status")
            stats.trace_status[status] += 1
            if r.headers.get("x-gradstep-cache") != "miss" and len(stats.unexpected) < 5:
                stats.unexpected.append(f"cache {r.headers.get('x-gradstep-cache')} for distinct code")
        elif r.status_code in (429, 503):
            wait = float(r.headers.get("retry-after", "1"))
            await asyncio.sleep(max(0.0, min(wait, deadline - time.monotonic())))
        elif len(stats.unexpected) < 5:
            stats.unexpected.append(f"{r.status_code}: {r.text[:200]}")


async def run_load(url: str, clients: int, seconds: float, cap: int) -> tuple[Stats, float]:
    stats = Stats()
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    timeout = httpx.Timeout(120.0)
    async with httpx.AsyncClient(base_url=url, trust_env=False, limits=limits, timeout=timeout) as client:
        budget = itertools.count()
        t0 = time.perf_counter()
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(client_loop(i, client, deadline, budget, cap, stats) for i in range(clients)))
        elapsed = time.perf_counter() - t0
    return stats, elapsed


def idle_latency(url: str, runs: int) -> list[float]:
    """Sequential runs on the idle server (distinct code): the baseline for the ratios."""
    times = []
    with httpx.Client(base_url=url, trust_env=False, timeout=60) as client:
        for i in range(runs):
            t = time.perf_counter()
            r = client.post("/api/trace", json={"code": f"{SEED}# idle {i} {os.urandom(4).hex()}\n"})
            times.append(time.perf_counter() - t)
            r.raise_for_status()
    return times


def mb(kb: int) -> str:
    return f"{kb / 1024:.1f} MB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="default: CPU count")
    ap.add_argument("--queue", type=int, help="GRADSTEP_QUEUE (default: the server's, 32)")
    ap.add_argument("--max-requests", type=int, default=200_000, help="cap on requests, whatever the time")
    args = ap.parse_args()

    env = {} if args.queue is None else {"GRADSTEP_QUEUE": str(args.queue)}
    server = Server(args.workers, env).start()
    try:
        layers = server.health["sandbox"]["layers"]
        inactive = [f"{k} ({v})" for k, v in layers.items() if v != "active"]
        print(f"server pid {server.pid} on {server.url}, {args.workers} workers, {os.cpu_count()} CPUs")
        if inactive:
            print("note: sandbox layers not active here: " + ", ".join(inactive))
        idle_latency(server.url, 5)  # warm
        base = idle_latency(server.url, 20)
        rss_before, fds_before, threads_before = server.rss(), server.fds(), server.threads()
        cpu_before, own_before, machine_before = server.cpu(), os.times(), machine_cpu()
        stats, elapsed = asyncio.run(run_load(server.url, args.clients, args.seconds, args.max_requests))
        time.sleep(0.5)  # let the last children be reaped
        cpu_after, own_after, machine_after = server.cpu(), os.times(), machine_cpu()
        rss_after, fds_after, threads_after = server.rss(), server.fds(), server.threads()
        health = server.get_health()
    finally:
        left = server.stop()

    ok = stats.codes.get(200, 0)
    total = sum(stats.codes.values())
    p50, p95 = percentile(stats.latencies, 50), percentile(stats.latencies, 95)
    b50 = percentile(base, 50)
    print(f"\n{args.clients} clients for {args.seconds:g} s ({elapsed:.1f} s until the last response)")
    print(f"runs/s (200s)          {ok / elapsed:8.1f}   (target >= 50 on 2 cores)")
    print(f"requests/s (all)       {total / elapsed:8.1f}")
    print(f"latency of 200s        p50 {p50 * 1e3:7.1f} ms   p95 {p95 * 1e3:7.1f} ms")
    print(f"idle single run        p50 {b50 * 1e3:7.1f} ms   (baseline, same run)")
    print(
        f"p50 under load / idle  {p50 / b50:8.1f}x   (queueing: {args.clients} clients, {args.workers} workers)"
    )
    n = max(1, ok)  # CPU is charged to the runs; a 503 costs next to nothing
    user, system = cpu_after[0] - cpu_before[0], cpu_after[1] - cpu_before[1]
    client = (own_after.user - own_before.user) + (own_after.system - own_before.system)
    print(
        f"CPU per run            server + sandbox {(user + system) / n * 1e3:.1f} ms (user {user / n * 1e3:.1f},"
        f" system {system / n * 1e3:.1f}); load generator {client / n * 1e3:.1f} ms"
    )
    busy = machine_after[0] - machine_before[0]
    share = busy / (machine_after[1] - machine_before[1])
    print(
        f"machine CPU            {share:.0%} busy; {busy / n * 1e3:.1f} ms per run in all"
        f" ({(busy - user - system - client) / n * 1e3:.1f} ms outside this benchmark's processes:"
        " kernel workers, other load)"
    )
    ceiling = (os.cpu_count() or 1) * n / (user + system + client)
    print(
        f"CPU-bound ceiling      {ceiling:8.1f} runs/s on {os.cpu_count()} CPUs at these costs;"
        f" achieved {ok / elapsed / ceiling:.2f}x of it"
    )
    print("responses by code      " + ", ".join(f"{c}: {n}" for c, n in sorted(stats.codes.items())))
    print("traces by status       " + ", ".join(f"{s}: {n}" for s, n in sorted(stats.trace_status.items())))
    if stats.errors:
        print("transport errors       " + ", ".join(f"{e}: {n}" for e, n in stats.errors.most_common()))
    bad_5xx = {c: n for c, n in stats.codes.items() if c >= 500 and c != 503}
    print(f"5xx other than 503     {sum(bad_5xx.values())}" + (f"  {bad_5xx}" if bad_5xx else ""))
    for u in stats.unexpected:
        print(f"  unexpected: {u}")
    print(
        f"server RSS             before {mb(rss_before['server'])}, after {mb(rss_after['server'])}"
        f" ({(rss_after['server'] - rss_before['server']) / 1024:+.1f} MB;"
        f" trace cache now {health['cache']['bytes'] / 2**20:.1f} MB in {health['cache']['entries']} entries)"
    )
    print(
        f"children RSS (sum)     before {mb(rss_before['children'])} in {rss_before['processes']} processes,"
        f" after {mb(rss_after['children'])} in {rss_after['processes']}"
    )
    print(
        f"server fds / threads   before {fds_before} / {threads_before}, after {fds_after} / {threads_after}"
    )
    print(f"zygote starts          {health['sandbox']['starts']} (1 = it never died)")
    print_leftovers(left)
    failed = bool(bad_5xx) or not left.clean or stats.trace_status.keys() - {"ok"} or stats.errors
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
