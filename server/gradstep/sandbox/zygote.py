"""The zygote: a warm, single-threaded process that forks confined children.

Started by ``Sandbox.start()`` as ``python -s -P -m gradstep.sandbox.zygote FD``
with a minimal environment; FD is its end of the control socketpair. It
reads its plan (the first message), imports and warms the preloads, runs the
target once, freezes the heap, probes which confinement layers this host
allows, says "ready", then serves:

* ``{"op": "spare", "child": id, "slot": i}`` + two fds (the read end of the
  child's code pipe, the write end of its result pipe): fork a child that
  confines itself for slot ``i``, then waits for its code; reply
  ``{"op": "forked", "child": id, "pid": pid}`` (or ``"fork_failed"``). The
  parent keeps the other ends: it hands the code straight to the child.
* ``{"op": "kill", "child": id}``: SIGKILL that child if it has not been reaped
  (a pid is never reused before its parent reaps it, so this is race-free).
* every reaped child: ``{"op": "exited", "child": id, "status": wait status, "cpu": s}``.

EOF on the control socket (the server died or closed it) kills every child and exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
import time
import traceback

from gradstep.sandbox import protocol, rootfs
from gradstep.sandbox.confine import (
    CLONE_NEWPID,
    PR_SET_CHILD_SUBREAPER,
    Confinement,
    LayerFailed,
    prctl,
)
from gradstep.sandbox.libc import check, libc
from gradstep.sandbox.mounts import under
from gradstep.sandbox.protocol import Channel, write_frame


def load_target(spec: str):
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def preload(modules: list[str]) -> None:
    if any(m == "torch" or m.startswith(("torch.", "gradstep")) for m in modules):
        import torch

        torch.set_num_threads(1)  # before any torch op: libgomp deadlocks in a child otherwise
    for m in modules:
        importlib.import_module(m)


MADV_COLLAPSE = 25  # Linux >= 6.1
HUGE = 2 << 20


def collapse_huge_pages() -> int:
    """Back the zygote's anonymous memory with transparent huge pages; best effort. Returns MB.

    A fork copies one page-table entry per 2 MB huge page instead of 512 for
    4 KB pages, and the child's exit tears down as few: for this ~300 MB
    process, fork + exit drop from ~15-20 ms of CPU to ~5. Copy-on-write stays
    per 4 KB page (a huge page a child writes to is split in the child first),
    so a child copies no more memory than before; the zygote's RSS grows by a
    few MB. ``MADV_COLLAPSE`` works whatever the THP ``enabled`` setting, except
    ``never``, and doesn't mark the mappings for future huge pages. Where the
    kernel can't, nothing changes.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    with open("/proc/self/maps") as f:
        maps = f.read().splitlines()
    for line in maps:
        fields = line.split()
        name = fields[5] if len(fields) > 5 else ""
        if not fields[1].startswith("rw") or name not in ("", "[heap]"):
            continue  # private anonymous memory and the brk heap only
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        lo = (lo + HUGE - 1) & ~(HUGE - 1)
        hi &= ~(HUGE - 1)
        if hi > lo:
            libc.madvise(lo, hi - lo, MADV_COLLAPSE)  # errors (old kernel, THP off, no memory): skip
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1]) >> 10
    return 0


