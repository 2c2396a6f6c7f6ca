"""The C library calls the sandbox makes (ctypes): one handle, and errno raised as OSError."""

from __future__ import annotations

import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
libc.unshare.argtypes = (ctypes.c_int,)
libc.setns.argtypes = (ctypes.c_int, ctypes.c_int)
libc.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
libc.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
libc.syscall.restype = ctypes.c_long
libc.sethostname.argtypes = (ctypes.c_char_p, ctypes.c_size_t)
libc.setdomainname.argtypes = (ctypes.c_char_p, ctypes.c_size_t)


def check(result: int, what: str) -> int:
    """``result`` of a libc call, or the OSError its errno says (calls return -1 on failure)."""
    if result < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return result


def prctl(option: int, arg2: int = 0, arg3: int = 0, what: str | None = None) -> int:
    return check(libc.prctl(option, arg2, arg3, 0, 0), what or f"prctl {option}")
