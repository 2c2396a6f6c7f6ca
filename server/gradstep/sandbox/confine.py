"""The child's confinement layers, applied in order right after the fork.

Each layer is one method of ``Confinement`` named after it (see ``config.LAYERS``).
None of them depends on the snippet, so a spare child applies them all before
its code arrives; then ``receive`` reads the code from its code pipe.
Everything here is imported by the zygote before it forks: after the uid
drop a child may not be able to import anything new.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import resource
import select
import signal
import struct
import time
from collections.abc import Iterator

from gradstep.sandbox import capabilities
from gradstep.sandbox.config import data_mb
from gradstep.sandbox.libc import check as _check
from gradstep.sandbox.libc import libc as _libc
from gradstep.sandbox.libc import prctl
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
    under,
)
from gradstep.sandbox.mounts import mount as _mount
from gradstep.sandbox.mounts import mount_setattr as _mount_setattr
from gradstep.sandbox.rootfs import DEVICES

try:
    import pyseccomp
except Exception as e:  # not installed, or no libseccomp: the seccomp layer reports itself unavailable
    pyseccomp = None
    _NO_SECCOMP = f"pyseccomp is not usable: {type(e).__name__}: {e}"

CLONE_NEWCGROUP = 0x02000000
CLONE_NEWPID = 0x20000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
CLONE_THREAD = 0x00010000

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38

SYS_STATMOUNT, SYS_LISTMOUNT = 457, 458  # the unified syscall table: x86_64 and aarch64 alike
STATX_MNT_ID_UNIQUE = 0x4000
HOSTNAME = b"gradstep"  # the host name and NIS domain name a child sees (its UTS namespace's)
DOMAINNAME = b"(none)"  # what Linux reports when none is set

CODE_HEADER = struct.Struct("<Q")  # the code pipe carries <u64 length><UTF-8 code> (from the parent: trusted)
RESULT_FD = 3  # where close_fds puts the result pipe (the snippet may write to it: the parent checks)
CODE_FD = 4  # where close_fds puts the code pipe until the code is read (then it is closed)
ZYGOTE_FD = 5  # where close_fds puts the zygote's pidfd until no_new_privs has checked it is alive
# The child's /proc: its own processes only (hidepid: none of another uid's), and none of the
# host-wide files (subset=pid: no loadavg, meminfo, stat, uptime, kallsyms, sys/, ...).
PROC_OPTIONS = "hidepid=invisible,subset=pid"


@contextlib.contextmanager
def _fs_user(uid: int) -> Iterator[None]:
    """Check file access as ``uid`` (setfsuid/setfsgid; the other ids and capabilities stay)."""
    old_uid, old_gid = _libc.setfsuid(uid), _libc.setfsgid(uid)
    if _libc.setfsuid(-1) != uid or _libc.setfsgid(-1) != uid:  # -1: no change, returns the current one
        raise PermissionError(f"setfsuid/setfsgid({uid}) refused")
    try:
        yield
    finally:
        _libc.setfsgid(old_gid)
        _libc.setfsuid(old_uid)


class LayerFailed(Exception):
    def __init__(self, layer: str, error: BaseException):
        super().__init__(f"{layer}: {type(error).__name__}: {error}")
        self.layer = layer


def seccomp_rules(own_pid: int) -> list[tuple[int, str | int, tuple]]:
    """(action, syscall, argument conditions) for every denied call."""
    eperm = pyseccomp.ERRNO(errno.EPERM)
    denied = [
        # no new programs, no new processes (threads are clone with CLONE_THREAD)
        "execve", "execveat", "fork", "vfork",
        # no sockets at all: Unix sockets by path ignore the network namespace
        "socket", "socketpair",
        # no looking into or steering other processes
        "ptrace", "process_vm_readv", "process_vm_writev", "tkill", "kcmp",
        "pidfd_open", "pidfd_getfd", "pidfd_send_signal",
        # no changing the filesystem view or identity
        "mount", "umount2", "unshare", "setns", "pivot_root", "chroot",
        "mount_setattr", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
        "name_to_handle_at", "open_by_handle_at",
        "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid",
        "setgroups", "setfsuid", "setfsgid", "capset", "sethostname", "setdomainname",
        # kernel attack surface a snippet never needs
        "bpf", "io_uring_setup", "io_uring_enter", "io_uring_register",
        "keyctl", "add_key", "request_key", "perf_event_open", "userfaultfd",
        "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
        "reboot", "swapon", "swapoff", "acct", "syslog", "quotactl", "iopl", "ioperm",
        "lookup_dcookie", "vhangup",
        # no watching files for others' use of them: the interpreter's and torch's files are the
        # host's, and an inotify watch on them says when another run (or the host) opens or reads
        # them; fanotify needs CAP_SYS_ADMIN anyway (torch's libuv has inotify for a store no
        # snippet can reach: no sockets)
        "inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init", "fanotify_mark",
        # the machine's load averages, free memory, process count and uptime: /proc/loadavg,
        # meminfo, stat and uptime (absent from its /proc) by a system call (glibc's qsort asks
        # once for the memory size, which the zygote has done; torch only in libuv)
        "sysinfo",
    ]  # fmt: skip
    rules = [(eperm, name, ()) for name in denied]
    # The host-wide mount counter: a mount's 64-bit unique ID grows with every mount made on the host
    # since boot (each run makes ~30), so two runs' IDs would say how many runs came between them.
    # statmount/listmount (Linux 6.8; numbers as libseccomp 2.5 has no names for them) and statx asked
    # for STATX_MNT_ID_UNIQUE. The reusable IDs of /proc/self/mountinfo stay (README: what it hides).
    rules += [(eperm, SYS_STATMOUNT, ()), (eperm, SYS_LISTMOUNT, ())]
    rules.append(
        (eperm, "statx", (pyseccomp.Arg(3, pyseccomp.MASKED_EQ, STATX_MNT_ID_UNIQUE, STATX_MNT_ID_UNIQUE),))
    )
    rules += [
        (eperm, "clone", (pyseccomp.Arg(0, pyseccomp.MASKED_EQ, CLONE_THREAD, 0),)),
        # ENOSYS, not EPERM: glibc then falls back to clone(), which the rule above checks
        (pyseccomp.ERRNO(errno.ENOSYS), "clone3", ()),
        (eperm, "kill", (pyseccomp.Arg(0, pyseccomp.NE, own_pid),)),
        (eperm, "tgkill", (pyseccomp.Arg(0, pyseccomp.NE, own_pid),)),
        (eperm, "rt_sigqueueinfo", (pyseccomp.Arg(0, pyseccomp.NE, own_pid),)),
        (eperm, "rt_tgsigqueueinfo", (pyseccomp.Arg(0, pyseccomp.NE, own_pid),)),
    ]
    return rules


class Confinement:
    """Applies the layers named in ``plan["layers"]`` to the calling (freshly forked) process.

    ``plan`` is the dict the parent sent at start-up plus this run's slot: it
    holds limits, paths and ids, never anything secret.
    """

    def __init__(
        self,
        plan: dict,
        slot: int,
        result_fd: int,
        code_fd: int | None = None,
        cgroup_fds: list[int] | None = None,
        zygote_fd: int | None = None,
    ):
        self.plan = plan
        self.slot = slot
        self.run_uid = plan["uid_base"] + slot
        self.fd = result_fd
        self.code_fd = code_fd
        # its slot's cgroup.procs files, opened by the zygote before it left the host's tree
        self.cgroup_fds = list(cgroup_fds or [])
        # a pidfd of the zygote (its own copy): once PR_SET_PDEATHSIG is set, it tells whether
        # the zygote died before (in its own PID namespace the child's getppid() is 0)
        self.zygote_fd = zygote_fd
        self.timings: dict[str, float] = {}
        self.unshared = False
        self.workdir: str | None = None  # entered once every layer is on (see ``apply``)

    def apply(self, layers: list[str]) -> None:
        """Apply each layer; the first failure raises LayerFailed (the child must not go on)."""
        if "cgroup" not in layers:
            self._close_cgroup_fds()
        for name in layers:
            t = time.perf_counter()
            try:
                getattr(self, name)()
            except Exception as e:
                raise LayerFailed(name, e) from e
            self.timings[name] = (time.perf_counter() - t) * 1e3
        self._close_zygote_fd()  # no_new_privs closes it; without that layer, here
        # The work dir is 0700 and owned by the run's uid: entered as that uid, so a server
        # that is not root needs no CAP_DAC_OVERRIDE for it.
        if self.workdir is not None:
            try:
                os.chdir(self.workdir)
            except OSError as e:
                raise LayerFailed("mounts", e) from e

    def probe(self, layers: list[str]) -> dict[str, str]:
        """Try every layer, going on after failures: {name: "active" | "unavailable: why"}."""
        found = {}
        if "cgroup" not in layers:
            self._close_cgroup_fds()
        for name in layers:
            try:
                getattr(self, name)()
                found[name] = "active"
            except Exception as e:
                found[name] = f"unavailable: {type(e).__name__}: {e}"
        self._close_zygote_fd()
        return found

    def receive(self) -> str | None:
        """Block until the parent hands over the code (None: the pipe closed first); close the pipe.

        Called after every layer: the snippet is the only thing that arrives late.
        Also records the CPU time used so far (``cpu_before`` ms): RLIMIT_CPU counts
        it. Blocked in read(), a waiting spare uses none, so it is the few ms of its
        own confinement, as for a child forked on request.
        """
        assert self.code_fd is not None
        try:
            header = self._read_exactly(CODE_HEADER.size)
            if header is None:
                return None
            (size,) = CODE_HEADER.unpack(header)
            data = self._read_exactly(size)
            if data is None:
                return None
        finally:
            os.close(self.code_fd)
            self.code_fd = None
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.timings["cpu_before"] = (usage.ru_utime + usage.ru_stime) * 1e3
        return data.decode("utf-8", "surrogatepass")

    def _read_exactly(self, size: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < size:
            chunk = os.read(self.code_fd, min(size - len(buf), 1 << 20))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    # -- layers, in order ------------------------------------------------------

    def setsid(self) -> None:
        os.setsid()

    def cgroup(self) -> None:
        pid = str(os.getpid()).encode()
        try:
            if not self.cgroup_fds:  # the zygote stayed on the host's tree: cgroupfs is there
                self.cgroup_fds = [
                    os.open(p, os.O_WRONLY | os.O_CLOEXEC) for p in self.plan["slot_procs"][self.slot]
                ]
            for fd in self.cgroup_fds:
                os.write(fd, pid)
        finally:
            self._close_cgroup_fds()

    def _close_cgroup_fds(self) -> None:
        fds, self.cgroup_fds = self.cgroup_fds, []
        for fd in fds:
            os.close(fd)

    def close_fds(self) -> None:
        null = os.open("/dev/null", os.O_RDWR)
        for std in (0, 1, 2):
            if null != std:
                os.dup2(null, std)
        # Copy the fds kept above 5 first, so that moving one to 3, 4 or 5 can't clobber another.
        keep = [(fcntl.fcntl(self.fd, fcntl.F_DUPFD_CLOEXEC, 6), RESULT_FD)]
        if self.code_fd is not None:
            keep.append((fcntl.fcntl(self.code_fd, fcntl.F_DUPFD_CLOEXEC, 6), CODE_FD))
        if self.zygote_fd is not None:
            keep.append((fcntl.fcntl(self.zygote_fd, fcntl.F_DUPFD_CLOEXEC, 6), ZYGOTE_FD))
        for fd, where in keep:
            os.dup2(fd, where, inheritable=False)
        self.fd = RESULT_FD
        if self.code_fd is not None:
            self.code_fd = CODE_FD
        if self.zygote_fd is not None:
            self.zygote_fd = ZYGOTE_FD
        kept = {where for _, where in keep}
        for fd in range(RESULT_FD + 1, ZYGOTE_FD + 1):
            if fd not in kept:
                os.closerange(fd, fd + 1)  # no error if it is not open
        os.closerange(ZYGOTE_FD + 1, 1 << 20)

    def namespaces(self) -> None:
        # A cgroup namespace too: /proc/self/cgroup then says "/", not the server's cgroup names.
        _check(
            _libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP),
            "unshare",
        )
        self.unshared = True
        # Its UTS namespace's names are its own: the host's name (a machine's, a pod's) is none of a
        # snippet's business (uname, socket.gethostname(), /proc/sys/kernel/hostname)
        _check(_libc.sethostname(HOSTNAME, len(HOSTNAME)), "sethostname")
        _check(_libc.setdomainname(DOMAINNAME, len(DOMAINNAME)), "setdomainname")

    def pidns(self) -> None:
        # The zygote forked this child into a PID namespace of its own (zygote.py): it is its pid 1,
        # and no host pid can be named from here. Its /proc is mounted by ``mounts``.
        if os.getpid() != 1:
            raise RuntimeError(f"not the first process of a PID namespace of its own (pid {os.getpid()})")

    def root(self) -> None:
        # The zygote built the minimal root and every child inherits it: check it is the one here.
        expected = self.plan.get("root_id")
        if expected is None:
            raise RuntimeError("the zygote has no minimal root")
        st = os.stat("/")
        if (st.st_dev, st.st_ino) != tuple(expected):
            raise RuntimeError("the root here is not the zygote's minimal root")

    def mounts(self) -> None:
        if not self.unshared:  # never touch the host's mount table
            raise RuntimeError("needs the namespaces layer (a private mount namespace)")
        plan = self.plan
        rooted = plan.get("root_id") is not None
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        read_only = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
        _mount_setattr("/", set_=read_only, recursive=True)
        if rooted:  # the devices of the minimal root are one bind mount each
            for name in DEVICES:
                _mount_setattr(f"/dev/{name}", clear=MOUNT_ATTR_NODEV)
        else:
            _mount_setattr("/dev", clear=MOUNT_ATTR_NODEV)  # /dev/null, /dev/urandom
            self._hide(plan["hide"], plan["keep"], read_only)
        # What the minimal root shows under /tmp (a checkout there, with its venv) is bound back
        # into the private tmpfs that covers it.
        under_tmp = {p: os.open(p, os.O_PATH | os.O_CLOEXEC) for p in plan.get("under_tmp", [])}
        _mount(
            "tmpfs",
            "/tmp",
            "tmpfs",
            MS_NOSUID | MS_NODEV | MS_NOEXEC,
            f"size={plan['tmp_mb']}m,nr_inodes=4096,mode=0700,uid={self.run_uid},gid={self.run_uid}",
        )
        if under_tmp:
            self._bind_back_under_tmp(under_tmp, read_only)
        # Of the PID namespace the child is in: with ``pidns``, the child alone
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, PROC_OPTIONS)
        self.workdir = "/tmp"

    def _hide(self, hide: list[str], keep: list[str], read_only: int) -> None:
        """Without a minimal root: an empty read-only tmpfs over each hidden path, kept ones bound back."""
        for hidden in sorted(hide, key=len):
            if not os.path.isdir(hidden):  # inside one hidden before
                continue
            kept = {p: os.open(p, os.O_PATH | os.O_CLOEXEC) for p in keep if under(p, hidden)}
            _mount(
                "tmpfs", hidden, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755"
            )
            self._bind_back(kept, read_only)
            _mount_setattr(hidden, set_=MOUNT_ATTR_RDONLY)

    def _bind_back_under_tmp(self, paths: dict[str, int], read_only: int) -> None:
        """The way to each path is a read-only tmpfs at its first step under /tmp (the snippet must
        not write there: its files would show up inside the checkout's path)."""
        # The work dir is 0700 and the run's: a server that is not root (no CAP_DAC_OVERRIDE) can
        # only make the way in as that uid (setfsuid: its capability to mount stays).
        with _fs_user(self.run_uid):
            firsts = sorted({"/tmp/" + p.split("/")[2] for p in paths})
            for first in firsts:
                os.mkdir(first, 0o755)
                _mount(
                    "tmpfs",
                    first,
                    "tmpfs",
                    MS_NOSUID | MS_NODEV | MS_NOEXEC,
                    "size=64k,nr_inodes=256,mode=0755",
                )
            self._bind_back(paths, read_only)
            for first in firsts:
                _mount_setattr(first, set_=read_only)

    @staticmethod
    def _bind_back(paths: dict[str, int], read_only: int) -> None:
        """Bind each path (an O_PATH fd, closed here) back at its place, read-only."""
        for path, fd in paths.items():
            try:
                if os.path.isdir(f"/proc/self/fd/{fd}"):
                    os.makedirs(path, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    open(path, "a").close()
                _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
                _mount_setattr(path, set_=read_only, recursive=True)
            finally:
                os.close(fd)

    def rlimits(self) -> None:
        plan = self.plan
        vm_data = 0
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmData:"):
                    vm_data = int(line.split()[1]) << 10
        mib = 1 << 20
        limits = {
            # RLIMIT_DATA, not RLIMIT_AS: torch already maps ~620 MB of address space. Below the
            # memory cgroup's limit: a run too big is refused an allocation, not killed (data_mb)
            resource.RLIMIT_DATA: vm_data + data_mb(plan["memory_mb"]) * mib,
            resource.RLIMIT_FSIZE: plan["tmp_mb"] * mib,
            resource.RLIMIT_NOFILE: plan["max_files"],
            resource.RLIMIT_NPROC: plan["max_tasks"],  # per uid: binds after the uid drop
            resource.RLIMIT_CORE: 0,
        }
        for which, value in limits.items():
            resource.setrlimit(which, (value, value))
        # RLIMIT_CPU counts the process's CPU time since its fork, in whole seconds, so
        # it is set relative to what the child has used (a few ms of fork and layers:
        # ``used`` is 0). A spare blocked in read() on its code pipe uses no CPU, so the
        # run gets ``cpu_seconds`` less those few ms, as a child forked on request did.
        # It is set here, before the uid drop: afterwards a hard limit can't be raised
        # (no CAP_SYS_RESOURCE), only lowered (setrlimit is not in the seccomp filter).
        # The first process of a PID namespace ignores SIGXCPU (a signal it has no handler for,
        # unless it is SIGKILL or SIGSTOP from outside), so there the hard limit is the soft one:
        # SIGKILL at ``cpu_seconds``, the moment SIGXCPU would have ended it.
        usage = resource.getrusage(resource.RUSAGE_SELF)
        used = int(usage.ru_utime + usage.ru_stime)
        cpu = used + plan["cpu_seconds"]
        hard = cpu if os.getpid() == 1 else cpu + 1  # SIGXCPU at the soft limit, SIGKILL at the hard one
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, hard))

    def uid(self) -> None:
        # The bounding set first: emptying it needs CAP_SETPCAP, which a root server's
        # child loses with uid 0. A non-root server's child keeps its (file) capabilities
        # across setresuid, so every set is cleared explicitly, then checked.
        capabilities.drop_bounding()
        capabilities.clear_ambient()
        os.setgroups([])
        os.setresgid(self.run_uid, self.run_uid, self.run_uid)
        os.setresuid(self.run_uid, self.run_uid, self.run_uid)
        capabilities.clear()
        if os.getuid() != self.run_uid or os.geteuid() != self.run_uid:
            raise RuntimeError("uid did not change")
        left = capabilities.left()
        if left:
            raise RuntimeError(f"capabilities left after the uid change: {left}")

    def no_new_privs(self) -> None:
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        # The zygote died before PDEATHSIG was set: its pidfd is readable once it has exited (in a
        # PID namespace of its own the child's getppid() is 0, whoever its parent is).
        if self.zygote_fd is not None:
            poller = select.poll()
            poller.register(self.zygote_fd, select.POLLIN)
            gone = bool(poller.poll(0))
            self._close_zygote_fd()
        else:
            gone = os.getppid() != self.plan["zygote_pid"]
        if gone:
            os._exit(1)

    def _close_zygote_fd(self) -> None:
        fd, self.zygote_fd = self.zygote_fd, None
        if fd is not None:
            os.close(fd)

    def seccomp(self) -> None:
        if pyseccomp is None:
            raise RuntimeError(_NO_SECCOMP)
        f = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
        f.set_attr(pyseccomp.Attr.CTL_TSYNC, 1)  # every thread, not only this one
        for action, name, args in seccomp_rules(os.getpid()):
            try:
                f.add_rule(action, name, *args)
            except (OSError, ValueError, RuntimeError) as e:
                if name in _ESSENTIAL:
                    raise RuntimeError(f"rule for {name}: {e}") from e
        f.load()


# A filter without these is not worth loading: fail the layer instead.
_ESSENTIAL = {"execve", "execveat", "fork", "vfork", "clone", "clone3", "socket", "ptrace", "kill"}
