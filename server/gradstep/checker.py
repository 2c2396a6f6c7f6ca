"""A sandboxed child's bytes checked, voiced and encoded in processes of their own, off the server's GIL.

Checking a 1 MB trace (parse, then validate against the contract) holds the GIL for ~35 ms, and
the server's event loop waited that long for it. A ``CheckerPool`` does it in processes of its
own (``python -m gradstep.checker``: pydantic and the schema, no torch), one per worker, fed over
pipes, so one replica uses both cores. Traces under ``INLINE_BYTES`` are checked in the caller's
thread: a hand-off costs more than their check.

A check is the server's whole reading of a child's bytes: they must be a trace (the contract,
complete); then the server writes its own words into it from its facts (gradstep.voice, NOTE [the
server's voice]: the status, a limit's message, the narration) and its own fields (``SERVER_FIELDS``:
the submitted code, versions, its look at the code); what is served is that trace, serialized here
and compressed (brotli releases the GIL). Nothing a child wrote as prose is served as the server's.
orjson and ``JSON.parse`` agree on the JSON (the last of duplicate keys wins in both; invalid
UTF-8, lone surrogates and out-of-range numbers are refused here).
"""

from __future__ import annotations

import contextlib
import os
import queue
import struct
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO

import orjson
from pydantic import ValidationError

from gradstep import encoding
from gradstep.sandbox import protocol
from gradstep.trace_dicts import collector_paused, validate
from gradstep.voice import Observed, speak

INLINE_BYTES = 64 << 10
NOT_JSON = "The run returned something that is not JSON."
CHECKER_DIED = "The run's trace could not be checked: its checker process died."


@dataclass(frozen=True)
class Checked:
    """What a check found: ``problem`` (a sentence) when the bytes are not a trace; else the trace
    as the server serves it: ``stored`` (``encoding.compress``ed) when asked for and nothing was
    ``proposed``, else ``body`` (its JSON: the server has more to write in, or only reads it)."""

    problem: str | None = None
    stored: bytes | None = None
    proposed: bool = False  # it proposes diagnoses: the server runs their fixes (gradstep.runs)
    body: bytes | None = None


def check(raw: bytes, fields: dict, observed: Observed, encode: bool = True) -> Checked:
    """Whether ``raw`` (a child's result) is a trace; if so, the trace the server serves: the
    server's sentences (gradstep.voice, from ``observed``: what the runner saw) and ``fields`` (the
    server's own) written in, stored with ``encode``, else as JSON."""
    trace = _parsed(raw)
    if isinstance(trace, str):
        return Checked(trace)
    with collector_paused():  # narration reads the trace as rows: ~10^5 objects, no collection
        trace.update(fields)  # a server field the child wrote is not the child's to say
        try:
            speak(trace, observed)  # after: narration quotes the code
        except Exception as e:  # noqa: BLE001 - a trace the contract allows that no tracer writes
            return Checked(f"The run returned a trace gradstep could not read ({type(e).__name__}).")
        body = orjson.dumps(trace)
    proposed = bool(trace.get("diagnoses"))
    if encode and not proposed:
        return Checked(stored=encoding.compress(body))
    return Checked(proposed=proposed, body=body)


def _parsed(raw: bytes) -> dict | str:
    """The trace ``raw`` holds, or the sentence saying why it holds none."""
    try:
        # parsed, then validated as Python data: as complete as validating the JSON text, and
        # cheaper; against the TypedDicts, which check what the models check without a model per dict
        with collector_paused():  # parsing makes ~10^5 objects: no collection walks them
            trace = orjson.loads(raw)
            validate(trace)
    except orjson.JSONDecodeError:
        return NOT_JSON
    except ValidationError as e:
        return f"The run returned something that is not a trace ({e.error_count()} problems)."
    return trace


# A request: op, len(context JSON), len(data); then both. A reply: kind, len(problem), len(stored),
# len(body); then the three.
_REQUEST = struct.Struct(">BII")
_REPLY = struct.Struct(">BIII")
_CHECK, _ENCODE, _CHECK_ONLY = 0, 1, 2  # ops
_STORED, _PROBLEM, _PROPOSED, _BODY = 0, 1, 2, 3  # reply kinds


def _reply(checked: Checked) -> bytes:
    if checked.problem is not None:
        kind, text = _PROBLEM, checked.problem.encode()
    else:
        kind, text = _PROPOSED if checked.proposed else _STORED if checked.stored is not None else _BODY, b""
    stored, body = checked.stored or b"", checked.body or b""
    return _REPLY.pack(kind, len(text), len(stored), len(body)) + text + stored + body


