"""A sandboxed child's bytes checked and encoded in processes of their own, off the server's GIL.

Checking a 1 MB trace (parse, then validate against the contract) holds the GIL for ~35 ms, and
the server's event loop waited that long for it. A ``CheckerPool`` does it in processes of its
own (``python -m gradstep.checker``: pydantic and the schema, no torch), one per worker, fed over
pipes: the server's process only moves the bytes and compresses them (brotli, which releases the
GIL), so one replica uses both cores. Traces under ``INLINE_BYTES`` are checked in the caller's
thread: a hand-off costs more than their check.

What is served is the child's own bytes once they passed the check, with the server's fields
spliced in front (``SERVER_FIELDS``: the child leaves them out): compression starts as soon as
the bytes arrive, while a checker (or a thread) validates them, instead of after a
re-serialization. The browser parses the same text that was validated; orjson and ``JSON.parse``
agree on it (the last of duplicate keys wins in both; invalid UTF-8, lone surrogates and
out-of-range numbers are refused here). A child that wrote a server field anyway, or proposed
diagnoses (which the server must run and check first), is re-serialized from the validated data
instead.
"""

from __future__ import annotations

import contextlib
import os
import queue
import struct
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import orjson
from pydantic import ValidationError

from gradstep import encoding
from gradstep.sandbox import protocol
from gradstep.trace_dicts import collector_paused, validate

INLINE_BYTES = 64 << 10
NOT_JSON = "The run returned something that is not JSON."
_validating = ThreadPoolExecutor(1, thread_name_prefix="gradstep-validate")
CHECKER_DIED = "The run's trace could not be checked: its checker process died."


@dataclass(frozen=True)
class Checked:
    """What a check found: ``problem`` (a sentence) when the bytes are not a trace; else ``stored``
    (the trace as served, ``encoding.compress``ed) when asked for and nothing was ``proposed``."""

    problem: str | None = None
    stored: bytes | None = None
    proposed: bool = False  # it proposes diagnoses: the server runs their fixes (gradstep.runs)


def spliceable(raw: bytes) -> bool:
    """Whether ``raw`` is worth compressing beside its check, as ``spliced`` (a big JSON object)."""
    return raw[:1] == b"{" and len(raw) > INLINE_BYTES


def spliced(raw: bytes, fields: dict) -> bytes:
    """``raw``, a JSON object, with ``fields`` written in front, compressed: what is served when
    ``raw`` passes the check without writing any of them (``check_unspliced``)."""
    head = orjson.dumps(fields)[:-1] + b"," if fields else b"{"
    return encoding.compress(head + raw[1:])


def check_unspliced(raw: bytes, fields: dict, encode: bool = True) -> Checked:
    """Whether ``raw`` (a child's result) is a trace. With ``encode``, ``stored`` only where its
    ``spliced`` bytes may not be served: it is not ``spliceable``, or it wrote one of ``fields``
    (the server's to say: re-serialized with the server's)."""
    trace = _parsed(raw)
    if isinstance(trace, str):
        return Checked(trace)
    if trace.get("diagnoses"):
        return Checked(proposed=True)
    if not encode or (spliceable(raw) and not fields.keys() & trace.keys()):
        return Checked()
    trace.update(fields)  # a server field the child wrote is not the child's to say
    return Checked(stored=encoding.compress(orjson.dumps(trace)))


def joined(checked: Checked, stored: bytes) -> Checked:
    """``checked``, of spliceable bytes, with ``stored`` (their ``spliced``) where it serves them."""
    if checked.problem is None and not checked.proposed and checked.stored is None:
        return Checked(stored=stored)
    return checked


def check(raw: bytes, fields: dict, encode: bool = True) -> Checked:
    """Whether ``raw`` (a child's result) is a trace, and with ``encode`` the stored trace with
    ``fields`` (the server's) written in."""
    if not (encode and spliceable(raw)):
        return check_unspliced(raw, fields, encode)
    # Validated in a thread while this one compresses (discarded if the bytes fail the check).
    # This way round the thread starts at once, as brotli releases the GIL; the other way the
    # compressing thread waited for the GIL until the parse (one C call) was done, and the two
    # ran one after the other: 13.5 ms for the 24-layer trace instead of 7.9.
    checking = _validating.submit(check_unspliced, raw, fields)
    stored = spliced(raw, fields)
    return joined(checking.result(), stored)


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


