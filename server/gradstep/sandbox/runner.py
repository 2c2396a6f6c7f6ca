"""The parent side: ``Sandbox`` owns the zygote, the slots and the cgroups, and runs code."""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from gradstep.sandbox import observe, protocol
from gradstep.sandbox.cgroups import Cgroups
from gradstep.sandbox.config import LAYERS, RunResult, SandboxConfig, data_mb
from gradstep.sandbox.confine import CODE_HEADER
from gradstep.sandbox.protocol import FRAME, Channel

# signals a process dies of when an allocation it did not check failed
_ALLOCATION_CRASHES = (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT)
START_TIMEOUT = 180.0  # seconds for the zygote to import, warm and probe
EXIT_GRACE = 5.0  # seconds a child gets to exit after its result (or a kill) before the cgroup kill
GONE_WAIT = 1.0  # seconds a run waits for the wait status of a child found gone at its end (its CPU time)
MIB = 1 << 20
LINGER_CHECK = 0.5  # seconds between the reader's checks for children that outstay EXIT_GRACE
_CANCEL_CHECK = 0.05  # seconds between a cancellable run's looks at its cancel event
SPARE_HOLD_MAX = 0.25  # seconds a new spare waits at most for ``spares_held`` sections to end
_CANCELLED = "The run was cancelled: the request it belonged to was withdrawn."
RAISED_DETAIL = (
    "The run ended without a trace: the code in its process stopped with an exception of its own "
    "(what it reported is shown as the code's words)."
)


def _package_root() -> Path:
    import gradstep

    return Path(gradstep.__file__).resolve().parent


def _project_of(pkg: Path) -> str:
    """A gradstep package's repository if it has one, else the package itself."""
    for d in pkg.parents:
        if (d / "pyproject.toml").exists() or (d / ".git").exists():
            return str(d)
        if d == d.parent:
            break
    return str(pkg)


def default_hide() -> list[str]:
    """The gradstep project this is, and any other gradstep checkout on the import path (an
    editable install of another clone, shadowed by this one)."""
    found = [_project_of(_package_root())]
    for entry in sys.path:
        pkg = Path(entry) / "gradstep"
        if entry and Path(entry).is_absolute() and (pkg / "__init__.py").is_file():
            found.append(_project_of(pkg.resolve()))
    return sorted(set(found))


def default_keep() -> list[str]:
    return sorted({sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix})


def _warn(message: str) -> None:
    print(f"gradstep sandbox: WARNING: {message}", file=sys.stderr, flush=True)


class _Child:
    """One confined child: a spare until a run takes it, then that run's (once: never reused).

    The parent holds the write end of its code pipe and the read end of its
    result pipe; the zygote reports its pid, and its wait status once reaped.
    """

    def __init__(self, cid: int, slot: int, zygote: _Zygote):
        self.id = cid
        self.slot = slot
        self.zygote = zygote
        self.code_w: int | None = None
        self.result_r: int | None = None
        self.pid: int | None = None
        self.proc_fd: int | None = None  # its /proc/<pid> directory (observe.py), from its fork on
        # read from it when it said it was confined and had its code: the CPU it had used, its limits
        self.confined_cpu: float | None = None
        self.confined_limits: observe.Limits | None = None
        self.exited = threading.Event()  # reaped, never forked, or the zygote died
        self.status: int | None = None  # wait status
        self.cpu = 0.0
        self.maxrss_kb = 0  # its peak resident memory (wait4)
        self.fork_error: str | None = None
        self.zygote_died = False
        self.taken = False  # a run took it: its slot is freed when it is gone
        self.collected = False  # its run is done with it (or, a spare, it was dropped)
        self.released = False
        self.linger_until: float | None = None  # collected but not yet gone: kill it then

    def refused(self) -> bool:
        """It ended before any code, with something its run must report (a failed layer or fork)."""
        if self.fork_error is not None:
            return True
        return self.status is not None and os.WIFEXITED(self.status) and os.WEXITSTATUS(self.status) == 70

    def close_fds(self) -> None:
        for name in ("code_w", "result_r", "proc_fd"):
            fd = getattr(self, name)
            if fd is not None:
                setattr(self, name, None)
                os.close(fd)


class _Zygote:
    def __init__(self, proc: subprocess.Popen, chan: Channel):
        self.proc = proc
        self.pid = proc.pid
        self.chan = chan
        self.ready = threading.Event()
        self.info: dict = {}
        self.error: str | None = None
        self.alive = True
        self.dying = False  # set (under the state lock) once its reader saw it go
        self.stopping = False  # we closed its socket: it kills and reaps its children, then exits
        self.reader: threading.Thread | None = None


