"""Attacks on the sandbox: each test tries one, with the real target (the tracer).

A snippet is what a stranger pastes; the tracer runs it in the confined child.
Each test asserts that the attack failed with a clear status (or a clear error
inside the trace), that the sandbox still runs a normal snippet afterwards,
and that nothing is left behind: no process in the guard but the zygote and its spares, no
file of the child's uid on the host, no new mount.

Two sandboxes run the attacks: ``full`` (every layer) and, for attacks that
seccomp stops first, ``no_seccomp`` (every layer but seccomp), which shows the
layers underneath holding on their own. Both live inside a guard cgroup, and both
have two slots beyond their two workers (``extra_slots``), so attacks land on the
extra slots' spares too; one test runs on every slot in turn.
"""

from __future__ import annotations

import ast
import os
import select
import socket
import tempfile
import time
from pathlib import Path

import gradstep.sandbox
import orjson
import pytest
from gradstep.checker import check
from gradstep.runs import observed, payload_for, sandbox_config, served_fields
from gradstep.sandbox import Sandbox
from gradstep.sandbox.cgroups import CPU_SHARES, cgroup_of
from gradstep.settings import Settings
from testkit import truth
from testkit.sandbox_guard import (
    Guard,
    at_once,
    files_owned_by,
    guard_fixture,
    guard_unavailable,
    most_at_once,
    mount_points,
    settle,
    uid_base,
    work_dir_listing,
    write_attempts,
)

pytestmark = pytest.mark.skipif(guard_unavailable() is not None, reason=str(guard_unavailable()))

REPO = Path(gradstep.sandbox.__file__).resolve().parents[3]
SECRET = f"gradstep-attack-secret-{os.getpid()}"
UIDS = {"full": uid_base(1000), "no_seccomp": uid_base(1100)}  # away from a server's: one may run here too
WORKERS = 2
EXTRA_SLOTS = 2  # slots beyond the workers, each with its spare: attacks land on them too
SLOTS = WORKERS + EXTRA_SLOTS
NORMAL = "import torch\nx = torch.ones(3, requires_grad=True)\n(x * x).sum().backward()\nprint(x.grad)"


guard = guard_fixture(memory_mb=6144, pids=400)


@pytest.fixture(scope="module")
def mounts_before():
    return mount_points()


def _start(guard: Guard, kind: str):
    config = sandbox_config(  # the production target and preloads: what the server runs
        Settings(),
        workers=WORKERS,
        extra_slots=EXTRA_SLOTS,
        memory_mb=512,
        cpu_seconds=2,
        wall_seconds=5,
        tmp_mb=8,
        max_tasks=32,
        cgroup_parent=guard.parent,
        uid_base=UIDS[kind],
        disable=frozenset({"seccomp"}) if kind == "no_seccomp" else frozenset(),
    )
    os.environ["GRADSTEP_TEST_SECRET"] = SECRET  # in the server process, never in a child
    sb = Sandbox(config)
    try:
        sb.start()
        guard.hold(sb.health()["zygote_pid"])
    except BaseException:
        sb.close()
        raise
    _running.append(sb)
    return sb


_running: list[Sandbox] = []  # every sandbox of this module that is up


@pytest.fixture(scope="module")
def full(guard, mounts_before):
    sb = _start(guard, "full")
    yield sb
    _running.remove(sb)
    sb.close()


@pytest.fixture(scope="module")
def no_seccomp(guard, mounts_before):
    sb = _start(guard, "no_seccomp")
    yield sb
    _running.remove(sb)
    sb.close()


@pytest.fixture(params=["full", "no_seccomp"])
def both(request):
    """The same attack against both sandboxes: (kind, sandbox)."""
    return request.param, request.getfixturevalue(request.param)


def attack(sb: Sandbox, code: str, guard: Guard, mounts_before: set[str]):
    """Run an attack; check the sandbox is healthy and clean after it. Returns (result, trace)."""
    zygote = sb.health()["zygote_pid"]
    result = sb.run(payload_for(code))
    trace = served(code, result) if result.status == "ok" else None
    # healthy: the same zygote, inside the guard, and a normal snippet still runs
    health = sb.health()
    assert health["zygote"] and health["zygote_pid"] == zygote
    assert guard.contains(zygote)
    normal = sb.run(payload_for(NORMAL))
    assert normal.status == "ok", normal.detail
    assert orjson.loads(normal.output)["status"] == "ok"
    # clean, once the slots are free again (a run answers before its child exits): no
    # process but the zygotes and their spares, no file of a child's uid, no new mount
    settle(sb)
    allowed = set()
    for s in _running:
        h = settle(s)
        allowed |= {h["zygote_pid"], *h["spare_pids"]}
    assert guard.tasks() <= allowed
    uids = range(min(UIDS.values()), max(UIDS.values()) + SLOTS)
    assert files_owned_by(uids, ["/tmp", "/var/tmp", "/dev/shm", str(REPO), str(REPO / "server")]) == []
    assert mount_points() == mounts_before
    return result, trace


def served(code: str, result) -> dict:
    """A run's bytes as the server serves them: checked, its sentences the server's (gradstep.voice)."""
    seen = observed(Settings().run_spec(), result)  # the job's spec: payload_for's, the default settings'
    checked = check(result.output, served_fields(code), seen, encode=False)
    assert checked.problem is None and checked.body is not None, checked.problem
    return orjson.loads(checked.body)


