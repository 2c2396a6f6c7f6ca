"""The child's confinement layers, applied in order right after the fork.

Each layer is one method of ``Confinement`` named after it (see ``config.LAYERS``).
None of them depends on the snippet, so a spare child applies them all before
its code arrives; then ``receive`` reads the code from its code pipe.
Everything here is imported by the zygote before it forks: after the uid
drop a child may not be able to import anything new.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import resource
import signal
import struct
import time

from gradstep.sandbox import capabilities
from gradstep.sandbox.libc import check as _check
from gradstep.sandbox.libc import libc as _libc
from gradstep.sandbox.libc import prctl

try:
    import pyseccomp
except Exception as e:  # not installed, or no libseccomp: the seccomp layer reports itself unavailable
    pyseccomp = None
    _NO_SECCOMP = f"pyseccomp is not usable: {type(e).__name__}: {e}"

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
CLONE_THREAD = 0x00010000

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

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38

CODE_HEADER = struct.Struct("<Q")  # the code pipe carries <u64 length><UTF-8 code> (from the parent: trusted)
RESULT_FD = 3  # where close_fds puts the result pipe (the snippet may write to it: the parent checks)
CODE_FD = 4  # where close_fds puts the code pipe until the code is read (then it is closed)


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


class LayerFailed(Exception):
    def __init__(self, layer: str, error: BaseException):
        super().__init__(f"{layer}: {type(error).__name__}: {error}")
        self.layer = layer


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def _mount_setattr(path: str, set_: int = 0, clear: int = 0, recursive: bool = False) -> None:
    attr = _MountAttr(set_, clear, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    res = _libc.syscall(
        ctypes.c_long(SYS_MOUNT_SETATTR),
        ctypes.c_int(AT_FDCWD),
        ctypes.c_char_p(path.encode()),
        ctypes.c_uint(flags),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    _check(res, f"mount_setattr {path}")


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def seccomp_rules(own_pid: int) -> list[tuple[int, str, tuple]]:
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
        "setgroups", "setfsuid", "setfsgid", "capset",
        # kernel attack surface a snippet never needs
        "bpf", "io_uring_setup", "io_uring_enter", "io_uring_register",
        "keyctl", "add_key", "request_key", "perf_event_open", "userfaultfd",
        "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
        "reboot", "swapon", "swapoff", "acct", "syslog", "quotactl", "iopl", "ioperm",
        "lookup_dcookie", "vhangup",
    ]  # fmt: skip
    rules = [(eperm, name, ()) for name in denied]
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

    def __init__(self, plan: dict, slot: int, result_fd: int, code_fd: int | None = None):
        self.plan = plan
        self.slot = slot
        self.run_uid = plan["uid_base"] + slot
        self.fd = result_fd
        self.code_fd = code_fd
        self.timings: dict[str, float] = {}
        self.unshared = False
        self.workdir: str | None = None  # entered once every layer is on (see ``apply``)

    def apply(self, layers: list[str]) -> None:
        """Apply each layer; the first failure raises LayerFailed (the child must not go on)."""
        for name in layers:
            t = time.perf_counter()
            try:
                getattr(self, name)()
            except Exception as e:
                raise LayerFailed(name, e) from e
            self.timings[name] = (time.perf_counter() - t) * 1e3
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
        for name in layers:
            try:
                getattr(self, name)()
                found[name] = "active"
            except Exception as e:
                found[name] = f"unavailable: {type(e).__name__}: {e}"
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
        pid = str(os.getpid())
        for procs in self.plan["slot_procs"][self.slot]:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, pid.encode())
            finally:
                os.close(fd)

    def close_fds(self) -> None:
        null = os.open("/dev/null", os.O_RDWR)
        for std in (0, 1, 2):
            if null != std:
                os.dup2(null, std)
        # Copy the pipes above 4 first, so that moving one to 3 or 4 can't clobber the other.
        keep = [(fcntl.fcntl(self.fd, fcntl.F_DUPFD_CLOEXEC, 5), RESULT_FD)]
        if self.code_fd is not None:
            keep.append((fcntl.fcntl(self.code_fd, fcntl.F_DUPFD_CLOEXEC, 5), CODE_FD))
        for fd, where in keep:
            os.dup2(fd, where, inheritable=False)
        self.fd = RESULT_FD
        if self.code_fd is not None:
            self.code_fd = CODE_FD
        os.closerange(CODE_FD + 1 if self.code_fd is not None else RESULT_FD + 1, 1 << 20)

    def namespaces(self) -> None:
        _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
        self.unshared = True

    def mounts(self) -> None:
        if not self.unshared:  # never touch the host's mount table
            raise RuntimeError("needs the namespaces layer (a private mount namespace)")
        plan = self.plan
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        keep = {p: os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for p in plan["keep"]}
        _mount_setattr("/", set_=MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, recursive=True)
        _mount_setattr("/dev", clear=MOUNT_ATTR_NODEV)  # /dev/null, /dev/urandom
        for hidden in plan["hide"]:
            _mount(
                "tmpfs", hidden, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755"
            )
            for path, fd in keep.items():
                if _under(path, hidden):
                    os.makedirs(path, exist_ok=True)
                    _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
                    _mount_setattr(
                        path, set_=MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, recursive=True
                    )
            _mount_setattr(hidden, set_=MOUNT_ATTR_RDONLY)
        for fd in keep.values():
            os.close(fd)
        _mount(
            "tmpfs",
            "/tmp",
            "tmpfs",
            MS_NOSUID | MS_NODEV | MS_NOEXEC,
            f"size={plan['tmp_mb']}m,nr_inodes=4096,mode=0700,uid={self.run_uid},gid={self.run_uid}",
        )
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible")
        self.workdir = "/tmp"

    def rlimits(self) -> None:
        plan = self.plan
        vm_data = 0
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmData:"):
                    vm_data = int(line.split()[1]) << 10
        mib = 1 << 20
        limits = {
            # RLIMIT_DATA, not RLIMIT_AS: torch already maps ~620 MB of address space
            resource.RLIMIT_DATA: vm_data + plan["memory_mb"] * mib,
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
        usage = resource.getrusage(resource.RUSAGE_SELF)
        used = int(usage.ru_utime + usage.ru_stime)
        cpu = used + plan["cpu_seconds"]
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU, then SIGKILL

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
        if os.getppid() != self.plan["zygote_pid"]:  # the zygote died before PDEATHSIG was set
            os._exit(1)

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