def _read_reply(head: bytes, read) -> Checked:
    kind, text_size, stored_size, body_size = _REPLY.unpack(head)
    text, stored, body = read(text_size).decode(), read(stored_size), read(body_size)
    if kind == _PROBLEM:
        return Checked(text)
    return Checked(stored=stored or None, proposed=kind == _PROPOSED, body=body or None)


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """A checker process's loop: requests in, replies out, until its server closes the pipe."""
    replies.write(b"R")  # ready: imported
    replies.flush()
    while head := requests.read(_REQUEST.size):
        op, context_size, data_size = _REQUEST.unpack(head)
        context, data = orjson.loads(requests.read(context_size)), requests.read(data_size)
        if op == _ENCODE:
            reply = _reply(Checked(stored=encoding.compress(data)))
        else:
            observed = Observed(**context["observed"])
            reply = _reply(check(data, context["fields"], observed, encode=op == _CHECK))
        replies.write(reply)
        replies.flush()


class _Process:
    """One checker process (``python -m gradstep.checker``): trusted code, fed untrusted bytes."""

    def __init__(self):
        from gradstep import checker_env  # no secrets, no capabilities: see there

        path = os.pathsep.join([str(Path(__file__).resolve().parents[1]), *sys.path])
        self.proc = subprocess.Popen(
            checker_env.command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=checker_env.environment(path),
            cwd="/",
        )
        for pipe in (self.proc.stdin, self.proc.stdout):  # a big trace in one write, not 64 KB at a time
            protocol.widen(pipe.fileno())

    def wait_ready(self) -> None:
        if self.proc.stdout.read(1) != b"R":
            raise RuntimeError(f"a checker process did not start (exit status {self.proc.wait()})")

    def call(self, op: int, context: dict, data: bytes) -> Checked:
        blob = orjson.dumps(context)
        self.proc.stdin.write(_REQUEST.pack(op, len(blob), len(data)) + blob + data)
        self.proc.stdin.flush()
        head = self.proc.stdout.read(_REPLY.size)
        if len(head) < _REPLY.size:
            raise EOFError("the checker process is gone")
        return _read_reply(head, self.proc.stdout.read)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # EOF: it exits
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


class CheckerPool:
    """``check`` in ``processes`` checker processes (big traces), or inline (small ones, and all of
    them with ``processes=0``: a one-off run has no server to keep responsive). A process that
    dies fails the one check it had ("crashed", ``CHECKER_DIED``) and is replaced."""

    def __init__(self, processes: int):
        self.processes = max(0, processes)
        self._idle: queue.LifoQueue[_Process | None] = queue.LifoQueue()
        self._started = False
        self._lock = threading.Lock()
        self.died = 0  # processes that died under a check (each replaced by the next check)

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
            started = [_Process() for _ in range(self.processes)]  # they import side by side
        for process in started:
            process.wait_ready()
            self._idle.put(process)

    def close(self) -> None:
        with self._lock:
            if not self._started:
                return
            self._started = False
        for _ in range(self.processes):
            process = self._idle.get()  # waits for a check under way
            if process is not None:
                process.stop()

    def _call(self, op: int, context: dict, data: bytes) -> Checked:
        process = self._idle.get()
        try:
            if process is None:  # the last one here died: its replacement starts now
                process = _Process()
                process.wait_ready()
            return process.call(op, context, data)
        except (OSError, EOFError, RuntimeError, ValueError):
            if process is not None:
                with contextlib.suppress(OSError, ValueError):
                    process.proc.kill()
                    process.stop()
            process = None
            self.died += 1
            return Checked(CHECKER_DIED)
        finally:
            self._idle.put(process)

    def health(self) -> dict:
        return {"processes": self.processes, "died": self.died}

    def _inline(self, size: int) -> bool:
        return not (self.processes and self._started) or size <= INLINE_BYTES

    def check(self, raw: bytes, fields: dict, observed: Observed, encode: bool = True) -> Checked:
        if self._inline(len(raw)):
            return check(raw, fields, observed, encode)
        context = {"fields": fields, "observed": asdict(observed)}
        return self._call(_CHECK if encode else _CHECK_ONLY, context, raw)

    def compress(self, body: bytes) -> bytes:
        """``encoding.compress`` of ``body`` (a trace re-serialized by the server), in a checker."""
        if self._inline(len(body)):
            return encoding.compress(body)
        stored = self._call(_ENCODE, {}, body).stored
        return encoding.compress(body) if stored is None else stored


if __name__ == "__main__":
    sys.stdout = sys.stderr  # the replies' pipe carries nothing else
    serve(sys.stdin.buffer, sys.__stdout__.buffer)
