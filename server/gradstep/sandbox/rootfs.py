"""The minimal root every child sees: built once by the zygote, inherited by each fork.

The zygote, once warm, moves into a mount namespace of its own whose root is a
read-only tmpfs holding only what a snippet's process needs:

* the directories on the import path (the stdlib, lib-dynload, site-packages),
* the files the warm zygote has mapped (its interpreter, libraries, locale data) —
  for a shared library, its whole directory, since a module imported later (``ssl``,
  ``sqlite3``) loads a sibling library the zygote never mapped,
* ``/dev/null``, ``/dev/zero``, ``/dev/full``, ``/dev/random``, ``/dev/urandom``,
* a fresh ``/proc`` (``hidepid=invisible``) and an empty ``/tmp`` (each child mounts
  its own over both).

Each is bound read-only at its own path; the directories and symlinks on the way
are recreated (0755, so an interpreter under a 0700 home is reachable after the
uid drop). Nothing else of the host is there: not ``/etc``, ``/home``, ``/var``,
``/sys`` (so no cgroupfs), other checkouts, or the project itself (``hide``; a
hidden directory inside a visible one is covered by an empty tmpfs). Then
``pivot_root`` and the host's tree is detached. Children fork from there: their
own mount namespace is a copy of this small tree, which costs less than a copy of
the host's.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

from gradstep.sandbox.libc import check, libc
from gradstep.sandbox.mounts import (
    CLONE_NEWNS,
    MOUNT_ATTR_NODEV,
    MOUNT_ATTR_NOSUID,
    MOUNT_ATTR_RDONLY,
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_REC,
    mount,
    mount_setattr,
    under,
)

DEVICES = ("null", "zero", "full", "random", "urandom")
DEV_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
}
NEVER = ("/proc", "/sys", "/dev")  # their own, or not at all
STAGE = "/tmp"  # where the new root is built (in the zygote's namespace only), before the pivot
MNT_DETACH = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
READ_ONLY = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV


def mapped_files() -> list[str]:
    """Every file this process has mapped (its executable, libraries, locale data), from /proc/self/maps."""
    found = set()
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            name = fields[5].rstrip("\n") if len(fields) > 5 else ""
            if name.startswith("/") and not name.endswith(" (deleted)") and os.path.isfile(name):
                found.add(name)
    return sorted(found)


def wanted(import_path: list[str], mapped: list[str]) -> list[str]:
    """What a child needs, before ``hide``: the import path's directories and the mapped files,
    a shared library standing for its directory."""
    paths = [p for p in import_path if os.path.isabs(p) and os.path.exists(p)]
    for name in mapped:
        directory = os.path.dirname(name)
        is_library = ".so" in os.path.basename(name) and directory != "/"
        paths.append(directory if is_library else name)
    return paths


def visible(paths: list[str], hide: list[str], keep: list[str]) -> tuple[list[str], list[str]]:
    """(what to bind, what to cover), both as resolved paths.

    A path under a hidden one is left out unless it is under a kept one; one inside
    another is left to it; a hidden path inside a bound one is covered by an empty tmpfs.
    """
    hide = [os.path.realpath(p) for p in hide]
    keep = [os.path.realpath(p) for p in keep]
    chosen: list[str] = []
    for path in sorted({os.path.realpath(p) for p in paths}, key=len):
        if path == "/" or any(under(path, n) for n in NEVER):
            continue
        if any(under(path, h) for h in hide) and not any(under(path, k) for k in keep):
            continue
        if not any(under(path, c) for c in chosen):
            chosen.append(path)
    covers = [h for h in hide if any(under(h, c) and h != c for c in chosen) and os.path.isdir(h)]
    return chosen, covers


def _walk(path: str, layout: dict[str, str | None], depth: int = 0) -> str:
    """Record the directories (None) and symlinks (their target) on the way to ``path`` as the
    host has them; returns the path with every symlink resolved."""
    if depth > 40:
        raise OSError(errno.ELOOP, f"too many symlinks on the way to {path}")
    here = "/"
    for part in path.strip("/").split("/"):
        step = os.path.join(here, part)
        if os.path.islink(step):
            target = os.readlink(step)
            layout.setdefault(step, target)
            here = _walk(os.path.normpath(os.path.join(here, target)), layout, depth + 1)
        else:
            layout.setdefault(step, None)
            here = step
    return here


def plan(chosen: list[str], import_path: list[str]) -> dict[str, str | None]:
    """The skeleton of the new root: every directory and symlink on the way to a chosen path, and
    to each import path entry as spelt (a venv's lib64 -> lib, a /lib -> usr/lib)."""
    layout: dict[str, str | None] = {}
    for path in [*chosen, *(p for p in import_path if os.path.isabs(p) and os.path.exists(p))]:
        real = os.path.realpath(path)
        if real != os.path.normpath(path) and any(under(real, c) for c in chosen) or path in chosen:
            _walk(path, layout)
    return layout


def _pivot_root() -> None:
    number = SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"pivot_root: unknown syscall number on {platform.machine()}")
    check(libc.syscall(ctypes.c_long(number), b".", b"."), "pivot_root")


