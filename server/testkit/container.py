"""Run a command the way the documented container runs the server, without a container engine.

    python server/testkit/container.py --caps SYS_ADMIN,SETUID,... --seccomp deploy/seccomp.json \
        [--user UID:GID] [--no-new-privs] [--reachable PATH] -- CMD...

The command runs as root of a new user namespace (uids and gids 0-65535 mapped to themselves, as
a container's are), in new mount and pid namespaces with a fresh /proc, with its capability
bounding set cut down to ``--caps`` and a Docker-format seccomp profile (default allow, a list of
refused calls) loaded. SIGTERM and SIGINT are passed on to the command.

``--user`` runs it as that uid instead, as an image's ``USER`` does: no supplementary groups,
the capabilities above in its bounding set only (none permitted, effective, inheritable or
ambient), so it holds a capability only when it executes a file that carries it.
``--no-new-privs`` sets no_new_privs first (Docker ``--security-opt no-new-privileges``,
Kubernetes ``allowPrivilegeEscalation: false``). ``--reachable`` (repeatable) makes a path
searchable by any user inside (this machine's interpreter lives under a 0700 home directory, a
checkout may live in a 0700 ``mktemp -d``; an image's do not): each directory on the way that
others cannot search is covered by a 0755 tmpfs holding only the next steps back, bind-mounted.
"""

from __future__ import annotations

import argparse
import ctypes
import grp
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID = 0x10000000, 0x00020000, 0x20000000
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38
CAPS = {
    "CHOWN": 0,
    "DAC_OVERRIDE": 1,
    "DAC_READ_SEARCH": 2,
    "FOWNER": 3,
    "KILL": 5,
    "SETGID": 6,
    "SETUID": 7,
    "SETPCAP": 8,
    "SYS_ADMIN": 21,
}

libc = ctypes.CDLL(None, use_errno=True)


# -- what the Dockerfile and the deploy files ask for (the tests read them, never a copy) ------


def image_file_caps() -> list[str]:
    """The capabilities the Dockerfile's setcap gives the server's interpreter, e.g. ["SYS_ADMIN", ...]."""
    found = re.search(r"setcap (cap_[a-z_,]+)\+ep", (REPO / "Dockerfile").read_text())
    assert found, "Dockerfile: no setcap ...+ep"
    return [c.removeprefix("cap_").upper() for c in found.group(1).split(",")]


def image_env() -> dict[str, str]:
    """The GRADSTEP_* settings the Dockerfile sets (its ENV lines)."""
    return dict(re.findall(r"\b(GRADSTEP_[A-Z_]+)=(\S+)", (REPO / "Dockerfile").read_text()))


def image_user() -> str:
    found = re.search(r"^USER (\S+)", (REPO / "Dockerfile").read_text(), re.M)
    assert found, "Dockerfile: no USER"
    return found.group(1)


def compose_caps() -> list[str]:
    found = re.search(r"cap_add: \[([^\]]+)\]", (REPO / "deploy" / "docker-compose.yml").read_text())
    assert found, "deploy/docker-compose.yml: no cap_add"
    return [c.strip() for c in found.group(1).split(",")]


def k8s_caps() -> list[str]:
    found = re.search(r"add: \[([^\]]+)\]", (REPO / "deploy" / "k8s" / "gradstep.yaml").read_text())
    assert found, "deploy/k8s/gradstep.yaml: no capabilities add"
    return [c.strip() for c in found.group(1).split(",")]


def image_unavailable() -> str | None:
    """Why the image's user and interpreter can't be built here (None if they can)."""
    if os.geteuid() != 0:
        return "building the image's user and capability-bearing interpreter needs root"
    for tool in ("useradd", "userdel", "groupadd", "groupdel"):
        if shutil.which(tool) is None:
            return f"no {tool} here (Debian's passwd)"
    from testkit.services import ensure  # (imported here: this file also runs as the container's wrapper)

    return ensure("setcap")  # libcap2-bin, installed if missing


class ImageUser:
    """What the Dockerfile builds, on this machine: a system user and group, and a copy of the
    interpreter next to the one that runs the tests (its venv, so it sees the same packages),
    root-owned, mode 0750 for that group, with the Dockerfile's file capabilities.

    ``with ImageUser() as image:`` then ``image.uid``, ``image.gid``, ``image.python``;
    the user, the group and the copy are gone afterwards.
    """

    def __init__(self, caps: list[str] | None = None, tag: str = ""):
        self.caps = image_file_caps() if caps is None else caps  # [] : a copy without file capabilities
        self.name = f"gsimage{os.getpid()}{tag}"
        self.python = str(Path(sys.executable).parent / f"python-image-{os.getpid()}{tag}")
        self.uid = self.gid = -1

    def __enter__(self) -> ImageUser:
        try:
            run(["groupadd", "--system", self.name])
            run(["useradd", "--system", "--gid", self.name, "--no-create-home", "--home-dir", "/nonexistent",
                 "--shell", "/usr/sbin/nologin", self.name])  # fmt: skip
            self.uid, self.gid = pwd.getpwnam(self.name).pw_uid, grp.getgrnam(self.name).gr_gid
            shutil.copyfile(os.path.realpath(sys.executable), self.python)
            os.chown(self.python, 0, self.gid)
            os.chmod(self.python, 0o750)
            if self.caps:
                run(["setcap", ",".join(f"cap_{c.lower()}" for c in self.caps) + "+ep", self.python])
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        Path(self.python).unlink(missing_ok=True)
        subprocess.run(["userdel", self.name], capture_output=True)
        subprocess.run(["groupdel", self.name], capture_output=True)  # gone with the user, usually

    def exists(self) -> bool:
        try:
            pwd.getpwnam(self.name)
            return True
        except KeyError:
            return Path(self.python).exists()


