"""The parent side: ``Sandbox`` owns the zygote, the slots and the cgroups, and runs code."""

from __future__ import annotations

import atexit
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
from pathlib import Path

from gradstep.sandbox import protocol
from gradstep.sandbox.cgroups import Cgroups
from gradstep.sandbox.config import LAYERS, RunResult, SandboxConfig
from gradstep.sandbox.protocol import FRAME, Channel

START_TIMEOUT = 180.0  # seconds for the zygote to import, warm and probe
EXIT_GRACE = 5.0  # seconds a child gets to exit after its result (or a kill) before the cgroup kill


def _package_root() -> Path:
    import gradstep

    return Path(gradstep.__file__).resolve().parent


def default_hide() -> list[str]:
    """The gradstep project: the package's repository if it has one, else the package itself."""
    pkg = _package_root()
    for d in pkg.parents:
        if (d / "pyproject.toml").exists() or (d / ".git").exists():
            return [str(d)]
        if d == d.parent:
            break
    return [str(pkg)]


def default_keep() -> list[str]:
    return sorted({sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix})


def _warn(message: str) -> None:
    print(f"gradstep sandbox: WARNING: {message}", file=sys.stderr, flush=True)


class _Run:
    """One run in flight: what the zygote reported about its child."""

    def __init__(self, rid: int, slot: int, zygote: _Zygote):
        self.id = rid
        self.slot = slot
        self.zygote = zygote
        self.pid: int | None = None
        self.exited = threading.Event()  # reaped, never forked, or the zygote died
        self.status: int | None = None  # wait status
        self.cpu = 0.0
        self.fork_error: str | None = None
        self.zygote_died = False
        self.collected = False
        self.released = False


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
        self.reader: threading.Thread | None = None


