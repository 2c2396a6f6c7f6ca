"""Mount namespace and mount calls (ctypes): the child's ``mounts`` layer and the zygote's minimal root."""

from __future__ import annotations

import ctypes

from gradstep.sandbox.libc import check, libc

CLONE_NEWNS = 0x00020000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18

AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 1
MOUNT_ATTR_NOSUID = 2
MOUNT_ATTR_NODEV = 4
SYS_MOUNT_SETATTR = 442  # x86_64 and aarch64 (the unified syscall table)


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    check(libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def mount_setattr(path: str, set_: int = 0, clear: int = 0, recursive: bool = False) -> None:
    attr = _MountAttr(set_, clear, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    res = libc.syscall(
        ctypes.c_long(SYS_MOUNT_SETATTR),
        ctypes.c_int(AT_FDCWD),
        ctypes.c_char_p(path.encode()),
        ctypes.c_uint(flags),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    check(res, f"mount_setattr {path}")


def under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")