# A request: op, len(fields JSON), len(data); then both. A reply: kind, len(problem), len(stored); then both.
_REQUEST = struct.Struct(">BII")
_REPLY = struct.Struct(">BII")
_CHECK, _ENCODE, _CHECK_ONLY, _CHECK_UNSPLICED = 0, 1, 2, 3  # ops
_STORED, _PROBLEM, _PROPOSED, _VALID = 0, 1, 2, 3  # reply kinds


def _reply(checked: Checked) -> bytes:
    if checked.problem is not None:
        kind, text = _PROBLEM, checked.problem.encode()
    else:
        kind, text = _STORED if checked.stored is not None else _PROPOSED if checked.proposed else _VALID, b""
    stored = checked.stored or b""
    return _REPLY.pack(kind, len(text), len(stored)) + text + stored


def _read_reply(head: bytes, read) -> Checked:
    kind, text_size, stored_size = _REPLY.unpack(head)
    text, stored = read(text_size).decode(), read(stored_size)
    if kind == _PROBLEM:
        return Checked(text)
    return Checked(stored=stored if kind == _STORED else None, proposed=kind == _PROPOSED)


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """A checker process's loop: requests in, replies out, until its server closes the pipe."""
    replies.write(b"R")  # ready: imported
    replies.flush()
    while head := requests.read(_REQUEST.size):
        op, fields_size, data_size = _REQUEST.unpack(head)
        fields, data = orjson.loads(requests.read(fields_size)), requests.read(data_size)
        if op == _ENCODE:
            reply = _reply(Checked(stored=encoding.compress(data)))
        elif op == _CHECK_UNSPLICED:
            reply = _reply(check_unspliced(data, fields))
        else:
            reply = _reply(check(data, fields, encode=op == _CHECK))
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

    def call(self, op: int, fields: dict, data: bytes) -> Checked:
        blob = orjson.dumps(fields)
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
        self._splicing: ThreadPoolExecutor | None = None  # compresses what a checker validates meanwhile

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
            self._splicing = ThreadPoolExecutor(max(1, self.processes), thread_name_prefix="gradstep-splice")
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
        if self._splicing is not None:
            self._splicing.shutdown()
            self._splicing = None

    def _call(self, op: int, fields: dict, data: bytes) -> Checked:
        process = self._idle.get()
        try:
            if process is None:  # the last one here died: its replacement starts now
                process = _Process()
                process.wait_ready()
            return process.call(op, fields, data)
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

    def check(self, raw: bytes, fields: dict, encode: bool = True) -> Checked:
        if self._inline(len(raw)):
            return check(raw, fields, encode)
        if not (encode and spliceable(raw)):
            return self._call(_CHECK if encode else _CHECK_ONLY, fields, raw)
        # Compressed here while a checker validates: on two cores at once. In one checker the
        # two took the 24-layer trace 15-16 ms instead of 13, as brotli takes the GIL back between
        # its output blocks and waited there for the parse (one C call) to end.
        assert self._splicing is not None  # started (else checked inline)
        splicing = self._splicing.submit(spliced, raw, fields)
        checked = self._call(_CHECK_UNSPLICED, fields, raw)
        return joined(checked, splicing.result())

    def compress(self, body: bytes) -> bytes:
        """``encoding.compress`` of ``body`` (a trace re-serialized by the server), in a checker."""
        if self._inline(len(body)):
            return encoding.compress(body)
        stored = self._call(_ENCODE, {}, body).stored
        return encoding.compress(body) if stored is None else stored


if __name__ == "__main__":
    sys.stdout = sys.stderr  # the replies' pipe carries nothing else
    serve(sys.stdin.buffer, sys.__stdout__.buffer)
