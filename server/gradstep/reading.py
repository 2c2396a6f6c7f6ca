"""The server's reading of a request's code (``gradstep.reach``), bounded in time, off the server's GIL.

``ast.parse`` is one C call that holds the GIL from start to end, and its cost is not linear in the
text: 60,000 characters of nested f-string format specs take it 0.4-1 s on these machines, 57 KB
of ordinary dense code ~140 ms. Done on the event loop it stalled every request (``/healthz`` p50
8.4 s under one client's flood); a worker thread does not help, as the loop waits for the GIL the
parse holds. So code longer than ``INLINE_CODE`` is read in a reader process of its own (a small
interpreter that loads ``gradstep/reach.py`` and nothing else: no torch, no secret in its
environment), one request at a time each, and a read that takes longer than ``seconds`` is given
up: ``seconds`` of the reader's own CPU time (``ITIMER_VIRTUAL``: a busy machine does not make
code costlier, and the bound holds inside the C parse, whose end a Python handler would wait
for), of which the parse alone may take ``PARSE_SHARE``, with a wall-clock backstop. (Measured
with the allow-list reach.py: 55 KB of ``y.grad`` lines parse in 84 ms, read in 255 ms; 57 KB of
dense calls 66 / 326 ms; the crafted 60 KB f-string parses in 0.7 s.) The reader then dies (a new one starts for the next read) and
the code is *too costly to read* (``None``), which the server refuses to run (``gradstep.traces``). Code up to
``INLINE_CODE`` characters is read in the caller's thread: the worst of it parses in a few
milliseconds (the parse's cost grows with the square of the crafted part's length).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from gradstep.reach import reaches

INLINE_CODE = 4096  # characters read in the caller's thread
WALL_FACTOR = 4  # a read's wall-clock backstop: this many times its CPU budget, and a second
# of a read's CPU budget, the most its ast.parse may take: the part that holds the GIL throughout
# (the look at the tree after it lets other threads run every few milliseconds)
PARSE_SHARE = 0.2
_LENGTH = struct.Struct(">I")
_PACKAGE = Path(__file__).resolve().parent  # gradstep/
# The reader's whole program: gradstep's packages stood in for by empty ones (their __init__s import
# torch and pydantic: seconds a start), so ``import gradstep.reach`` loads reach.py and the modules
# it imports, nothing else; then code in, its reaches out, until the pipe closes.
MARK = "gradstep code reader"  # in a reader's command line (its program's first line)
_READER = f"""\
# {MARK}
import ast, json, pathlib, signal, struct, sys, types
PARSE_SHARE = float(sys.argv[2])
root = pathlib.Path(sys.argv[1])
for init in sorted(root.rglob("__init__.py")):
    name = ".".join(init.parent.relative_to(root.parent).parts)
    package = types.ModuleType(name)
    package.__path__ = [str(init.parent)]
    sys.modules[name] = package
import gradstep.reach as reach
head = struct.Struct(">II")
requests, replies = sys.stdin.buffer, sys.stdout.buffer
replies.write(b"R")
replies.flush()
while request := requests.read(head.size):
    size, cpu_ms = head.unpack(request)
    code = requests.read(size).decode("utf-8", "surrogatepass")
    # SIGVTALRM's default action ends the process after that much of its own CPU time, even inside
    # ast.parse (one C call: a Python handler would only run after it). The parse alone first,
    # with a share of the budget: it is what holds a GIL from start to end.
    signal.setitimer(signal.ITIMER_VIRTUAL, PARSE_SHARE * cpu_ms / 1000)
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    signal.setitimer(signal.ITIMER_VIRTUAL, cpu_ms / 1000)
    found = reach.reaches(code)
    signal.setitimer(signal.ITIMER_VIRTUAL, 0)
    body = json.dumps(found).encode()
    replies.write(struct.pack(">I", len(body)) + body)
    replies.flush()
