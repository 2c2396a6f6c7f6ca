"""The calling process's Linux capabilities: read every set, and drop them all.

A child of a root server loses its effective and permitted capabilities when it
leaves uid 0. A child of a server that runs as an ordinary uid with file
capabilities (the container image) keeps them across the same uid change: the
kernel only clears them when the uids leave 0. So a child clears every set
itself, bounding and ambient included, whoever started the server.
"""

from __future__ import annotations

import ctypes

from gradstep.sandbox.libc import check, libc, prctl

SETS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")  # as /proc/<pid>/status names them
# What the zygote needs to confine its children (see docs/deploy.md): unshare and the mounts,
# the uid change, clearing the bounding set, and killing children that run under other uids.
NEEDED = {"SYS_ADMIN": 21, "SETUID": 7, "SETGID": 6, "SETPCAP": 8, "KILL": 5}

PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_VERSION_3 = 0x20080522  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def status(pid: int | str = "self") -> dict[str, int]:
    """Every capability set (as a bit mask) and NoNewPrivs of a process, from /proc."""
    found = {}
    with open(f"/proc/{pid}/status", "rb") as f:
        for line in f:
            key, _, value = line.decode().partition(":")
            if key in SETS:
                found[key] = int(value, 16)
            elif key == "NoNewPrivs":
                found[key] = int(value)
    return found


def names(mask: int) -> list[str]:
    """The NEEDED capabilities in ``mask``."""
    return [name for name, bit in NEEDED.items() if mask >> bit & 1]


def drop_bounding() -> None:
    """Empty the bounding set (needs CAP_SETPCAP: call it before a root process leaves uid 0)."""
    bounding = status()["CapBnd"]
    for cap in range(bounding.bit_length()):
        if bounding >> cap & 1:
            prctl(
                PR_CAPBSET_DROP,
                cap,
                what=f"clearing the capability bounding set (it needs CAP_SETPCAP), capability {cap}",
            )


def clear_ambient() -> None:
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, what="clearing the ambient set")


def clear() -> None:
    """Empty the effective, permitted and inheritable sets (always allowed: it only drops)."""
    header = _Header(_VERSION_3, 0)
    data = (_Data * 2)()
    check(libc.capset(ctypes.byref(header), data), "capset")


def left() -> dict[str, str]:
    """The sets that are not empty, as hex masks (nothing, once every set is cleared)."""
    return {name: f"{mask:016x}" for name, mask in status().items() if name in SETS and mask}