class Sandbox:
    """Runs ``config.target(code)`` in a confined child forked from a warm zygote."""

    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig()
        unknown = set(self.config.disable) - set(LAYERS)
        if unknown:
            raise ValueError(f"unknown layers in disable: {sorted(unknown)}")
        self._lock = threading.Lock()  # zygote lifecycle
        self._send_lock = threading.Lock()
        self._state_lock = threading.Lock()  # runs and slot release
        self._free: queue.Queue[int] = queue.Queue()
        for slot in range(self.config.workers):
            self._free.put(slot)
        self._runs: dict[int, _Run] = {}
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
        if z is not None and z.alive:
            return z
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
            "uid_base": c.uid_base,
            "memory_mb": c.memory_mb,
            "cpu_seconds": c.cpu_seconds,
            "tmp_mb": c.tmp_mb,
            "max_files": c.max_files,
            "max_tasks": c.max_tasks,
            "hide": hide,
            "keep": keep,
            "slot_procs": [self._cgroups.slot_procs(i) for i in range(c.workers)] if self._cgroups else None,
            "probe_layers": probe,
        }

    def _start_locked(self) -> None:
        c = self.config
        if self._cgroups is None and "cgroup" not in c.disable and not self._cgroup_state:
            cg = Cgroups(c.cgroup_parent, c.workers, c.memory_mb, c.max_tasks)
            try:
                cg.create()
                self._cgroups = cg
                self._cgroup_state = "active"
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

    def _stop_zygote(self, z: _Zygote) -> None:
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
                self._stop_zygote(z)
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
        return {
            "zygote": alive,
            "zygote_pid": z.pid if alive and z else None,
            "zygote_threads": z.info.get("threads") if alive and z else None,
            "layers": dict(self._layers) or {name: "not started" for name in LAYERS},
            "workers": self.config.workers,
            "busy": self.config.workers - self._free.qsize(),
            "starts": self._starts,
        }

    # -- the zygote's reports ---------------------------------------------------------

    def _read(self, z: _Zygote) -> None:
        try:
            while True:
                messages = z.chan.receive()
                if messages is None:
                    break
                for msg in messages:
                    self._dispatch(z, msg)
        except (OSError, ValueError):
            pass
        finally:
            # Children set PDEATHSIG once they are far enough; the cgroups catch the rest.
            if self._cgroups is not None:
                self._cgroups.kill(spare=None)
            with self._state_lock:
                z.dying = True
                orphans = [run for run in self._runs.values() if run.zygote is z]
            for run in orphans:
                run.zygote_died = True
                run.exited.set()
                self._maybe_release(run)
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
            run = self._runs.get(msg.get("run"))
        if run is None:
            return
        if op == "forked":
            run.pid = msg["pid"]
        elif op == "fork_failed":
            run.fork_error = msg.get("error", "")
            run.exited.set()
            self._maybe_release(run)
        elif op == "exited":
            run.status = msg["status"]
            run.cpu = msg["cpu"]
            run.exited.set()
            self._maybe_release(run)

    def _maybe_release(self, run: _Run) -> None:
        """A slot is free again once its run is collected and its child is gone."""
        with self._state_lock:
            if run.released or not (run.collected and run.exited.is_set()):
                return
            run.released = True
            self._runs.pop(run.id, None)
        if self._cgroups is not None:
            # Normally empty (a child can't fork); if not (seccomp unavailable), empty it.
            self._cgroups.empty(f"slot-{run.slot}")
        self._free.put(run.slot)

    # -- running ---------------------------------------------------------------------

    def run(self, code: str) -> RunResult:
        """Run ``code`` in a fresh confined child; blocks (queueing for a slot); thread-safe."""
        t0 = time.monotonic()
        if self._closed:
            return RunResult("crashed", detail="The sandbox is closed.")
        slot = self._free.get()
        t_slot = time.monotonic()
        run = None
        try:
            try:
                z = self._ensure()
            except RuntimeError as e:
                self._free.put(slot)
                return RunResult("crashed", detail=str(e), seconds=time.monotonic() - t0)
            run = _Run(next(self._ids), slot, z)
            with self._state_lock:
                self._runs[run.id] = run
                if z.dying:
                    run.zygote_died = True
                    run.exited.set()
            result = self._run(run, code)
        finally:
            if run is not None:
                run.collected = True
                self._maybe_release(run)
        result.timings["queue"] = (t_slot - t0) * 1e3
        result.seconds = time.monotonic() - t0
        return result

    def _run(self, run: _Run, code: str) -> RunResult:
        cg = self._cgroups
        oom_before = cg.oom_kills(run.slot) if cg else 0
        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            try:
                with self._send_lock:
                    run.zygote.chan.send({"op": "run", "run": run.id, "slot": run.slot, "code": code}, [w])
            except OSError:
                pass  # the zygote is gone: the pipe reads EOF and its reader reports the death
            finally:
                os.close(w)
            result = self._collect(run, r, time.monotonic() + self.config.wall_seconds)
        finally:
            os.close(r)
        killed = result.status in ("crashed", "limit") and result.signal == "SIGKILL"
        if killed and cg and cg.oom_kills(run.slot) > oom_before:
            result.status, result.limit = "limit", "memory"
            result.detail = (
                f"The run used more than its {self.config.memory_mb} MB of memory and was killed (SIGKILL)."
            )
        return result

    def _collect(self, run: _Run, r: int, deadline: float) -> RunResult:
        os.set_blocking(r, False)
        poller = select.poll()
        poller.register(r, select.POLLIN)
        buf = bytearray()
        timings: dict[str, float] = {}
        confined = False
        t_confined = t_result = 0.0
        eof = False
        while True:
            # Parse whatever complete frames we have.
            while len(buf) >= FRAME.size:
                kind, size = FRAME.unpack_from(buf)
                first = kind in (protocol.CONFINED, protocol.REFUSED)
                if not confined and not first or confined and kind not in (protocol.RESULT, protocol.RAISED):
                    self._kill(run)
                    return self._after_exit(
                        run, RunResult("crashed", detail="The child wrote a malformed result.")
                    )
                if kind == protocol.RESULT and size > self.config.max_output_bytes:
                    self._kill(run)
                    return self._after_exit(
                        run,
                        RunResult(
                            "limit",
                            limit="output",
                            detail=f"The output is {size} bytes, over the limit of {self.config.max_output_bytes}.",
                        ),
                    )
                if kind != protocol.RESULT and size > 1 << 20:
                    self._kill(run)
                    return self._after_exit(
                        run, RunResult("crashed", detail="The child wrote a malformed result.")
                    )
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
                elif kind == protocol.REFUSED:
                    text = payload[:2000].decode("utf-8", "replace")  # untrusted: capped
                    return self._after_exit(
                        run, RunResult("crashed", detail=f"Confinement failed, so nothing ran: {text}")
                    )
                elif kind == protocol.RAISED:
                    text = payload[:2000].decode("utf-8", "replace")  # untrusted: capped
                    result = RunResult(
                        "crashed", detail=f"The sandbox's target raised {text}", timings=timings
                    )
                    return self._after_exit(run, result)
                else:
                    t_result = time.monotonic()
                    timings["target"] = (t_result - t_confined) * 1e3
                    result = RunResult("ok", output=payload, timings=timings)
                    result = self._after_exit(run, result, classify=False)
                    result.timings["exit"] = (time.monotonic() - t_result) * 1e3
                    return result
            if eof:
                result = self._after_exit(run, RunResult("crashed", timings=timings))
                return result
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._kill(run)
                result = self._after_exit(run, RunResult("timeout", timings=timings), classify=False)
                result.limit = "wall"
                result.signal = "SIGKILL"
                result.detail = (
                    f"The run took longer than {self.config.wall_seconds:g} s and was stopped (SIGKILL)."
                )
                return result
            if not poller.poll(remaining * 1e3):  # poll, not select: fds can be > 1023 in a server
                continue
            try:
                chunk = os.read(r, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                eof = True
            buf += chunk

    def _kill(self, run: _Run) -> None:
        try:
            with self._send_lock:
                run.zygote.chan.send({"op": "kill", "run": run.id})
        except OSError:
            pass

    def _after_exit(self, run: _Run, result: RunResult, classify: bool = True) -> RunResult:
        """Wait for the child to be gone (killing it if it lingers), then say why it ended."""
        if not run.exited.wait(EXIT_GRACE):
            self._kill(run)
            if self._cgroups is not None:
                self._cgroups.kill(f"slot-{run.slot}")
            run.exited.wait(EXIT_GRACE)
        if not classify:
            return result
        if result.detail:
            return result
        if run.zygote_died:
            result.detail = "The sandbox's zygote died during the run (it restarts on the next run)."
        elif run.fork_error is not None:
            result.detail = f"The sandbox could not start a child: {run.fork_error}."
        elif run.status is None:
            result.detail = "The child did not exit even after SIGKILL."
        elif os.WIFSIGNALED(run.status):
            sig = os.WTERMSIG(run.status)
            result.signal = _signame(sig)
            cpu_out = run.cpu >= self.config.cpu_seconds - 0.05
            if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_out):
                result.status, result.limit = "limit", "cpu"
                result.detail = (
                    f"The run used more than {self.config.cpu_seconds} s of CPU time and was stopped "
                    f"({result.signal})."
                )
            else:
                result.detail = f"The child was killed by {result.signal}."
        else:
            code = os.WEXITSTATUS(run.status)
            result.detail = f"The child exited with status {code} without a result."
        return result


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