def enter(chosen: list[str], covers: list[str], import_path: list[str]) -> tuple[int, int]:
    """Move the calling process into a new mount namespace rooted at the minimal root.

    Returns (st_dev, st_ino) of the new root, which a child checks to know it is there.
    Raises OSError (the process is left in its new namespace, on the host's tree) if it can't.
    """
    layout = plan(chosen, import_path)  # read from the host before anything is mounted over it
    check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    # O_PATH fds: binding from /proc/self/fd/N works whatever is later mounted over the path
    sources = {p: os.open(p, os.O_PATH | os.O_CLOEXEC) for p in chosen}
    devices = {d: os.open(f"/dev/{d}", os.O_PATH | os.O_CLOEXEC) for d in DEVICES}
    staged = False
    try:
        mount("tmpfs", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
        staged = True
        _build(STAGE, layout, sources, devices, covers)
        os.chdir(STAGE)
        _pivot_root()  # the old root is now stacked on the new one, at "/": detach it
        staged = False
        check(libc.umount2(b".", MNT_DETACH), "umount2 the old root")
        os.chdir("/")
    except OSError:
        os.chdir("/")
        if staged:  # back to the host's tree as it was (in this namespace only)
            libc.umount2(STAGE.encode(), MNT_DETACH)
        raise
    finally:
        for fd in [*sources.values(), *devices.values()]:
            os.close(fd)
    st = os.stat("/")
    return st.st_dev, st.st_ino


def _build(
    stage: str,
    layout: dict[str, str | None],
    sources: dict[str, int],
    devices: dict[str, int],
    covers: list[str],
) -> None:
    for path, target in sorted(layout.items(), key=lambda item: item[0].count("/")):
        inside = stage + path
        if target is not None:
            os.symlink(target, inside)
        elif path in sources and not os.path.isdir(f"/proc/self/fd/{sources[path]}"):
            open(inside, "x").close()  # a file: its mount point is an empty file
        else:
            os.mkdir(inside, 0o755)
    for path, fd in sources.items():
        mount(f"/proc/self/fd/{fd}", stage + path, None, MS_BIND)
        mount_setattr(stage + path, set_=READ_ONLY)
    for path in covers:
        mount(
            "tmpfs", stage + path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,nr_inodes=8,mode=0755"
        )
        mount_setattr(stage + path, set_=READ_ONLY)
    os.mkdir(f"{stage}/dev", 0o755)
    for name, fd in devices.items():
        open(f"{stage}/dev/{name}", "x").close()
        mount(f"/proc/self/fd/{fd}", f"{stage}/dev/{name}", None, MS_BIND)
        mount_setattr(
            f"{stage}/dev/{name}", set_=MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID
        )  # a device: not nodev
    for name, target in DEV_LINKS.items():
        os.symlink(target, f"{stage}/dev/{name}")
    os.makedirs(f"{stage}/tmp", 0o755, exist_ok=True)  # exists if something visible lives under /tmp
    os.mkdir(f"{stage}/proc", 0o555)
    mount("proc", f"{stage}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible")
    mount_setattr(f"{stage}/proc", set_=READ_ONLY)
    mount_setattr(stage, set_=READ_ONLY)