"""
_REQUEST = struct.Struct(">II")  # code's length in bytes, the read's CPU budget in ms


class _Reader:
    """One reader process, fed code, answering its reaches."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _READER, str(_PACKAGE), str(PARSE_SHARE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={"PATH": os.defpath},  # nothing of the server's environment (its secrets)
            close_fds=True,
        )
        self._ready = False

    def read(self, code: str, seconds: float) -> list[dict] | None:
        """The code's reaches, or None when they took more than ``seconds`` of CPU (the reader
        ended itself) or ``WALL_FACTOR`` times that of wall time (it is killed); raises
        OSError/EOFError when the process is gone otherwise."""
        if not self._ready:  # its start is not the code's time
            if self._recv(1, time.monotonic() + 30) != b"R":
                raise EOFError("a reader process did not start")
            self._ready = True
        data = code.encode("utf-8", "surrogatepass")
        self.proc.stdin.write(_REQUEST.pack(len(data), max(1, round(seconds * 1000))) + data)
        self.proc.stdin.flush()
        try:
            head = self._recv(_LENGTH.size, time.monotonic() + seconds * WALL_FACTOR + 1)
        except EOFError:
            if self.proc.wait(5) == -signal.SIGVTALRM:
                return None  # its CPU budget ran out
            raise
        if head is None:
            return None
        body = self._recv(_LENGTH.unpack(head)[0], time.monotonic() + 5)
        if body is None:
            raise EOFError("a reader process stopped mid-reply")
        return json.loads(body)

    def _recv(self, n: int, deadline: float) -> bytes | None:
        """``n`` bytes of the reply, or None at the deadline."""
        fd, got = self.proc.stdout.fileno(), b""
        while len(got) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, n - len(got))
            if not chunk:
                raise EOFError("the reader process is gone")
            got += chunk
        return got

    def stop(self, kill: bool = False) -> None:
        with contextlib.suppress(OSError):
            if kill:
                self.proc.kill()
            self.proc.stdin.close()  # EOF: it exits
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


class CodeReaders:
    """``read(code)`` in up to ``processes`` reader processes, each read bounded by ``seconds``.
    Blocking: call it from a worker thread (``gradstep.traces`` does, after admitting the request),
    at most ``processes`` at once (more wait here for a reader)."""

    def __init__(self, processes: int, seconds: float):
        self.processes, self.seconds = max(1, processes), seconds
        self._idle: queue.LifoQueue[_Reader | None] = queue.LifoQueue()
        for _ in range(self.processes):
            self._idle.put(None)  # started on first use
        self._lock = threading.Lock()
        self._closed = False
        self.reads = self.too_costly = self.died = 0

    def start(self) -> None:
        """Start the reader processes now (else on first use), so the first big read waits for none."""
        started = []
        while True:
            try:
                reader = self._idle.get_nowait()
            except queue.Empty:
                break
            started.append(reader or _Reader())
        for reader in started:
            self._idle.put(reader)

    def read(self, code: str) -> list[dict] | None:
        """``gradstep.reach.reaches(code)``, or None when reading it costs more than ``seconds`` of
        CPU, or its reader died on it."""
        if len(code) <= INLINE_CODE:
            return reaches(code)
        reader = self._idle.get()
        try:
            if reader is None:
                reader = _Reader()
            found = reader.read(code, self.seconds)
            self.reads += 1
            if found is None:
                self.too_costly += 1
                reader.stop(kill=True)
                reader = None
            return found
        except (OSError, EOFError, ValueError):  # it crashed (the C parser, memory): not readable either
            self.died += 1
            if reader is not None:
                reader.stop(kill=True)
            reader = None
            return None
        finally:
            self._idle.put(reader)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for _ in range(self.processes):
            reader = self._idle.get()
            if reader is not None:
                reader.stop()

    def pids(self) -> list[int]:
        """The reader processes running now (idle ones: a reader busy with a read is not listed)."""
        return [r.proc.pid for r in list(self._idle.queue) if r is not None and r.proc.poll() is None]

    def stats(self) -> dict:
        return {
            "processes": self.processes,
            "reads": self.reads,
            "too_costly": self.too_costly,
            "died": self.died,
        }
