"""Wire formats: parent <-> zygote control messages, and the child's result frames.

Control messages travel over a Unix stream socketpair as ``<u32 length><JSON>``.
A "spare" message carries two file descriptors (the read end of the child's
code pipe, the write end of its result pipe) as SCM_RIGHTS on its first
bytes; the receiver queues received descriptors in order and gives two to
each "spare" message.

The parent writes the code to the code pipe as ``<u64 length><UTF-8>``
(``confine.CODE_HEADER``), once. The child writes frames
``<1-byte kind><u64 length><payload>`` to its result pipe. Everything a child
writes is untrusted: the parent checks kinds and lengths before it reads a
payload, and never waits for EOF.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import os
import select
import socket
import struct
from collections import deque

HEADER = struct.Struct("<I")
FRAME = struct.Struct("<cQ")

# Result frame kinds, written by the child.
CONFINED = b"C"  # confined and the code received, before the target runs: JSON {layer: ms} (trusted)
RESULT = b"R"  # the target's return value
RAISED = b"E"  # the target raised: UTF-8 text
REFUSED = b"F"  # a confinement layer failed (before the code arrived): UTF-8 text; nothing ran

MAX_CONTROL = 64 << 20  # a control message larger than this is a protocol error
RELEASE_WAIT = 1.0  # seconds a child waits at most for its release after its result (see the NOTE)
WIDE_PIPE = 1 << 20  # bytes: Linux's default /proc/sys/fs/pipe-max-size, what any user may ask for


def widen(fd: int, size: int = WIDE_PIPE) -> None:
    """Let the pipe of ``fd`` hold ``size`` bytes, best effort (its kernel pages are taken only as
    data fills them). A big trace (~0.7 MB) then goes through in one write and one read instead of
    one per 64 KB, each waiting for the other side to be scheduled: on 2 busy cores that was
    ~5 ms of a 24-layer trace's check (benchmarks/e2e.py)."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)
    except OSError:
        pass  # over this host's pipe-max-size, or the user's pipe quota: the default size works


class Channel:
    """One end of the control socket: framed JSON messages, optionally with fds."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = bytearray()
        self.fds: deque[int] = deque()

    def send(self, msg: dict, fds: list[int] | None = None) -> None:
        body = json.dumps(msg).encode()
        data = HEADER.pack(len(body)) + body
        if fds:
            sent = self.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
            data = data[sent:]
        if data:
            self.sock.sendall(data)

    def fileno(self) -> int:
        return self.sock.fileno()

    def receive(self) -> list[dict] | None:
        """Read what is available (one recvmsg) and return complete messages; None at EOF."""
        data, ancdata, _flags, _addr = self.sock.recvmsg(1 << 16, socket.CMSG_SPACE(16 * 4))
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
                self.fds.extend(fds)
        if not data:
            return None
        self.buf += data
        messages = []
        while len(self.buf) >= HEADER.size:
            (size,) = HEADER.unpack_from(self.buf)
            if size > MAX_CONTROL:
                raise ValueError(f"control message of {size} bytes")
            if len(self.buf) < HEADER.size + size:
                break
            messages.append(json.loads(bytes(self.buf[HEADER.size : HEADER.size + size])))
            del self.buf[: HEADER.size + size]
        return messages

    def close(self) -> None:
        while self.fds:
            os.close(self.fds.popleft())
        self.sock.close()


def write_frame(fd: int, kind: bytes, payload: bytes) -> None:
    """Write one result frame, all of it (the child's side)."""
    view = memoryview(FRAME.pack(kind, len(payload)) + payload)
    while view:
        view = view[os.write(fd, view) :]


# NOTE [a child's exit waits for its release]
# A child's exit frees its memory: several ms of CPU for a big run, and on 2 cores that competed
# with the server checking the run's result (the 24-layer trace's check took ~14 ms beside it,
# ~9 ms without: benchmarks/e2e.py). So after its result frame a child waits, blocked, until the
# server closes the read end of its result pipe (``Sandbox.running``: when the caller is done with
# the result), or RELEASE_WAIT at most, and exits then. Nothing depends on it: a child that exits
# at once (a snippet can make it) is reaped as before, and one that stays is killed EXIT_GRACE
# after its release (runner.py).


def await_release(fd: int, seconds: float = RELEASE_WAIT) -> None:
    """Block until the read end of the pipe ``fd`` writes to is closed, or ``seconds`` pass (the
    child's side of NOTE [a child's exit waits for its release])."""
    poller = select.poll()
    poller.register(fd, 0)  # no event asked for: POLLERR (no reader left) and POLLHUP come anyway
    with contextlib.suppress(OSError):
        poller.poll(seconds * 1e3)