def error_of(trace: dict) -> tuple[str, str]:
    assert trace is not None and trace["error"] is not None, trace and trace.get("stdout")
    return trace["error"]["type"], trace["error"]["message"]


# -- network ---------------------------------------------------------------------


def test_tcp_connect_to_a_loopback_listener_fails(both, guard, mounts_before):
    kind, sb = both
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        code = f"import socket\ns = socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', {port}))"
        result, trace = attack(sb, code, guard, mounts_before)
        kind_of_error = error_of(trace)
        if kind == "full":
            assert kind_of_error == ("PermissionError", "[Errno 1] Operation not permitted")  # seccomp
        else:
            assert kind_of_error == ("OSError", "[Errno 101] Network is unreachable")  # network namespace
        assert select.select([listener], [], [], 0)[0] == [], "the listener got a connection"
    finally:
        listener.close()


def test_connecting_to_a_host_by_name_fails_as_a_network_error(both, guard, mounts_before):
    code = "import socket\nsocket.create_connection(('example.com', 80), timeout=2)"
    _, trace = attack(both[1], code, guard, mounts_before)
    kind_of_error = error_of(trace)
    # no resolver and no route: a network error, as on a machine without network (never a LookupError)
    assert kind_of_error[0] in ("gaierror", "PermissionError", "OSError"), kind_of_error