def needed_by_the_server() -> list[str]:
    """What the image's user must reach to run the server from this checkout: the interpreter's
    installation, the venv (the image interpreter's copy lives in its bin/) and the gradstep
    package being tested (a checkout can sit in a 0700 directory, e.g. ``mktemp -d`` or /root)."""
    import gradstep

    return sorted({sys.base_prefix, sys.prefix, str(Path(gradstep.__file__).resolve().parents[1])})


def wrapper(caps: list[str], user: str | None = None, no_new_privs: bool = False) -> list[str]:
    """The command line that runs a command (appended to it) in this emulated container, with
    deploy/seccomp.json; as ``user``, what the server needs is made reachable."""
    argv = [sys.executable, str(REPO / "server" / "testkit" / "container.py"), "--caps", ",".join(caps)]
    argv += ["--seccomp", str(REPO / "deploy" / "seccomp.json")]
    if user is not None:
        argv += ["--user", user]
        for path in needed_by_the_server():
            argv += ["--reachable", path]
    if no_new_privs:
        argv.append("--no-new-privs")
    return [*argv, "--"]


def run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")


# -- the container ----------------------------------------------------------------------------


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
    # libseccomp sets no_new_privs by default; a runtime does not (it loads the profile with its
    # CAP_SYS_ADMIN) unless asked to, and file capabilities depend on the difference.
    flt.set_attr(seccomp.Attr.CTL_NNP, 0)
    for rule in profile["syscalls"]:
        assert rule["action"] == "SCMP_ACT_ERRNO"
        for name in rule["names"]:
            try:
                flt.add_rule(seccomp.ERRNO(rule.get("errnoRet", 1)), name)
            except Exception:  # a call this libseccomp or architecture does not know
                pass
    flt.load()


def first_blocked(path: str) -> tuple[Path, Path] | None:
    """The first directory on the way to ``path`` that others can't search, and the next step."""
    parts = Path(path).resolve().parts
    for i in range(1, len(parts) - 1):
        here = Path(*parts[: i + 1])
        if not here.stat().st_mode & 0o001:
            return here, here / parts[i + 1]
    return None


def make_reachable(paths: list[str]) -> None:
    """Cover each directory on the way to ``paths`` that others can't search with a 0755 tmpfs
    holding only the next steps towards them, bind-mounted back (in this mount namespace only),
    shallowest first, until every path is reachable (a checkout in a 0700 directory, its venv and
    an interpreter under a 0700 home all at once)."""
    while True:
        blocked: dict[Path, set[Path]] = {}
        for path in paths:
            found = first_blocked(path)
            if found:
                blocked.setdefault(found[0], set()).add(found[1])
        if not blocked:
            return
        here = min(blocked, key=lambda p: len(p.parts))
        steps = {step: os.open(step, os.O_PATH | os.O_CLOEXEC) for step in blocked[here]}
        kinds = {step: step.is_dir() for step in steps}
        check(libc.mount(b"tmpfs", str(here).encode(), b"tmpfs", 0, b"mode=0755,size=64k"), "tmpfs")
        for step, fd in steps.items():
            step.mkdir() if kinds[step] else step.touch()
            source = f"/proc/self/fd/{fd}".encode()
            check(libc.mount(source, str(step).encode(), None, MS_BIND | MS_REC, None), f"bind {step}")
            os.close(fd)


def become(user: str) -> None:
    """Leave root for ``UID:GID`` as a container runtime does: the kernel clears the effective
    and permitted sets on the way (inheritable and ambient are already empty here)."""
    uid, _, gid = user.partition(":")
    os.setgroups([])
    os.setresgid(int(gid or uid), int(gid or uid), int(gid or uid))
    os.setresuid(int(uid), int(uid), int(uid))


def contain(keep: set[str], profile: str, argv: list[str], args: argparse.Namespace) -> None:
    """In the new namespaces, as their pid 1: fresh /proc, fewer capabilities, seccomp, exec."""
    check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make mounts private")
    check(libc.mount(b"proc", b"/proc", b"proc", 0, None), "mount /proc")
    make_reachable(args.reachable)
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    keep_numbers = {CAPS[c] for c in keep}
    for cap in range(last + 1):
        if cap not in keep_numbers:
            check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    if args.no_new_privs:
        check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    load_seccomp(profile)  # before the uid change, as a runtime does: loading it needs no privilege then
    if args.user:
        become(args.user)
    os.execvp(argv[0], argv)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--caps", required=True, help="comma-separated capability names to keep")
    ap.add_argument("--seccomp", required=True, help="a Docker-format seccomp profile")
    ap.add_argument("--user", help="UID:GID to run the command as (default: root)")
    ap.add_argument("--no-new-privs", action="store_true", help="set no_new_privs before the command")
    ap.add_argument("--reachable", action="append", default=[], help="a path any user must reach")
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
            contain(keep, args.seccomp, argv, args)
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
