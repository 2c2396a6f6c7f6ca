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
import json
import os
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
