"""Run a command the way the documented container runs the server, without a container engine.

    python tests/container.py --caps SYS_ADMIN,SETUID,... --seccomp deploy/seccomp.json -- CMD...

The command runs as root of a new user namespace (uids and gids 0-65535 mapped to themselves, as
a container's are), in new mount and pid namespaces with a fresh /proc, with its capability
bounding set cut down to ``--caps`` and a Docker-format seccomp profile (default allow, a list of
refused calls) loaded. SIGTERM and SIGINT are passed on to the command.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
from pathlib import Path

CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID = 0x10000000, 0x00020000, 0x20000000
MS_REC, MS_PRIVATE = 0x4000, 0x40000
PR_CAPBSET_DROP = 24
CAPS = {"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "KILL": 5, "SETGID": 6, "SETUID": 7, "SYS_ADMIN": 21}

libc = ctypes.CDLL(None, use_errno=True)


def check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def forward_signals_to(pid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: os.kill(pid, s))


def wait_for(pid: int) -> int:
    while True:
        try:
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        except InterruptedError:
            continue


def load_seccomp(profile_path: str) -> None:
    import pyseccomp as seccomp

    profile = json.loads(Path(profile_path).read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW", "only default-allow profiles are supported here"
    flt = seccomp.SyscallFilter(seccomp.ALLOW)
    for rule in profile["syscalls"]:
        assert rule["action"] == "SCMP_ACT_ERRNO"
        for name in rule["names"]:
            try:
                flt.add_rule(seccomp.ERRNO(rule.get("errnoRet", 1)), name)
            except Exception:  # a call this libseccomp or architecture does not know
                pass
    flt.load()


def contain(keep: set[str], profile: str, argv: list[str]) -> None:
    """In the new namespaces, as their pid 1: fresh /proc, fewer capabilities, seccomp, exec."""
    check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make mounts private")
    check(libc.mount(b"proc", b"/proc", b"proc", 0, None), "mount /proc")
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    keep_numbers = {CAPS[c] for c in keep}
    for cap in range(last + 1):
        if cap not in keep_numbers:
            check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    load_seccomp(profile)
    os.execvp(argv[0], argv)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--caps", required=True, help="comma-separated capability names to keep")
    ap.add_argument("--seccomp", required=True, help="a Docker-format seccomp profile")
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    keep = {c.strip().upper() for c in args.caps.split(",") if c.strip()}

    ready_r, ready_w = os.pipe()
    mapped_r, mapped_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(ready_r)
        os.close(mapped_w)
        check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID), "unshare")
        os.write(ready_w, b"1")
        os.read(mapped_r, 1)  # the parent has written our uid/gid maps
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)
        init = os.fork()  # pid 1 of the new pid namespace
        if init == 0:
            contain(keep, args.seccomp, argv)
        forward_signals_to(init)
        os._exit(wait_for(init) & 0xFF)
    os.close(ready_w)
    os.close(mapped_r)
    forward_signals_to(child)
    os.read(ready_r, 1)
    Path(f"/proc/{child}/uid_map").write_text("0 0 65536\n")
    Path(f"/proc/{child}/setgroups").write_text("allow\n")
    Path(f"/proc/{child}/gid_map").write_text("0 0 65536\n")
    os.write(mapped_w, b"1")
    return wait_for(child)


if __name__ == "__main__":
    sys.exit(main())