def test_connect_to_a_unix_socket_by_path_fails(full, guard, mounts_before):
    # Unix sockets by path ignore the network namespace and read-only mounts: seccomp denies socket().
    d = tempfile.mkdtemp(prefix="gradstep-test-", dir="/var/tmp")
    os.chmod(d, 0o777)
    path = os.path.join(d, "sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    os.chmod(path, 0o777)
    listener.listen(1)
    try:
        code = f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({path!r})"
        _, trace = attack(full, code, guard, mounts_before)
        assert error_of(trace) == ("PermissionError", "[Errno 1] Operation not permitted")
        assert select.select([listener], [], [], 0)[0] == []
    finally:
        listener.close()
        os.unlink(path)
        os.rmdir(d)


# -- reading what is not theirs ----------------------------------------------------


def test_reading_etc_shadow_fails(both, guard, mounts_before):
    _, sb = both
    _, trace = attack(sb, "print(open('/etc/shadow').read())", guard, mounts_before)
    # not in the minimal root (without it, the uid: tests/sandbox/test_sandbox_runner.py)
    assert error_of(trace)[0] == "FileNotFoundError"
    assert trace["stdout"] == ""


def test_reading_the_servers_source_fails(both, guard, mounts_before):
    _, sb = both
    source = Path(gradstep.sandbox.__file__).resolve()
    assert source.exists() and (REPO / "pyproject.toml").exists()
    code = (
        "import os\n"
        "try:\n"
        f"    print(sorted(os.listdir({str(REPO)!r})))\n"
        "except OSError as e:\n"
        "    print(type(e).__name__)\n"
        f"for path in [{str(REPO / 'pyproject.toml')!r}, {str(source)!r}]:\n"
        "    try:\n"
        "        print(open(path).read()[:100])\n"
        "    except OSError as e:\n"
        "        print(type(e).__name__)\n"
    )
    _, trace = attack(sb, code, guard, mounts_before)
    listing, *reads = trace["stdout"].splitlines()
    # hidden: an empty read-only tmpfs over the repo (only the venv bound back), or, for a
    # checkout under /tmp, not there at all (the child's /tmp is its own)
    assert listing in ("['.venv']", "FileNotFoundError")
    assert reads == ["FileNotFoundError", "FileNotFoundError"]


def test_reading_the_parents_environment_and_pid_1_fails(both, guard, mounts_before):
    _, sb = both
    code = (
        "import os\n"
        f"print(os.environ.get('GRADSTEP_TEST_SECRET'))\n"
        f"for path in ['/proc/{os.getpid()}/environ', '/proc/%d/environ' % os.getppid(), '/proc/1/cmdline',\n"
        "             '/proc/self/environ']:\n"
        "    try:\n"
        "        print(path, open(path, 'rb').read())\n"
        "    except OSError as e:\n"
        "        print(path, type(e).__name__)\n"
        "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()) == [os.getpid()])\n"
    )
    result, trace = attack(sb, code, guard, mounts_before)
    assert SECRET.encode() not in result.output
    lines = trace["stdout"].splitlines()
    assert lines[0] == "None"
    # the server's pid is not in its PID namespace; its parent is outside it (getppid() is 0)
    assert lines[1].endswith("FileNotFoundError") and lines[2] == "/proc/0/environ FileNotFoundError"
    assert lines[3].startswith("/proc/1/cmdline b'")  # pid 1 is itself:
    assert "gradstep.sandbox.zygote" in lines[3]  # the command line it was forked with
    assert lines[-1] == "True", "only its own process is visible in /proc"


def torch_file() -> str:
    import torch

    return torch.__file__


def listing_code(paths: list[str]) -> str:
    """Snippet code that prints, for each path, its listing or contents, or the error it gets."""
    return (
        "import os\n"
        f"for path in {paths!r}:\n"
        "    try:\n"
        "        print(path, sorted(os.listdir(path)) if os.path.isdir(path) else open(path).read()[:200])\n"
        "    except OSError as e:\n"
        "        print(path, type(e).__name__)\n"
    )


def test_the_hosts_files_are_not_there(both, guard, mounts_before):
    _, sb = both
    paths = ["/etc/passwd", "/etc/hostname", "/etc", "/home", "/var", "/run", "/srv", "/opt", "/mnt", "/boot"]
    assert not any(p.startswith(("/etc", "/home", "/var")) for p in sb.health()["visible"])
    _, trace = attack(sb, listing_code(paths), guard, mounts_before)
    assert trace["stdout"].splitlines() == [f"{p} FileNotFoundError" for p in paths]


def test_the_root_holds_only_the_interpreter_its_libraries_dev_proc_and_tmp(both, guard, mounts_before):
    _, sb = both
    visible = sb.health()["visible"]
    code = (
        "import os\n"
        "print(sorted(os.listdir('/')))\n"
        "print(sorted(os.listdir('/dev')))\n"
        "print(sorted(line.split()[4] for line in open('/proc/self/mountinfo')))\n"
    )
    _, trace = attack(sb, code, guard, mounts_before)
    top, dev, mounts = (ast.literal_eval(line) for line in trace["stdout"].splitlines())
    assert top == sorted({"dev", "proc", "tmp"} | {p.split("/")[1] for p in visible})
    assert dev == ["fd", "full", "null", "random", "stderr", "stdin", "stdout", "urandom", "zero"]
    devices = [f"/dev/{d}" for d in ("full", "null", "random", "urandom", "zero")]
    # a checkout under /tmp: its venv bound back into the run's /tmp, the way to it a read-only tmpfs
    rebound = [p for p in visible if p.startswith("/tmp/")]
    rebound += sorted({"/tmp/" + p.split("/")[2] for p in rebound})
    assert mounts == sorted(["/", "/proc", "/proc", "/tmp", *devices, *visible, *rebound])
    import torch

    assert any(torch.__file__.startswith(p + "/") for p in visible)  # site-packages


def test_the_sandbox_shows_its_own_host_name_not_the_hosts(both, guard, mounts_before):
    code = (
        "import ctypes, os, socket\n"
        "print(socket.gethostname(), os.uname().nodename)\n"
        "for path in ('/proc/sys/kernel/hostname', '/proc/sys/kernel/domainname', '/etc/hostname'):\n"
        "    try:\n"
        "        print(open(path).read().strip())\n"
        "    except OSError as e:\n"
        "        print(type(e).__name__)\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.sethostname(b'pwned', 5), ctypes.get_errno(), socket.gethostname())\n"
    )
    _, trace = attack(both[1], code, guard, mounts_before)
    assert trace["stdout"].splitlines() == [
        "gradstep gradstep",
        "FileNotFoundError",  # no /proc/sys (subset=pid), no /etc (the minimal root)
        "FileNotFoundError",
        "FileNotFoundError",
        "-1 1 gradstep",  # EPERM: seccomp, or no capability left
    ]
    assert socket.gethostname() not in trace["stdout"] or socket.gethostname() == "gradstep"
    assert os.uname().nodename == socket.gethostname()  # the server's own name is untouched


def test_inotify_and_fanotify_are_refused(full, guard, mounts_before):
    # A watch on the interpreter's or torch's files would say when another run (or the host) uses them.
    code = (
        "import ctypes, torch\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "for call in (lambda: libc.inotify_init(), lambda: libc.inotify_init1(0),\n"
        "             lambda: libc.inotify_add_watch(0, torch.__file__.encode(), 0xfff),\n"
        "             lambda: libc.fanotify_init(0, 0)):\n"
        "    print(call(), ctypes.get_errno())\n"
    )
    _, trace = attack(full, code, guard, mounts_before)
    assert trace["stdout"].splitlines() == ["-1 1"] * 4


def test_the_host_wide_mount_counter_is_refused_and_stat_still_works(full, guard, mounts_before):
    # A mount's 64-bit unique ID counts the host's mounts since boot: two runs' IDs would say how many
    # runs came between them. statx asked for it, statmount and listmount are refused; a plain statx
    # (what a library may use for os.stat) still answers.
    code = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "buf = ctypes.create_string_buffer(256)\n"
        "print(libc.statx(-100, b'/', 0, 0x4000, buf), ctypes.get_errno())\n"  # STATX_MNT_ID_UNIQUE
        "print(libc.statx(-100, b'/', 0, 0x1000 | 0x7ff, buf), os.stat('/').st_ino > 0)\n"  # STATX_MNT_ID
        "req = (ctypes.c_uint64 * 4)(32, 1, 0x1, 0)\n"
        "print(libc.syscall(457, req, buf, 256, 0), ctypes.get_errno())\n"  # statmount
        "print(libc.syscall(458, req, buf, 16, 0), ctypes.get_errno())\n"  # listmount
    )
    _, trace = attack(full, code, guard, mounts_before)
    assert trace["stdout"].splitlines() == ["-1 1", "0 True", "-1 1", "-1 1"]


def test_cgroupfs_and_other_runs_state_are_not_there(both, guard, mounts_before):
    _, sb = both
    # every cgroup file of the guard: both sandboxes' slots (other runs' pids and memory use)
    files = sorted(
        str(p)
        for d in guard.dirs
        for p in d.rglob("*")
        if p.name in ("cgroup.procs", "memory.usage_in_bytes")
    )
    assert any("/slot-" in f for f in files)
    paths = ["/sys", "/sys/fs/cgroup", "/sys/fs/cgroup/memory", *files[:20]]
    _, trace = attack(sb, listing_code(paths), guard, mounts_before)
    assert trace["stdout"].splitlines() == [f"{p} FileNotFoundError" for p in paths]


def test_another_checkout_of_the_project_is_not_there(both, guard, mounts_before):
    kind, sb = both
    other = Path(f"/var/tmp/gradstep-other-checkout-{os.getpid()}-{kind}")
    (other / "server" / "gradstep").mkdir(parents=True)
    try:
        (other / "pyproject.toml").write_text("[project]\nname = 'gradstep'\n")
        (other / "server" / "gradstep" / "__init__.py").write_text(f"SECRET = {SECRET!r}\n")
        for p in [other, *other.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)  # readable by anyone on the host
        paths = [
            str(other),
            str(other / "pyproject.toml"),
            str(other / "server" / "gradstep" / "__init__.py"),
        ]
        result, trace = attack(sb, listing_code(paths), guard, mounts_before)
        assert SECRET.encode() not in result.output
        assert trace["stdout"].splitlines() == [f"{p} FileNotFoundError" for p in paths]
    finally:
        for p in sorted(other.rglob("*"), key=lambda p: -len(p.parts)):
            p.rmdir() if p.is_dir() else p.unlink()
        other.rmdir()


def test_modules_imported_after_the_uid_drop_are_found(full, guard, mounts_before):
    # Not imported by the zygote: read from the minimal root by the run's uid. sqlite3 loads a
    # system library the zygote never mapped.
    names = ["sqlite3", "numpy.polynomial", "torch.distributions", "zoneinfo", "csv", "torch.utils.data"]
    code = (
        "import importlib, sys\n"
        f"names = {names!r}\n"
        "lazy = [n for n in names if n not in sys.modules]\n"
        "print(lazy)\n"
        "for n in names:\n"
        "    importlib.import_module(n)\n"
        "import sqlite3, numpy.polynomial\n"
        "print(sqlite3.connect(':memory:').execute('select 2 * 21').fetchone()[0])\n"
        "print(numpy.polynomial.Polynomial([1, 2])(3))\n"
    )
    _, trace = attack(full, code, guard, mounts_before)
    assert trace["error"] is None, trace["error"]
    lazy, answer, value = trace["stdout"].splitlines()
    assert {"sqlite3", "numpy.polynomial"} <= set(ast.literal_eval(lazy))
    assert (answer, value) == ("42", "7.0")


def test_a_dataloader_asking_for_worker_processes_loads_in_the_run_itself(full, guard, mounts_before):
    # Workers are processes, which seccomp refuses: the run loads in its own process instead, with
    # the batches plain torch's workers give (tests/tracer/test_real_code_offline.py has the rest).
    code = (
        "import torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "torch.manual_seed(0)\n"
        "data = TensorDataset(torch.randn(8, 3), torch.randn(8, 1))\n"
        "w = torch.zeros(3, 1, requires_grad=True)\n"
        "for x, y in DataLoader(data, batch_size=4, shuffle=True, num_workers=2):\n"
        "    ((x @ w - y) ** 2).mean().backward()\n"
        "print(w.grad.flatten().tolist())\n"
    )
    _, trace = attack(full, code, guard, mounts_before)
    assert trace["error"] is None, trace["error"]
    assert trace["stdout"] == truth.run_plain(code).stdout
    assert [
        n for n in trace["notes"] if n.startswith("The DataLoader at line(s) 6 asked for worker processes")
    ]


# -- writing where it must not ------------------------------------------------------


def test_writing_outside_the_work_dir_fails(both, guard, mounts_before):
    kind, sb = both
    marker = f"gradstep-attack-{os.getpid()}-{kind}"
    site = str(Path(torch_file()).parents[1])  # site-packages: visible, read-only
    targets = [
        f"/{marker}",
        f"{site}/{marker}",
        f"/var/tmp/{marker}",
        f"/dev/shm/{marker}",
        str(REPO / marker),
        str(REPO / "server" / marker),
    ]
    code = write_attempts(targets, f"/tmp/{marker}")  # then one file in its own private /tmp
    _, trace = attack(sb, code, guard, mounts_before)
    lines = trace["stdout"].splitlines()
    # EROFS: the minimal root and what is bound into it are read-only; ENOENT: the host's
    # /var/tmp, /dev/shm and the repo are not in it (for a checkout under /tmp with its venv,
    # the read-only way to the venv is: EROFS)
    assert lines[:4] == ["OSError 30"] * 2 + ["FileNotFoundError 2"] * 2
    assert all(line in ("FileNotFoundError 2", "OSError 30") for line in lines[4:6]), lines
    assert lines[6:] == [work_dir_listing(marker, sb.health()["visible"])]
    for path in [*targets, f"/tmp/{marker}"]:
        assert not os.path.exists(path), path


def test_filling_the_work_dir_beyond_its_size_fails(full, guard, mounts_before):
    code = (
        "n = 0\nwhile True:\n    with open(f'f{n}', 'wb') as f:\n        f.write(b'x' * 2**20)\n    n += 1\n"
    )
    _, trace = attack(full, code, guard, mounts_before)
    assert error_of(trace) == ("OSError", "[Errno 28] No space left on device")


def test_one_file_larger_than_the_work_dir_fails(full, guard, mounts_before):
    code = "with open('big', 'wb') as f:\n    for _ in range(100):\n        f.write(b'x' * 2**20)\n"
    _, trace = attack(full, code, guard, mounts_before)
    assert error_of(trace)[0] == "OSError"
    assert error_of(trace)[1] in ("[Errno 27] File too large", "[Errno 28] No space left on device")


# -- new processes ------------------------------------------------------------------


def test_fork_bomb_fails(both, guard, mounts_before):
    kind, sb = both
    code = "import os\nwhile True:\n    if os.fork() == 0:\n        while True:\n            pass\n"
    result, trace = attack(sb, code, guard, mounts_before)
    if kind == "full":
        assert error_of(trace) == ("PermissionError", "[Errno 1] Operation not permitted")  # seccomp
    else:
        # the pids cgroup (and RLIMIT_NPROC) stop the bomb; its children die with the run
        assert error_of(trace) == ("BlockingIOError", "[Errno 11] Resource temporarily unavailable")


PROCESSES_NOTE = "A run here starts no processes"


def test_subprocess_run_fails(full, guard, mounts_before):
    _, trace = attack(full, "import subprocess\nsubprocess.run(['/bin/true'])", guard, mounts_before)
    assert error_of(trace) == ("PermissionError", "[Errno 1] Operation not permitted")
    assert [n for n in trace["notes"] if n.startswith(PROCESSES_NOTE)], trace["notes"]


def test_a_process_pool_fails_and_the_note_says_to_do_the_work_in_the_run(full, guard, mounts_before):
    code = (
        "import multiprocessing as mp\n"
        "def square(v):\n"
        "    return v * v\n"
        "if __name__ == '__main__':\n"
        "    with mp.Pool(2) as pool:\n"
        "        print(pool.map(square, [1, 2, 3]))\n"
    )
    _, trace = attack(full, code, guard, mounts_before)
    assert trace["error"] is not None and trace["error"]["line"] == 5
    assert [n for n in trace["notes"] if n.startswith(PROCESSES_NOTE)], trace["notes"]
    assert not [n for n in trace["notes"] if "is not here" in n], "no missing-file note for a semaphore"


def test_os_system_and_libc_system_fail(both, guard, mounts_before):
    kind, sb = both
    marker = f"/var/tmp/gradstep-system-{os.getpid()}-{kind}"
    code = (
        "import ctypes, os\n"
        f"print(os.system('echo pwned > {marker}'))\n"
        f"print(ctypes.CDLL(None).system(b'echo pwned > {marker}'))\n"
    )
    _, trace = attack(sb, code, guard, mounts_before)
    codes = [int(x) for x in trace["stdout"].split()]
    if kind == "full":
        assert codes == [32512, 32512]  # exit status 127: the shell could not even start
    else:
        assert all(c != 0 for c in codes)  # the shell ran, as the slot's uid, on a read-only /var/tmp
    assert not os.path.exists(marker)


def test_thread_bomb_is_capped(full, guard, mounts_before):
    code = (
        "import threading, time\n"
        "threads = []\n"
        "while True:\n"
        "    t = threading.Thread(target=time.sleep, args=(60,), daemon=True)\n"
        "    t.start()\n"
        "    threads.append(t)\n"
    )
    _, trace = attack(full, code, guard, mounts_before)
    assert error_of(trace) == ("RuntimeError", "can't start new thread")  # pids cgroup / RLIMIT_NPROC


def test_threads_and_matmul_still_work(full, guard, mounts_before):
    code = (
        "import threading, torch\n"
        "torch.set_num_threads(2)\n"
        "a = torch.randn(256, 256, requires_grad=True)\n"
        "(a @ a).sum().backward()\n"
        "t = threading.Thread(target=print, args=('thread ran',))\n"
        "t.start(); t.join()\n"
    )
    _, trace = attack(full, code, guard, mounts_before)
    assert trace["error"] is None and trace["stdout"] == "thread ran\n"


# -- memory -------------------------------------------------------------------------


def test_a_40_gb_tensor_is_refused(full, guard, mounts_before):
    _, trace = attack(full, "import torch\nx = torch.ones(10**10)", guard, mounts_before)
    kind, message = error_of(trace)
    # refused by RLIMIT_DATA: torch raises, and the run ends as the memory limit, with what it did
    assert (trace["status"], trace["limit"], kind) == ("limit", "memory", "RuntimeError")
    # the value the job's spec gives the tracer (payload_for: the default settings')
    assert f"needed more memory than a run may use here, {Settings().memory_mb:,} MB" in message


def test_a_growing_memory_bomb_is_refused(full, guard, mounts_before):
    # bytes(n) is calloc'd and never written, so the bomb costs no CPU time: RLIMIT_DATA is the only
    # limit in its reach (a bomb that writes its pages is in test_memory_limit.py, where the CPU
    # limit is far away: here, 2 s, a fresh machine's first touch of 450 MB can reach it first)
    code = "chunks = []\nwhile True:\n    chunks.append(bytes(50 * 2**20))\n"
    _, trace = attack(full, code, guard, mounts_before)
    assert (trace["status"], trace["limit"], error_of(trace)[0]) == ("limit", "memory", "MemoryError")


def test_a_shared_memory_mmap_bomb_hits_the_memory_limit(full, guard, mounts_before):
    # Shared mappings are not data: only the memory cgroup stops this one. Its pages are written by
    # one C call: a Python loop over them (traced) reached the 2 s CPU stop first on a busy machine
    # (424 MB written by 1.5 s of CPU).
    code = (
        "import ctypes, mmap\nm = mmap.mmap(-1, 2**31)\n"
        "ctypes.memset(ctypes.addressof(ctypes.c_char.from_buffer(m)), 1, 2**31)\n"
    )
    result, _ = attack(full, code, guard, mounts_before)
    assert (result.status, result.limit, result.signal) == ("limit", "memory", "SIGKILL")
    assert "512 MB" in result.detail


# -- time ---------------------------------------------------------------------------


# The tracer stops a snippet's own loop short of the limit (tracer/limits.py LimitWatch); code it does
# not instrument (exec'd) runs on until the sandbox's RLIMIT_CPU ends it.
SPIN = "exec('while True:\\n    pass\\n')\n"


def test_an_infinite_loop_hits_the_cpu_limit(full, guard, mounts_before):
    # SIGKILL at the limit: the first process of a PID namespace ignores SIGXCPU
    result, _ = attack(full, SPIN, guard, mounts_before)
    assert (result.status, result.limit, result.signal) == ("limit", "cpu", "SIGKILL")


def test_ignoring_sigterm_and_sigxcpu_does_not_help(full, guard, mounts_before):
    code = (
        "import signal\n"
        "for s in (signal.SIGTERM, signal.SIGXCPU, signal.SIGINT):\n"
        "    signal.signal(s, signal.SIG_IGN)\n" + SPIN
    )
    result, _ = attack(full, code, guard, mounts_before)
    assert (result.status, result.limit, result.signal) == ("limit", "cpu", "SIGKILL")  # RLIMIT_CPU hard


def test_sleeping_forever_hits_the_wall_limit(full, guard, mounts_before):
    result, _ = attack(full, "import time\ntime.sleep(10**6)", guard, mounts_before)
    assert (result.status, result.limit, result.signal) == ("timeout", "wall", "SIGKILL")


def test_deep_recursion_is_a_recursion_error(full, guard, mounts_before):
    _, trace = attack(full, "def f(n):\n    return f(n + 1)\nf(0)\n", guard, mounts_before)
    assert error_of(trace)[0] == "RecursionError"


def test_c_stack_overflow_is_a_crash(full, guard, mounts_before):
    code = "import json, sys\nsys.setrecursionlimit(10**6)\njson.loads('[' * 10**6 + ']' * 10**6)\n"
    result, _ = attack(full, code, guard, mounts_before)
    assert (result.status, result.signal) == ("crashed", "SIGSEGV")
    assert "SIGSEGV" in result.detail


# -- output -------------------------------------------------------------------------


def test_printing_100_mb_is_capped(full, guard, mounts_before):
    code = (
        "import os\n"
        "print('x' * 10**8)\n"
        "os.write(1, b'y' * 10**8)\n"
        "os.write(2, b'z' * 10**8)\n"
        "print(os.readlink('/proc/self/fd/1'), os.readlink('/proc/self/fd/2'))\n"
    )
    result, trace = attack(full, code, guard, mounts_before)
    assert len(result.output) < 1 << 20  # the tracer keeps the first 64k characters
    assert trace["stdout"].startswith("x" * 1000)
    assert "y" not in trace["stdout"] and "z" not in trace["stdout"]  # fds 1 and 2 are /dev/null


def test_a_forged_giant_result_header_is_an_output_limit(full, guard, mounts_before):
    code = "import os\nos.write(3, b'R' + (2**40).to_bytes(8, 'little'))\nimport time\ntime.sleep(60)\n"
    result, _ = attack(full, code, guard, mounts_before)
    assert (result.status, result.limit) == ("limit", "output")


def test_junk_written_to_every_fd_is_a_malformed_result(full, guard, mounts_before):
    code = "import os\nfor fd in range(3, 1024):\n    try:\n        os.write(fd, b'junk' * 100)\n    except OSError:\n        pass\n"
    result, _ = attack(full, code, guard, mounts_before)
    assert result.status == "crashed" and "malformed" in result.detail


def test_closing_every_fd_loses_only_this_result(full, guard, mounts_before):
    result, _ = attack(full, "import os\nos.closerange(3, 1024)\n", guard, mounts_before)
    assert result.status == "crashed" and "without a result" in result.detail


# -- other processes ----------------------------------------------------------------


def test_killing_the_parent_the_zygote_and_pid_1_fails(both, guard, mounts_before):
    _, sb = both
    zygote = sb.health()["zygote_pid"]
    code = (
        "import os, signal\n"
        f"for pid in (os.getppid(), {zygote}, {os.getpid()}, 1, -1):\n"
        "    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n"
        "        print(pid, 'killed')\n"
        "    except OSError as e:\n"
        "        print(pid, type(e).__name__)\n"
    )
    _, trace = attack(sb, code, guard, mounts_before)  # checks the zygote is the same one
    lines = trace["stdout"].splitlines()
    # In its own PID namespace: getppid() is 0 (kill(0) is its own process group, itself alone), the
    # zygote's and the server's pids name nothing, pid 1 is itself. Without seccomp a signal to
    # itself "succeeds" but is dropped: the first process of a namespace ignores, from inside, every
    # signal it has no handler for, SIGKILL too. What counts: the zygote and this process live on.
    assert lines[0] in ("0 PermissionError", "0 killed")
    assert lines[1].endswith(("PermissionError", "ProcessLookupError"))  # seccomp / not in its namespace
    assert lines[2].endswith(("PermissionError", "ProcessLookupError"))
    assert lines[3] in ("1 PermissionError", "1 killed")
    # kill(-1) skips itself: there is no other process to reach
    assert lines[4].endswith(("PermissionError", "ProcessLookupError"))


def test_kill_of_its_own_process_group_stays_inside(no_seccomp, guard, mounts_before):
    # Without seccomp, kill(0) reaches the process group: setsid makes that the child alone, and as
    # the first process of its PID namespace it drops a SIGKILL sent from inside (attack() checks
    # the zygote and the spares are unharmed).
    code = "import os, signal\nos.kill(0, signal.SIGKILL)\nprint('still here')\n"
    result, trace = attack(no_seccomp, code, guard, mounts_before)
    assert result.status == "ok" and trace["stdout"] == "still here\n"


def test_ptrace_attach_to_the_zygote_fails(both, guard, mounts_before):
    _, sb = both
    zygote = sb.health()["zygote_pid"]
    code = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"print(libc.ptrace(16, {zygote}, 0, 0), ctypes.get_errno())\n"  # PTRACE_ATTACH
    )
    _, trace = attack(sb, code, guard, mounts_before)
    assert trace["stdout"].split() in (["-1", "1"], ["-1", "3"])  # EPERM (seccomp, uid) / ESRCH (hidden)