class Sandbox:
    """Runs ``config.target(code)`` in a confined child forked from a warm zygote."""

    def __init__(self, config: SandboxConfig):
        self.config = config
        if not config.target:
            raise ValueError("SandboxConfig.target is required: the 'module:function' children run")
        unknown = set(self.config.disable) - set(LAYERS)
        if unknown:
            raise ValueError(f"unknown layers in disable: {sorted(unknown)}")
        if config.workers < 1 or config.extra_slots < 0:
            raise ValueError("SandboxConfig needs workers >= 1 and extra_slots >= 0")
        self.slots = config.slots  # fixed for this Sandbox's life: its uids and cgroups
        self._lock = threading.Lock()  # zygote lifecycle
        self._send_lock = threading.Lock()
        self._state_lock = threading.Lock()  # children, spares, slot release
        # A run holds one of `workers` permits, then a slot, until its child is gone: so at most
        # `workers` children run code at once however many slots there are. A slot is put back
        # before its permit, so a run holding a permit always finds a free slot.
        self._permits = threading.BoundedSemaphore(config.workers)
        self._free: queue.Queue[int] = queue.Queue()  # slots whose last child is gone, oldest first
        for slot in range(self.slots):
            self._free.put(slot)
        self._busy: set[int] = set()  # slots a run holds, until its child is gone
        self._children: dict[int, _Child] = {}  # every child not yet released: spares and runs
        self._spares: dict[int, _Child] = {}  # slot -> its spare, for free slots
        self._holds = 0  # open spares_held sections
        self._held: set[int] = set()  # freed slots whose spare waits for them
        self._hold_timer: threading.Timer | None = None
        self._ids = itertools.count(1)
        self._zygote: _Zygote | None = None
        self._cgroups: Cgroups | None = None
        self._cgroup_state = "disabled" if "cgroup" in self.config.disable else ""
        self._layers: dict[str, str] = {}
        self._starts = 0
        self._closed = False
        self._atexit = False

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Start the zygote (a no-op if it runs); raises RuntimeError if it can't start."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the sandbox is closed")
            if self._zygote is None or not self._zygote.alive:
                self._start_locked()

    def _ensure(self) -> _Zygote:
        z = self._zygote
        if z is not None and z.alive and not z.dying:
            return z
        if z is not None and z.dying and z.reader is not None and z.reader is not threading.current_thread():
            # Its reader saw it die and is reaping it: the runs it had are released before it is
            # marked dead, and a run handed to it meanwhile crashed too. Once reaped, it is restarted.
            z.reader.join(2 * EXIT_GRACE)
        self.start()
        assert self._zygote is not None
        return self._zygote

    def _plan(self) -> dict:
        c = self.config
        hide = [str(Path(p).resolve()) for p in (default_hide() if c.hide is None else c.hide)]
        hide = [p for p in hide if Path(p).is_dir() and p != "/"]
        keep = [str(Path(p).resolve()) for p in (default_keep() if c.keep is None else c.keep)]
        keep = [p for p in keep if Path(p).is_dir() and any(p.startswith(h.rstrip("/") + "/") for h in hide)]
        probe = [name for name in LAYERS if name not in c.disable]
        if "cgroup" in probe and self._cgroups is None:
            probe.remove("cgroup")
        return {
            "preload": c.preload,
            "target": c.target,
            "warmup": c.warmup,
            "prewarm": c.prewarm,
            "uid_base": c.uid_base,
            "memory_mb": c.memory_mb,
            "cpu_seconds": c.cpu_seconds,
            "tmp_mb": c.tmp_mb,
            "max_files": c.max_files,
            "max_tasks": c.max_tasks,
            "huge_pages": c.huge_pages,
            "hide": hide,
            "keep": keep,
            "slot_procs": [self._cgroups.slot_procs(i) for i in range(self.slots)] if self._cgroups else None,
            "probe_layers": probe,
        }

    def _start_locked(self) -> None:
        c = self.config
        if self._cgroups is None and "cgroup" not in c.disable and not self._cgroup_state:
            cg = Cgroups(c.cgroup_parent, self.slots, c.memory_mb, c.max_tasks)
            try:
                cg.create()
                self._cgroups = cg
                self._cgroup_state = "active"
                if cg.cpu_state != "active":
                    _warn(
                        f"the sandbox's cpu cgroup is {cg.cpu_state}; under load its runs may outweigh the server"
                    )
            except OSError as e:
                self._cgroup_state = f"unavailable: {e}"
        if not self._atexit:
            atexit.register(self.close)
            self._atexit = True
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": "/nonexistent",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": os.pathsep.join([str(_package_root().parent), *c.pythonpath]),
        }
        if c.huge_pages:
            # malloc asks for transparent huge pages on the heap it grows (glibc >= 2.35; older
            # ones ignore it): a child's new tensors and objects fault in 2 MB at a time
            env["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=1"
        try:
            proc = subprocess.Popen(
                [sys.executable, "-s", "-P", "-m", "gradstep.sandbox.zygote", str(theirs.fileno())],
                env=env,
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,
            )
        finally:
            theirs.close()
        z = _Zygote(proc, Channel(ours))
        try:
            if self._cgroups is not None:
                self._cgroups.join_zygote(proc.pid)  # before it reads its plan, so before any import
            z.chan.send(self._plan())
        except OSError as e:
            self._stop_zygote(z)
            raise RuntimeError(f"the sandbox's zygote could not be set up: {e}") from e
        z.reader = threading.Thread(target=self._read, args=(z,), name="gradstep-sandbox-reader", daemon=True)
        z.reader.start()
        if not z.ready.wait(START_TIMEOUT) or z.error or not z.info:
            why = z.error or ("it exited" if z.ready.is_set() else "it did not get ready in time")
            self._stop_zygote(z)
            raise RuntimeError(f"the sandbox's zygote failed to start: {why}")
        self._starts += 1
        layers = {}
        for name in LAYERS:
            if name in c.disable:
                layers[name] = "disabled"
            elif name == "cgroup" and self._cgroups is None:
                layers[name] = self._cgroup_state
            else:
                layers[name] = z.info["layers"].get(name, "unavailable: not probed")
        if layers != self._layers:
            for name, state in layers.items():
                if state.startswith("unavailable"):
                    _warn(f"confinement layer {name!r} is {state}; snippets run WITHOUT it")
            if z.info.get("threads", 1) != 1:
                _warn(f"the zygote has {z.info['threads']} threads; forking it may deadlock")
        self._layers = layers
        self._zygote = z
        for slot in range(self.slots):
            self._prepare(slot, restart=True)

    def _stop_zygote(self, z: _Zygote) -> None:
        z.stopping = True
        try:
            z.chan.sock.shutdown(socket.SHUT_RDWR)  # EOF: the zygote kills its children and exits
        except OSError:
            pass
        try:
            z.proc.wait(EXIT_GRACE)
        except subprocess.TimeoutExpired:
            z.proc.kill()
            z.proc.wait()
        if z.reader is not None and z.reader is not threading.current_thread():
            z.reader.join(EXIT_GRACE)
        z.alive = False

    def close(self) -> None:
        """Stop the zygote and every child, remove the cgroups. Idempotent."""
        with self._lock:
            self._closed = True
            z, self._zygote = self._zygote, None
            if z is not None:
                self._stop_zygote(z)  # EOF: the zygote kills every child, spares too
            with self._state_lock:
                spares = list(self._spares.values())
                self._spares.clear()
                self._held.clear()
                if self._hold_timer is not None:
                    self._hold_timer.cancel()
                    self._hold_timer = None
                for spare in spares:
                    self._drop_locked(spare)
            if self._cgroups is not None:
                left = self._cgroups.remove()
                if left:
                    _warn(f"could not remove cgroups: {left}")
                self._cgroups = None
            if self._atexit:
                atexit.unregister(self.close)
                self._atexit = False

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def health(self) -> dict:
        z = self._zygote
        alive = z is not None and z.alive and z.proc.poll() is None
        with self._state_lock:
            spares = sorted(
                sp.pid
                for sp in self._spares.values()
                if sp.zygote is z and sp.pid is not None and not sp.exited.is_set()
            )
        return {
            "zygote": alive,
            "zygote_pid": z.pid if alive and z else None,
            "zygote_threads": z.info.get("threads") if alive and z else None,
            "zygote_huge_pages_mb": z.info.get("huge_pages_mb") if alive and z else None,
            # what a child's root holds besides /dev's devices, /proc and /tmp ("root" layer)
            "visible": z.info.get("visible") if alive and z else None,
            "layers": dict(self._layers) or {name: "not started" for name in LAYERS},
            # the children's CPU weight, one server's worth together (cgroups.CPU_SHARES)
            "cpu_group": self._cgroups.cpu_state if self._cgroups else self._cgroup_state or "not started",
            "workers": self.config.workers,  # runs at once
            "slots": self.slots,  # workers + extra_slots: a uid and a cgroup each
            "busy": self.slots - self._free.qsize(),  # runs holding a slot (<= workers)
            "prefork": self.config.prefork,
            "spares": len(spares),  # forked and waiting for code (or still confining themselves)
            "spare_pids": spares,
            "starts": self._starts,
        }

    # -- the zygote's reports ---------------------------------------------------------

    def _read(self, z: _Zygote) -> None:
        poller = select.poll()
        poller.register(z.chan.fileno(), select.POLLIN)
        try:
            while True:
                if poller.poll(LINGER_CHECK * 1e3):
                    messages = z.chan.receive()
                    if messages is None:
                        break
                    for msg in messages:
                        self._dispatch(z, msg)
                self._kill_lingering(z)
        except (OSError, ValueError):
            pass
        finally:
            if z.stopping:  # let it reap its children (else they end as zombies of pid 1)
                try:
                    z.proc.wait(EXIT_GRACE)
                except subprocess.TimeoutExpired:
                    pass
            # Children set PDEATHSIG once they are far enough; the cgroups catch the rest.
            cg = self._cgroups
            if cg is not None:
                cg.kill(spare=None)
            with self._state_lock:
                z.dying = True
                orphans = [child for child in self._children.values() if child.zygote is z]
            for child in orphans:
                child.zygote_died = True
                child.exited.set()
                self._maybe_release(child)
            try:
                z.proc.wait(EXIT_GRACE)
            except subprocess.TimeoutExpired:
                z.proc.kill()
                z.proc.wait()
            z.alive = False
            z.ready.set()

    def _dispatch(self, z: _Zygote, msg: dict) -> None:
        op = msg.get("op")
        if op == "ready":
            z.info = msg
            z.ready.set()
            return
        if op == "failed":
            z.error = msg.get("error", "unknown error")
            z.ready.set()
            return
        with self._state_lock:
            child = self._children.get(msg.get("child"))
        if child is None:
            return
        if op == "forked":
            child.pid = msg["pid"]
            fd = observe.open_process(child.pid)  # now, while it is known alive: never another's pid
            with self._state_lock:
                if child.released:
                    if fd is not None:
                        os.close(fd)
                else:
                    child.proc_fd = fd
        elif op == "fork_failed":
            child.fork_error = msg.get("error", "")
            child.exited.set()
            self._maybe_release(child)
        elif op == "exited":
            child.status = msg["status"]
            child.cpu = msg["cpu"]
            child.maxrss_kb = int(msg.get("maxrss", 0))
            child.exited.set()
            self._maybe_release(child)

    def _kill_lingering(self, z: _Zygote) -> None:
        """A child its run is done with, still there EXIT_GRACE later: kill it (again), cgroup too."""
        now = time.monotonic()
        with self._state_lock:
            late = [
                child
                for child in self._children.values()
                if child.zygote is z
                and child.linger_until is not None
                and child.linger_until <= now
                and not child.exited.is_set()
            ]
            for child in late:
                child.linger_until = now + EXIT_GRACE
        for child in late:
            self._kill(child)
            cg = self._cgroups
            if cg is not None:
                cg.kill(f"slot-{child.slot}")

    # -- children and slots ----------------------------------------------------------
    #
    # A slot holds at most one live child at a time (they share the slot's uid and
    # cgroup): a free slot has its spare; a run takes a permit, then the slot and its
    # spare (or forks one if there is none), and the slot and the permit are free
    # again only once that child is reaped, when the next spare is forked for it.
    # There are `workers` permits and workers + extra_slots slots: a run finds a slot
    # whose spare was made while other slots served runs.

    def _usable(self, spare: _Child, z: _Zygote) -> bool:
        """A spare a run can take: this zygote's, alive, or dead with something to report."""
        if spare.zygote is not z or spare.zygote_died:
            return False
        return not spare.exited.is_set() or spare.refused()

    def _new_child_locked(self, slot: int, z: _Zygote) -> tuple[_Child, int, int]:
        """Register a child for ``slot`` and make its pipes; returns it and the ends it gets."""
        child = _Child(next(self._ids), slot, z)
        code_r, child.code_w = os.pipe2(os.O_CLOEXEC)
        try:
            child.result_r, result_w = os.pipe2(os.O_CLOEXEC)
            protocol.widen(child.result_r)
        except OSError:
            os.close(code_r)
            child.close_fds()
            raise
        self._children[child.id] = child
        if z.dying:  # its reader has already listed the orphans: this one is one
            child.zygote_died = True
            child.exited.set()
        return child, code_r, result_w

    def _launch(self, child: _Child, code_r: int, result_w: int, empty: bool) -> None:
        """Ask the zygote to fork ``child``; ``empty``: first clear what an earlier child left in its slot."""
        try:
            cg = self._cgroups
            if empty and cg is not None:
                cg.empty(f"slot-{child.slot}")
            if not child.exited.is_set():
                with self._send_lock:
                    child.zygote.chan.send(
                        {"op": "spare", "child": child.id, "slot": child.slot}, [code_r, result_w]
                    )
        except OSError:
            pass  # the zygote is gone: its reader marks the child dead
        finally:
            os.close(code_r)
            os.close(result_w)

    def _drop_locked(self, child: _Child) -> None:
        """Forget a spare no run will take (it is dead, or the sandbox is closing)."""
        child.collected = True
        child.close_fds()  # its code pipe reads EOF: a live spare exits
        if child.exited.is_set() and not child.released:
            child.released = True
            self._children.pop(child.id, None)

    def _prepare(self, slot: int, restart: bool = False) -> None:
        """Fork a spare for a free slot, unless it has one (or pre-forking is off)."""
        z = self._zygote
        if not self.config.prefork or self._closed or z is None or not z.alive or z.dying:
            return
        with self._state_lock:
            if slot in self._busy:
                return
            spare = self._spares.get(slot)
            if spare is not None:
                if self._usable(spare, z):
                    return
                del self._spares[slot]
                self._drop_locked(spare)
                restart = True
            try:
                child, code_r, result_w = self._new_child_locked(slot, z)
            except OSError:
                return  # out of fds: a run will fork on request
            self._spares[slot] = child
        self._launch(child, code_r, result_w, empty=restart)

    @contextlib.contextmanager
    def spares_held(self):
        """While the caller works on a run's result on its request's path (checking a big trace), a
        freed slot's new spare waits (at most SPARE_HOLD_MAX): its fork and warm-up would take the
        CPU that work needs. A run that takes the slot first forks its child itself, as without spares."""
        with self._state_lock:
            self._holds += 1
        try:
            yield
        finally:
            with self._state_lock:
                self._holds -= 1
                last = self._holds == 0
            if last:
                self._prepare_held()

    def _prepare_unless_held(self, slot: int) -> None:
        with self._state_lock:
            if self._holds:
                self._held.add(slot)
                if self._hold_timer is None:
                    self._hold_timer = threading.Timer(SPARE_HOLD_MAX, self._prepare_held)
                    self._hold_timer.daemon = True
                    self._hold_timer.start()
                return
        self._prepare(slot)

    def _prepare_held(self) -> None:
        with self._state_lock:
            slots, self._held = self._held, set()
            timer, self._hold_timer = self._hold_timer, None
        if timer is not None:
            timer.cancel()
        for slot in sorted(slots):
            self._prepare(slot)  # a no-op for a slot a run has taken since

    def _take(self, slot: int, z: _Zygote) -> _Child:
        """The child for a run that holds ``slot``: its spare, or a new one forked now."""
        with self._state_lock:
            spare = self._spares.pop(slot, None)
            if spare is not None and self._usable(spare, z):
                spare.taken = True
                return spare
            if spare is not None:
                self._drop_locked(spare)
            child, code_r, result_w = self._new_child_locked(slot, z)
            child.taken = True
        self._launch(child, code_r, result_w, empty=spare is not None)
        return child

    def _collected(self, child: _Child) -> None:
        """Its run is done with it; the slot is freed once the child is gone too."""
        with self._state_lock:
            child.collected = True
            if not child.exited.is_set():
                child.linger_until = time.monotonic() + EXIT_GRACE
        self._maybe_release(child)

    def _maybe_release(self, child: _Child) -> None:
        """Once a child is collected and gone, forget it; if a run took it, free its slot."""
        with self._state_lock:
            if child.released or not (child.collected and child.exited.is_set()):
                return
            child.released = True
            self._children.pop(child.id, None)
            child.close_fds()
            if not child.taken:
                return  # a dropped spare: the slot was never its own
        cg = self._cgroups
        if cg is not None:
            # Normally empty (a child can't fork); if not (seccomp unavailable), empty it.
            cg.empty(f"slot-{child.slot}")
        with self._state_lock:
            self._busy.discard(child.slot)
        self._prepare_unless_held(child.slot)
        self._free.put(child.slot)
        self._permits.release()

    # -- running ---------------------------------------------------------------------

    def run(
        self, code: str, *, deadline: float | None = None, cancel: threading.Event | None = None
    ) -> RunResult:
        """Run ``code`` in a fresh confined child; blocks (queueing for a slot); thread-safe.

        Returns once the result is read, before the child has exited; its slot
        stays busy until the child is reaped. ``deadline`` (``time.monotonic()``) ends
        the run earlier than its wall limit, or while it still waits for a slot
        ("timeout"); once ``cancel`` is set the run stops the same way ("cancelled").
        """
        with self.running(code, deadline=deadline, cancel=cancel) as result:
            return result

    @contextlib.contextmanager
    def running(
        self, code: str, *, deadline: float | None = None, cancel: threading.Event | None = None
    ) -> Iterator[RunResult]:
        """``run``, whose child is told to exit only when the block ends (NOTE [a child's exit
        waits for its release]): the caller's work on the result has the CPU to itself."""
        t0 = time.monotonic()
        if self._closed:
            yield RunResult("crashed", detail="The sandbox is closed.")
            return
        slot = self._wait_for_slot(deadline, cancel)
        if slot is None:
            cancelled = cancel is not None and cancel.is_set()
            yield RunResult(
                "cancelled" if cancelled else "timeout",
                limit=None if cancelled else "wall",
                detail=_CANCELLED if cancelled else "The run's deadline passed while it waited for a worker.",
                seconds=time.monotonic() - t0,
            )
            return
        t_slot = time.monotonic()
        with self._state_lock:
            self._busy.add(slot)
        child = None
        try:
            try:
                z = self._ensure()
                child = self._take(slot, z)
            except (RuntimeError, OSError) as e:
                with self._state_lock:
                    self._busy.discard(slot)
                self._free.put(slot)
                self._permits.release()
                yield RunResult("crashed", detail=str(e), seconds=time.monotonic() - t0)
                return
            result = self._run(child, code, deadline, cancel)
            result.timings["queue"] = (t_slot - t0) * 1e3
            result.seconds = time.monotonic() - t0
            yield result
        finally:
            if child is not None:
                child.close_fds()  # its release: its result pipe has no reader left
                self._collected(child)

    def _wait_for_slot(self, deadline: float | None, cancel: threading.Event | None) -> int | None:
        """A permit to run, then a free slot (the one free longest: its spare has had the most time
        to get ready); None once ``deadline`` passes or ``cancel`` is set first."""
        if not self._wait_for_permit(deadline, cancel):
            return None
        # Never waits: fewer than `workers` other runs hold a slot (see _permits).
        return self._free.get()

    def _wait_for_permit(self, deadline: float | None, cancel: threading.Event | None) -> bool:
        if deadline is None and cancel is None:
            return self._permits.acquire()
        while not (cancel is not None and cancel.is_set()):
            wait = _CANCEL_CHECK if deadline is None else min(_CANCEL_CHECK, deadline - time.monotonic())
            if wait <= 0:
                return False
            if self._permits.acquire(timeout=wait):
                return True
        return False

    def _run(
        self, child: _Child, code: str, deadline: float | None, cancel: threading.Event | None
    ) -> RunResult:
        cg = self._cgroups
        oom_before = cg.oom_kills(child.slot) if cg else 0
        data = code.encode("utf-8", "surrogatepass")
        if cg is not None:
            cg.reset_memory_peak(child.slot)
        # The wall clock starts now, when the code is handed over. The pipes stay open: closing
        # the result pipe releases the child (``running``).
        t_hand = time.monotonic()
        result = self._collect(child, CODE_HEADER.pack(len(data)) + data, t_hand, deadline, cancel)
        t_end = time.monotonic()
        wall_limit = float(self.config.wall_seconds)
        if deadline is not None:
            wall_limit = min(wall_limit, deadline - t_hand)
        self._observe(child, result, t_end - t_hand, wall_limit)
        killed = result.status in ("crashed", "limit") and result.signal == "SIGKILL"
        if killed and cg and cg.oom_kills(child.slot) > oom_before:
            result.status, result.limit = "limit", "memory"
            result.detail = (
                f"The run used more than its {self.config.memory_mb} MB of memory and was killed (SIGKILL)."
            )
        return result

    def _observe(
        self,
        child: _Child,
        result: RunResult,
        wall_used: float,
        wall_limit: float,
    ) -> None:
        """Fill in what the parent itself saw of the child's run (NOTE [what the runner saw of a run]):
        from /proc/<pid> while the child is there (held after its result, or just sent a kill), from
        the zygote's wait4 once it is gone."""
        result.wall_used, result.wall_limit, result.cpu_before = wall_used, wall_limit, child.confined_cpu
        limits_before = child.confined_limits
        cg = self._cgroups
        if cg is not None:
            peak = cg.memory_peak(child.slot)
            result.memory_peak_mb = None if peak is None else peak / MIB
            result.memory_limit_mb = self.config.memory_mb
        fd = child.proc_fd
        cpu, memory, limits = None, {}, None
        if fd is not None and not child.exited.is_set():
            cpu, memory, limits = observe.cpu_seconds(fd), observe.memory_kb(fd), observe.limits(fd)
        if cpu is None and fd is not None:
            child.exited.wait(GONE_WAIT)  # gone (it exited at once after a result): its wait status says
        if child.exited.is_set() and child.status is not None:
            cpu = child.cpu  # wait4's: exact, every thread, the end of its time
            memory = memory or {"VmHWM": child.maxrss_kb}
        result.cpu_used = cpu
        result.vm_hwm_mb = memory["VmHWM"] / 1024 if "VmHWM" in memory else None
        result.vm_peak_mb = memory["VmPeak"] / 1024 if "VmPeak" in memory else None
        cpu_limits = limits if limits is not None and limits.cpu_seconds is not None else limits_before
        result.cpu_limit = cpu_limits.cpu_seconds if cpu_limits is not None else None
        data_limits = limits_before if limits_before is not None else limits
        if data_limits is not None and data_limits.data_bytes is not None:
            result.data_limit_mb = data_limits.data_bytes / MIB

    def _collect(
        self,
        child: _Child,
        code: bytes,
        t_hand: float,
        until: float | None = None,
        cancel: threading.Event | None = None,
    ) -> RunResult:
        """Hand the code over and read the child's frames, until a result, EOF, the deadline or ``cancel``."""
        deadline = t_hand + self.config.wall_seconds
        if until is not None:
            deadline = min(deadline, until)
        r, w = child.result_r, child.code_w
        assert r is not None and w is not None
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        poller = select.poll()  # poll, not select: fds can be > 1023 in a server
        poller.register(r, select.POLLIN)
        poller.register(w, select.POLLOUT)
        unsent = memoryview(code)
        buf = bytearray()
        timings: dict[str, float] = {}
        confined = False
        t_confined = 0.0
        eof = False
        while True:
            # Parse whatever complete frames we have.
            while len(buf) >= FRAME.size:
                kind, size = FRAME.unpack_from(buf)
                first = kind in (protocol.CONFINED, protocol.REFUSED)
                if not confined and not first or confined and kind not in (protocol.RESULT, protocol.RAISED):
                    self._kill(child)
                    return RunResult("crashed", detail="The child wrote a malformed result.", timings=timings)
                if kind == protocol.RESULT and size > self.config.max_output_bytes:
                    self._kill(child)
                    return RunResult(
                        "limit",
                        limit="output",
                        detail=f"The output is {size} bytes, over the limit of {self.config.max_output_bytes}.",
                        timings=timings,
                    )
                if kind != protocol.RESULT and size > 1 << 20:
                    self._kill(child)
                    return RunResult("crashed", detail="The child wrote a malformed result.", timings=timings)
                if len(buf) < FRAME.size + size:
                    break
                payload = bytes(buf[FRAME.size : FRAME.size + size])
                del buf[: FRAME.size + size]
                if kind == protocol.CONFINED:
                    confined = True
                    t_confined = time.monotonic()
                    try:
                        timings = {k: float(v) for k, v in json.loads(payload).items()}
                    except (ValueError, AttributeError, TypeError):
                        timings = {}
                    timings["spare"] = (t_confined - t_hand) * 1e3
                    # Confined, with its code, about to run it (NOTE [what the runner saw of a run]):
                    # what it used before and the limits the sandbox set, read now. Not at the
                    # hand-over: a spare still confining itself then has not set its limits yet.
                    fd = child.proc_fd
                    if fd is not None:
                        child.confined_cpu, child.confined_limits = (
                            observe.cpu_seconds(fd),
                            observe.limits(fd),
                        )
                elif kind == protocol.REFUSED:
                    text = payload[:2000].decode("utf-8", "replace")  # trusted, but capped
                    return RunResult("crashed", detail=f"Confinement failed, so nothing ran: {text}")
                elif kind == protocol.RAISED:
                    # the child's words (a snippet can write this frame): never said in the server's voice
                    text = payload[:2000].decode("utf-8", "replace")
                    return RunResult("crashed", detail=RAISED_DETAIL, reported=text, timings=timings)
                else:
                    # A whole result: answer now. The child exits on its own (or is killed
                    # EXIT_GRACE later); nothing that happens to it now changes this result.
                    timings["target"] = (time.monotonic() - t_confined) * 1e3
                    return RunResult("ok", output=payload, timings=timings)
            if eof:
                return self._after_exit(child, RunResult("crashed", timings=timings))
            if cancel is not None and cancel.is_set():
                self._kill(child)
                return RunResult("cancelled", signal="SIGKILL", detail=_CANCELLED, timings=timings)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._kill(child)
                took = min(self.config.wall_seconds, round(deadline - t_hand, 1))
                return RunResult(
                    "timeout",
                    limit="wall",
                    signal="SIGKILL",
                    detail=f"The run took longer than {took:g} s and was stopped (SIGKILL).",
                    timings=timings,
                )
            if cancel is not None:
                remaining = min(remaining, _CANCEL_CHECK)
            for fd, _events in poller.poll(remaining * 1e3):
                if fd == w:
                    try:
                        unsent = unsent[os.write(w, unsent) :]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        unsent = unsent[:0]  # it died (or refused): its result pipe says how
                    if not unsent:
                        poller.unregister(w)
                        child.code_w = None
                        os.close(w)
                elif fd == r:
                    try:
                        chunk = os.read(r, 1 << 20)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        eof = True
                        poller.unregister(r)
                    buf += chunk

    def _kill(self, child: _Child) -> None:
        try:
            with self._send_lock:
                child.zygote.chan.send({"op": "kill", "child": child.id})
        except OSError:
            pass

    def _after_exit(self, child: _Child, result: RunResult) -> RunResult:
        """The child ended without a result: wait until it is gone (killing it if it lingers), say why."""
        if not child.exited.wait(EXIT_GRACE):
            self._kill(child)
            cg = self._cgroups
            if cg is not None:
                cg.kill(f"slot-{child.slot}")
            child.exited.wait(EXIT_GRACE)
        if child.zygote_died:
            result.detail = "The sandbox's zygote died during the run (it restarts on the next run)."
        elif child.fork_error is not None:
            result.detail = f"The sandbox could not start a child: {child.fork_error}."
        elif child.status is None:
            result.detail = "The child did not exit even after SIGKILL."
        elif os.WIFSIGNALED(child.status):
            sig = os.WTERMSIG(child.status)
            result.signal = _signame(sig)
            # A SIGKILL at RLIMIT_CPU's hard limit: the only one for a child that is pid 1 of its
            # PID namespace (it ignores SIGXCPU). The CPU time wait4 reports trails the limit's
            # own clock (~2% on an idle VM, ~10% on a busy one), hence the margin.
            cpu_out = child.cpu >= 0.8 * self.config.cpu_seconds
            if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_out):
                result.status, result.limit = "limit", "cpu"
                result.detail = (
                    f"The run used more than {self.config.cpu_seconds} s of CPU time and was stopped "
                    f"({result.signal})."
                )
            elif (
                sig in _ALLOCATION_CRASHES and child.maxrss_kb >= 0.75 * data_mb(self.config.memory_mb) * 1024
            ):
                # An allocation past the data limit refused where a native library does not check
                # for it: the process dies with memory at its limit, which is what stopped it.
                result.status, result.limit = "limit", "memory"
                result.detail = (
                    f"The run reached its {self.config.memory_mb} MB of memory and died ({result.signal}) "
                    "when an allocation was refused."
                )
            else:
                result.detail = f"The child was killed by {result.signal}."
        else:
            code = os.WEXITSTATUS(child.status)
            result.detail = f"The child exited with status {code} without a result."
        return result


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