class Zygote:
    def __init__(self, chan: Channel, plan: dict):
        self.chan = chan
        self.plan = plan
        self.target = None
        self.children: dict[int, int] = {}  # pid -> child id
        self.pending: list[dict] = []
        self.huge_mb = 0
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.cgroup_fds: list[list[int]] = []  # per slot: its cgroup.procs files, open for writing
        self.visible: list[str] = []  # what the minimal root holds, once entered
        # Its own pidfd: each child gets a copy (to tell whether the zygote is alive, see
        # Confinement.no_new_privs), and it names the zygote's PID namespace to return to.
        try:
            self.self_fd: int | None = os.pidfd_open(os.getpid())
        except OSError:  # kernel < 5.3, or refused: no "pidns" layer (getppid() checks the zygote)
            self.self_fd = None
        self.new_pid_ns = False  # fork each child into a PID namespace of its own ("pidns" layer)

    # -- start-up ----------------------------------------------------------------

    def warm(self) -> None:
        preload(self.plan["preload"])
        self.target = load_target(self.plan["target"])
        if self.plan["warmup"]:
            out = self.target(self.plan["warmup"])
            if not isinstance(out, bytes):
                raise TypeError(f"the target returned {type(out).__name__}, not bytes")
        gc.collect()
        gc.freeze()  # forked children then don't touch (copy) the zygote's objects in gc passes
        self.huge_mb = collapse_huge_pages() if self.plan.get("huge_pages") else 0

    def open_cgroups(self) -> None:
        """Open every slot's cgroup.procs now: in the minimal root there is no cgroupfs to open."""
        if "cgroup" in self.plan["probe_layers"] and self.plan["slot_procs"]:
            self.cgroup_fds = [
                [os.open(p, os.O_WRONLY | os.O_CLOEXEC) for p in procs] for procs in self.plan["slot_procs"]
            ]

    def enter_root(self) -> str:
        """Move into the minimal root (rootfs.py), after warming (the maps list what it loaded).
        Returns the "root" layer's state; on failure the zygote stays on the host's tree."""
        plan = self.plan
        wanted = rootfs.wanted(sys.path, rootfs.mapped_files())
        chosen, covers = rootfs.visible(wanted, plan["hide"], plan["keep"])
        try:
            root_id = rootfs.enter(chosen, covers, sys.path)
        except OSError as e:
            return f"unavailable: {type(e).__name__}: {e}"
        plan["root_id"] = root_id
        plan["under_tmp"] = [p for p in chosen if under(p, "/tmp")]
        self.visible = chosen
        return "active"

    def slot_cgroup_fds(self, slot: int) -> list[int]:
        return self.cgroup_fds[slot] if self.cgroup_fds else []

    def other_cgroup_fds(self, slot: int) -> list[int]:
        return [fd for i, fds in enumerate(self.cgroup_fds) if i != slot for fd in fds]

    def fork_child(self) -> int:
        """os.fork(); with ``new_pid_ns``, into a PID namespace of its own, whose pid 1 the child is.

        unshare(CLONE_NEWPID) moves none of the zygote's processes, only its next child (and
        only once): so each fork is unshare, fork, then setns back to the zygote's own
        namespace. No fork beyond the child's own, and the zygote still sees (waits for,
        kills) it by its host pid.
        """
        if not self.new_pid_ns:
            return os.fork()
        check(libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
        try:
            pid = os.fork()
        except BaseException:
            self.own_pid_ns()
            raise
        if pid != 0:  # the zygote; the child stays in its new namespace
            self.own_pid_ns()
        return pid

    def own_pid_ns(self) -> None:
        # If this fails, the next unshare(CLONE_NEWPID) fails too (EINVAL): no child is forked
        if self.self_fd is None:
            raise OSError(errno.ENOSYS, "no pidfd of the zygote (pidfd_open)")
        check(libc.setns(self.self_fd, CLONE_NEWPID), "setns back to the zygote's PID namespace")

    def pid_ns_unavailable(self) -> str | None:
        """Why children can't have a PID namespace of their own here (None: they can).

        setns first, on the zygote's own namespace (a no-op): a seccomp profile that refuses it
        must be found before an unshare that could not be undone."""
        try:
            self.own_pid_ns()
            check(libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
            self.own_pid_ns()
        except OSError as e:
            return f"unavailable: {type(e).__name__}: {e}"
        return None

    def probe(self, layers: list[str]) -> dict[str, str]:
        """Fork a child that tries every enabled layer; report what this host allows."""
        pid_ns_failed = self.pid_ns_unavailable() if "pidns" in layers else None
        self.new_pid_ns = "pidns" in layers and pid_ns_failed is None
        r, w = os.pipe2(os.O_CLOEXEC)
        pid = self.fork_child()
        if pid == 0:
            try:
                os.close(r)
                for fd in self.other_cgroup_fds(0):
                    os.close(fd)
                conf = Confinement(
                    self.plan, 0, w, cgroup_fds=self.slot_cgroup_fds(0), zygote_fd=self.self_fd
                )
                found = conf.probe(layers)
                os.write(conf.fd, json.dumps(found).encode())  # small: one atomic pipe write
            finally:
                os._exit(0)
        os.close(w)
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        os.close(r)
        _, status = os.waitpid(pid, 0)
        if not data:
            found = {name: f"unavailable: the probe child died (status {status})" for name in layers}
        else:
            found = json.loads(data)
        if pid_ns_failed is not None:
            found["pidns"] = pid_ns_failed
        self.new_pid_ns = found.get("pidns") == "active"
        return found

    # -- serving -----------------------------------------------------------------

    def serve(self) -> None:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        try:
            self._serve()
        except ConnectionError:  # the parent closed its end while we wrote to it: as EOF
            self.shutdown()

    def _serve(self) -> None:
        while True:
            try:
                ready, _, _ = select.select([self.chan, self.wake_r], [], [], 1.0)
            except InterruptedError:
                ready = []
            if self.wake_r in ready:
                try:
                    while os.read(self.wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
            self.reap()
            if self.chan in ready:
                messages = self.chan.receive()
                if messages is None:
                    self.shutdown()
                    return
                for msg in messages:
                    if msg["op"] == "spare":
                        code_fd, result_fd = self.chan.fds.popleft(), self.chan.fds.popleft()
                        self.fork(msg, code_fd, result_fd)
                    elif msg["op"] == "kill":
                        self.kill(msg["child"])

    def fork(self, msg: dict, code_fd: int, result_fd: int) -> None:
        child = msg["child"]
        t_fork = time.perf_counter()
        try:
            pid = self.fork_child()
        except OSError as e:
            os.close(code_fd)
            os.close(result_fd)
            self.chan.send({"op": "fork_failed", "child": child, "error": str(e)})
            return
        if pid == 0:
            self.child(msg, code_fd, result_fd, t_fork)  # never returns
        os.close(code_fd)
        os.close(result_fd)
        self.children[pid] = child
        self.chan.send({"op": "forked", "child": child, "pid": pid})

    def kill(self, child: int) -> None:
        for pid, c in self.children.items():
            if c == child:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def reap(self) -> None:
        while self.children:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.pop(pid, None)
            if child is not None:
                cpu = usage.ru_utime + usage.ru_stime
                self.chan.send(
                    {
                        "op": "exited",
                        "child": child,
                        "pid": pid,
                        "status": status,
                        "cpu": cpu,
                        "maxrss": usage.ru_maxrss,
                    }
                )

    def shutdown(self) -> None:
        for pid in self.children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        end = time.monotonic() + 5
        while self.children and time.monotonic() < end:
            try:
                pid, _ = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            self.children.pop(pid, None)

    # -- the child -----------------------------------------------------------------

    def prewarm(self, conf: Confinement) -> None:
        """The target on ``prewarm``, confined, in this child before its code arrives: the pages it
        writes are copied now instead of during the run (its output and any failure are dropped;
        the run reports its own)."""
        t = time.perf_counter()
        with contextlib.suppress(Exception):
            self.target(self.plan["prewarm"])
        conf.timings["prewarm"] = (time.perf_counter() - t) * 1e3

    def child(self, msg: dict, code_fd: int, result_fd: int, t_fork: float) -> None:
        """Runs in the forked child: confine, wait for the code, run the target, write the result, exit.

        Every layer is applied before the code arrives (a spare waits confined);
        a spare is used for one run only: it exits after it, or at once if its
        code pipe closes first.
        """
        code = 71
        try:
            t0 = time.perf_counter()
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            # Always, whatever layers are on: the control socket, the wake-up pipe and
            # other children's pipes must never reach a snippet.
            slot = msg["slot"]
            others = (
                self.chan.fileno(),
                self.wake_r,
                self.wake_w,
                *self.chan.fds,
                *self.other_cgroup_fds(slot),
            )
            for other in others:
                os.close(other)
            conf = Confinement(
                self.plan,
                slot,
                result_fd,
                code_fd,
                cgroup_fds=self.slot_cgroup_fds(slot),
                zygote_fd=self.self_fd,
            )
            conf.timings["fork"] = (t0 - t_fork) * 1e3
            try:
                conf.apply(self.plan["layers"])
            except LayerFailed as e:
                write_frame(conf.fd, protocol.REFUSED, str(e).encode())
                code = 70
                return
            if self.plan.get("prewarm"):
                self.prewarm(conf)
            source = conf.receive()
            if source is None:  # closed without a run: the sandbox is closing or dropped this spare
                code = 0
                return
            write_frame(conf.fd, protocol.CONFINED, json.dumps(conf.timings).encode())
            try:
                out = self.target(source)
                if not isinstance(out, bytes):
                    raise TypeError(f"the target returned {type(out).__name__}, not bytes")
            except BaseException as e:  # noqa: BLE001 - anything the target raises is reported
                text = "".join(traceback.format_exception_only(type(e), e)).strip()
                write_frame(conf.fd, protocol.RAISED, text[:4000].encode("utf-8", "replace"))
                code = 1
                return
            write_frame(conf.fd, protocol.RESULT, out)
            code = 0
            protocol.await_release(conf.fd)  # NOTE [a child's exit waits for its release]
        finally:
            os._exit(code)


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    sock.set_inheritable(False)
    chan = Channel(sock)
    plan = None
    while plan is None:
        messages = chan.receive()
        if messages is None:
            return
        plan = messages[0] if messages else None
    try:
        # Orphans (a child's own children, where seccomp is unavailable) come to the
        # zygote, which reaps them, instead of to pid 1.
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        zygote = Zygote(chan, plan)
        zygote.warm()
        plan["zygote_pid"] = os.getpid()
        zygote.open_cgroups()
        probe = list(plan["probe_layers"])
        root = zygote.enter_root() if "root" in probe else "active"
        if root != "active":
            probe.remove("root")  # no child can check a root that is not there
        layers = zygote.probe(probe)
        if root != "active":
            layers["root"] = root
        plan["layers"] = [name for name in probe if layers[name] == "active"]
        threads = len(os.listdir("/proc/self/task"))
    except BaseException:
        chan.send({"op": "failed", "error": traceback.format_exc()})
        raise
    chan.send(
        {
            "op": "ready",
            "pid": os.getpid(),
            "layers": layers,
            "threads": threads,
            "huge_pages_mb": zygote.huge_mb,
            "visible": zygote.visible,
        }
    )
    zygote.serve()


if __name__ == "__main__":
    main()