def test_a_new_user_namespace_is_refused(full, guard, mounts_before):
    code = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.unshare(0x10000000), ctypes.get_errno())\n"  # CLONE_NEWUSER
    )
    _, trace = attack(full, code, guard, mounts_before)
    assert trace["stdout"].split() == ["-1", "1"]


PRIVILEGES = (
    "import os\n"
    "status = dict(line.split(':', 1) for line in open('/proc/self/status'))\n"
    "for key in ('Uid', 'Gid', 'Groups', 'CapEff', 'CapPrm', 'CapInh', 'CapBnd', 'CapAmb', 'NoNewPrivs',\n"
    "            'Seccomp'):\n"
    "    print(key, ' '.join(status[key].split()))\n"
    "print(os.getsid(0) == os.getpid())\n"
    "print(open('/proc/self/cgroup').read())\n"
)


def check_privileges(kind: str, trace: dict) -> int:
    """What PRIVILEGES printed: a slot's uid, nothing else. Returns the slot."""
    out = dict(line.split(" ", 1) for line in trace["stdout"].splitlines()[:10])
    # the uid of the slot it ran in (whichever was free longest)
    slot = int(out["Uid"].split()[0]) - UIDS[kind]
    assert slot in range(SLOTS)
    uid = str(UIDS[kind] + slot)
    assert out["Uid"] == f"{uid} {uid} {uid} {uid}" and out["Gid"] == f"{uid} {uid} {uid} {uid}"
    assert out["Groups"] == ""
    caps = [out[key] for key in ("CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb")]
    assert caps == ["0000000000000000"] * 5  # every set, bounding and ambient too
    assert out["NoNewPrivs"] == "1"
    assert out["Seccomp"] == ("2" if kind == "full" else "0")
    assert "True" in trace["stdout"]  # its own session
    # its own cgroup namespace: the names of the server's cgroups are not shown (that it runs in
    # its slot's cgroups is checked from outside, tests/sandbox/test_sandbox_runner.py)
    cgroups = {line.split(":")[1]: line.split(":")[2] for line in trace["stdout"].split("True\n")[1].split()}
    assert cgroups["memory"] == cgroups["pids"] == "/"
    return slot


def test_every_slot_confines_its_run_alike_the_extra_ones_too(both, guard, mounts_before):
    # A run takes the slot free longest, so one run after another visits every slot.
    kind, sb = both
    assert sb.slots == SLOTS
    seen = set()
    for _ in range(SLOTS):
        settle(sb)
        result = sb.run(payload_for(PRIVILEGES))
        assert result.status == "ok", result.detail
        seen.add(check_privileges(kind, orjson.loads(result.output)))
    assert seen == set(range(SLOTS))
    attack(sb, "print('and a normal run after')", guard, mounts_before)  # clean afterwards


def test_the_child_has_no_privileges_left(both, guard, mounts_before):
    kind, sb = both
    _, trace = attack(sb, PRIVILEGES, guard, mounts_before)
    check_privileges(kind, trace)


def process_named(name: str) -> int:
    """The host pid of the one process whose name (comm) is ``name``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == name:
                found.append(int(entry.name))
        except OSError:
            pass
    assert len(found) == 1, found
    return found[0]


def test_a_run_cannot_raise_its_cpu_weight(both, guard, mounts_before):
    # The children together weigh one server process (the sandbox's cpu cgroup): a snippet that
    # would outweigh the server tries a lower nice value, a session (and autogroup) of its own,
    # its autogroup's nice value and the cgroup files, then answers early and lives on while the
    # test looks at it from outside.
    kind, sb = both
    if sb.health()["cpu_group"] != "active":
        pytest.skip(f"the cpu group is {sb.health()['cpu_group']} here")
    name = f"weight-{os.getpid() % 10000}-{kind[:3]}"  # at most 15 bytes
    code = (
        "import os, time\n"
        "tried = []\n"
        "def attempt(name, call):\n"
        "    try:\n"
        "        call()\n"
        "        tried.append(f'{name} done')\n"
        "    except OSError as e:\n"
        "        tried.append(f'{name} {type(e).__name__}')\n"
        "attempt('nice', lambda: os.setpriority(os.PRIO_PROCESS, 0, -10))\n"
        "attempt('setsid', os.setsid)\n"
        "attempt('autogroup', lambda: open('/proc/self/autogroup', 'w').write('-10'))\n"
        "attempt('cgroupfs', lambda: open('/sys/fs/cgroup/cpu/cgroup.procs', 'w').write(str(os.getpid())))\n"
        # its pid is 1 in its own namespace: a name the test finds it by from outside
        "import ctypes\n"
        f"ctypes.CDLL(None).prctl(15, {name!r}.encode(), 0, 0, 0)\n"  # PR_SET_NAME
        "out = ' / '.join([str(os.getpid()), *tried]).encode()\n"
        "os.write(3, b'R' + len(out).to_bytes(8, 'little') + out)\n"
        "time.sleep(1.0)\n"
    )
    zygote = sb.health()["zygote_pid"]
    result = sb.run(payload_for(code))
    assert result.status == "ok", result.detail
    own_pid, *tried = result.output.decode().split(" / ")
    assert own_pid == "1"
    pid = process_named(name)
    assert tried[:2] == ["nice PermissionError", "setsid PermissionError"]
    assert tried[2] in ("autogroup PermissionError", "autogroup FileNotFoundError", "autogroup OSError")
    assert tried[3] in ("cgroupfs FileNotFoundError", "cgroupfs PermissionError")
    assert os.getpriority(os.PRIO_PROCESS, int(pid)) == 0
    group = cgroup_of("cpu", zygote)
    assert cgroup_of("cpu", int(pid)) == group != cgroup_of("cpu", os.getpid()), (
        "still in the sandbox's cpu group"
    )
    assert int(Path("/sys/fs/cgroup/cpu", group.strip("/"), "cpu.shares").read_text()) == CPU_SHARES
    attack(sb, "print('after')", guard, mounts_before)  # clean afterwards


# -- more at once than the workers -------------------------------------------------------


def test_more_snippets_than_workers_never_run_at_once(full, guard, mounts_before):
    # workers + 1 sleeping snippets at once: there are slots for all, but one waits for a run to end
    settle(full)
    code = "import time\nt = time.time()\ntime.sleep(0.8)\nprint(t, time.time())\n"
    results = at_once(full, [payload_for(code + f"# {i}\n") for i in range(WORKERS + 1)])
    assert [r.status for r in results] == ["ok"] * (WORKERS + 1), [r.detail for r in results]
    spans = [tuple(map(float, orjson.loads(r.output)["stdout"].split())) for r in results]
    assert most_at_once(spans) <= WORKERS  # (== on any machine not too busy to start both)
    assert max(r.timings["queue"] for r in results) > 0
    attack(full, "print('after')", guard, mounts_before)  # clean afterwards


def test_answering_early_and_running_on_does_not_free_a_worker(full, guard, mounts_before):
    # Each snippet writes a result of its own to the result pipe (fd 3) at once, then keeps running:
    # its run answers, but the run still counts until its child is gone, so the next one waits.
    settle(full)
    t0 = time.time()
    code = "import os, time\nos.write(3, b'R' + (2).to_bytes(8, 'little') + b'{}')\ntime.sleep(1.0)\n"
    early = at_once(full, [payload_for(code + f"# {i}\n") for i in range(WORKERS)])
    assert [(r.status, r.output) for r in early] == [("ok", b"{}")] * WORKERS
    assert full.health()["spares"] >= 1, "the free slots have their spares"
    result = full.run(payload_for("import time\nprint(time.time())\n"))
    assert float(orjson.loads(result.output)["stdout"]) >= t0 + 1.0, "it ran while both lingered"
    attack(full, "print('after')", guard, mounts_before)  # clean afterwards: the lingerers are gone


# -- the zygote's memory ------------------------------------------------------------


def skip_without_huge_pages() -> None:
    try:
        thp = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        pytest.skip("no transparent huge pages here")
    if "[never]" in thp:
        pytest.skip("transparent huge pages are off here")


def test_the_zygote_is_backed_by_huge_pages(full):
    # Huge pages make forks and exits cheap; they must not loosen a memory limit
    # (the memory attacks above run against this same zygote).
    skip_without_huge_pages()
    assert full.health()["zygote_huge_pages_mb"] >= 64


HUGE_KB = "int(next(l.split()[1] for l in open('/proc/self/smaps_rollup') if l.startswith('AnonHugePages')))"


def test_a_childs_new_heap_is_backed_by_huge_pages(full):
    # A big model's run faults its tensors in 2 MB at a time instead of 4 KB (malloc's hugetlb
    # tunable, set for the zygote and inherited): what a snippet allocates is huge-page backed.
    skip_without_huge_pages()
    code = f"import torch\nbefore = {HUGE_KB}\nt = torch.ones(16 << 20)\nprint({HUGE_KB} - before)\n"
    result = full.run(payload_for(code))
    assert result.status == "ok", result.detail
    grown_kb = int(orjson.loads(result.output)["stdout"])
    assert grown_kb >= 32 << 10, "most of the 64 MB tensor is in huge pages"


def test_a_2_million_node_graph_ends_with_a_clear_result(full, guard, mounts_before):
    code = "import torch\nx = torch.ones(1, requires_grad=True)\ny = x\nfor _ in range(2_000_000):\n    y = y * 1.0001\n"
    result, trace = attack(full, code, guard, mounts_before)
    if result.status == "ok":  # the tracer's node cap held
        assert "nodes" in trace["truncated"] and len(trace["nodes"]) <= 20_000
    else:  # or a limit stopped it first: never a crash or a hang
        assert (result.status, result.limit) in {
            ("limit", "memory"),
            ("limit", "cpu"),
            ("timeout", "wall"),
        }, result
