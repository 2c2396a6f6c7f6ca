"""What a run sees of the host's processes and of the kernel's host-wide state through /proc.

Each test runs a snippet, as a stranger would paste it, through the real target
(the tracer) in a sandbox with every layer, inside a guard cgroup, and checks what
it read: its own PID namespace (it is pid 1 and the only process there), no
host-wide /proc file (load, memory, uptime, kernel symbols...), a mount table
naming only what its own root holds. Then that the sandbox still runs a normal
snippet and nothing is left behind, as in test_sandbox_attacks.py, and that torch
trains there as in plain PyTorch.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import gradstep.sandbox
import orjson
import pytest
from gradstep.runs import payload_for, sandbox_config
from gradstep.sandbox import Sandbox
from gradstep.sandbox.mounts import under
from gradstep.settings import Settings
from testkit import truth
from testkit.sandbox_guard import Guard, guard_fixture, guard_unavailable, mount_points, settle, uid_base

pytestmark = pytest.mark.skipif(guard_unavailable() is not None, reason=str(guard_unavailable()))

REPO = Path(gradstep.sandbox.__file__).resolve().parents[3]
NORMAL = "import torch\nx = torch.ones(3, requires_grad=True)\n(x * x).sum().backward()\nprint(x.grad)"
# Host-wide files of /proc (runc's masked paths, what LXCFS virtualizes, and more): each tells
# about the machine and so about other users' runs (load, memory, pids, uptime, interrupts, I/O).
HOST_WIDE = [
    "/proc/loadavg", "/proc/meminfo", "/proc/uptime", "/proc/stat", "/proc/config.gz", "/proc/vmstat",
    "/proc/diskstats", "/proc/swaps", "/proc/kallsyms", "/proc/modules", "/proc/interrupts",
    "/proc/softirqs", "/proc/pressure/cpu", "/proc/pressure/memory", "/proc/pressure/io",
    "/proc/partitions", "/proc/zoneinfo", "/proc/buddyinfo", "/proc/slabinfo", "/proc/pagetypeinfo",
    "/proc/vmallocinfo", "/proc/iomem", "/proc/ioports", "/proc/locks", "/proc/key-users", "/proc/keys",
    "/proc/timer_list", "/proc/sched_debug", "/proc/cmdline", "/proc/version", "/proc/cpuinfo",
    "/proc/kcore", "/proc/kmsg", "/proc/sysrq-trigger", "/proc/sys/kernel/random/boot_id",
    "/proc/sys/kernel/hostname", "/proc/sys/kernel/pid_max", "/proc/sys/kernel/ns_last_pid",
    "/proc/cgroups", "/proc/filesystems", "/proc/devices", "/proc/misc", "/proc/consoles",
]  # fmt: skip


guard = guard_fixture(memory_mb=4096, pids=200)


@pytest.fixture(scope="module")
def mounts_before():
    return mount_points()


@pytest.fixture(scope="module")
def sb(guard, mounts_before):
    config = sandbox_config(  # the production target and preloads: what the server runs
        Settings(),
        workers=1,
        extra_slots=1,
        memory_mb=512,
        cpu_seconds=5,
        wall_seconds=15,
        tmp_mb=8,
        max_tasks=32,
        cgroup_parent=guard.parent,
        uid_base=uid_base(1150),  # two slots, clear of the other test modules
    )
    box = Sandbox(config)
    try:
        box.start()
        guard.hold(box.health()["zygote_pid"])
        assert box.health()["layers"]["pidns"] == "active"
        yield box
    finally:
        box.close()


def run(sb: Sandbox, code: str, guard: Guard, mounts_before: set[str]) -> dict:
    """Run a snippet; check the sandbox is healthy and clean after it. Returns its trace."""
    zygote = sb.health()["zygote_pid"]
    result = sb.run(payload_for(code))
    assert result.status == "ok", result.detail
    trace = orjson.loads(result.output)
    assert trace["error"] is None, trace["error"]
    health = sb.health()
    assert health["zygote"] and health["zygote_pid"] == zygote
    normal = sb.run(payload_for(NORMAL))
    assert normal.status == "ok", normal.detail
    h = settle(sb)
    assert guard.tasks() <= {h["zygote_pid"], *h["spare_pids"]}
    assert mount_points() == mounts_before
    return trace


def test_the_run_is_pid_1_and_the_only_process_in_its_proc(sb, guard, mounts_before):
    code = (
        "import os\n"
        "print(os.getpid(), os.getppid())\n"
        "print(sorted(p for p in os.listdir('/proc') if p.isdigit()), os.readlink('/proc/self'))\n"
        "print(sorted(os.listdir('/proc/1/task')) == [str(t) for t in sorted(os.listdir('/proc/self/task'))])\n"
        "print([line.split()[1:] for line in open('/proc/self/status') if line.startswith('NSpid')])\n"
    )
    lines = run(sb, code, guard, mounts_before)["stdout"].splitlines()
    assert lines[0] == "1 0"  # its parent, the zygote, is outside its namespace
    assert lines[1] == "['1'] 1"
    assert lines[2] == "True"  # its threads are its own
    assert lines[3] == "[['1']]"  # one pid: no pid of an outer namespace shows


def test_no_host_pid_can_be_named(sb, guard, mounts_before):
    # The zygote, the server, the host's init and a busy host pid range are simply not there.
    zygote = sb.health()["zygote_pid"]
    # pid 1 is left out: in the run's namespace it is the run itself (the test's parent may be the
    # host's init, when pytest runs detached)
    pids = [p for p in (zygote, os.getpid(), os.getppid(), *range(2, 300)) if p != 1]
    code = (
        "import os\n"
        f"print([pid for pid in {pids!r} if os.path.exists(f'/proc/{{pid}}')])\n"
        "print(open('/proc/1/cmdline', 'rb').read() == open('/proc/self/cmdline', 'rb').read())\n"
    )
    lines = run(sb, code, guard, mounts_before)["stdout"].splitlines()
    assert lines == ["[]", "True"]  # pid 1 is the run itself, not the host's init


def test_the_host_wide_proc_files_are_not_there(sb, guard, mounts_before):
    there = [p for p in HOST_WIDE if os.path.exists(p)]
    # the host has them: the test means something
    assert "/proc/loadavg" in there and "/proc/meminfo" in there
    code = (
        "import os\n"
        f"for path in {HOST_WIDE!r}:\n"
        "    try:\n"
        "        print(path, repr(open(path, 'rb').read(4096)))\n"
        "    except OSError as e:\n"
        "        print(path, type(e).__name__)\n"
        "print(sorted(os.listdir('/proc')))\n"
    )
    *lines, top = run(sb, code, guard, mounts_before)["stdout"].splitlines()
    assert lines == [f"{p} FileNotFoundError" for p in HOST_WIDE]
    assert ast.literal_eval(top) == ["1", "self", "thread-self"]


def test_the_machines_load_memory_and_process_count_are_refused_by_system_call_too(sb, guard, mounts_before):
    # sysinfo(2) says what /proc/loadavg, meminfo and stat say: seccomp refuses it
    code = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "info = ctypes.create_string_buffer(256)\n"
        "print(libc.sysinfo(info), ctypes.get_errno(), set(info.raw))\n"
    )
    out = run(sb, code, guard, mounts_before)["stdout"]
    assert out == "-1 1 {0}\n"  # EPERM, nothing written


def test_the_mount_table_names_only_what_the_runs_root_holds(sb, guard, mounts_before):
    # /proc/self/mountinfo is the run's own mount namespace: its minimal root. Every path it names
    # (where a mount comes from and where it is) is one the run sees anyway; none of the host's
    # mounts, not the checkout under test, not the server's cgroupfs or /sys.
    code = (
        "import os\n"
        "rows = [line.split() for line in open('/proc/self/mountinfo')]\n"
        "print(sorted({r[3] for r in rows} | {r[4] for r in rows}))\n"
        "print(open('/proc/self/mounts').read().count(chr(10)) == len(rows))\n"
    )
    text = run(sb, code, guard, mounts_before)["stdout"]
    paths = ast.literal_eval(text.splitlines()[0])
    visible = sb.health()["visible"]
    assert text.splitlines()[1] == "True"
    # of the checkout, at most what it keeps visible (a venv inside it): not its source
    assert not any(under(p, str(REPO / "server")) for p in paths)
    assert all(any(under(p, v) for v in visible) for p in paths if under(p, str(REPO)))
    assert not any(p.startswith(("/sys", "/etc", "/home", "/var", "/run", "/mnt")) for p in paths)
    devices = [f"/{d}" for d in ("full", "null", "random", "urandom", "zero")]  # roots within /dev's fs
    for p in paths:
        assert p in ("/", "/proc", "/tmp", *devices, *(f"/dev{d}" for d in devices)) or any(
            p == v or p.startswith(v + "/") or v.startswith(p + "/") for v in visible
        ), p
    # and what the host mounts (its /proc/self/mountinfo) is not listed beyond what the run sees
    host_only = {line.split()[4] for line in open("/proc/self/mountinfo")} - {"/", "/proc", "/tmp"}
    host_only -= {v for v in visible} | {f"/dev{d}" for d in devices}
    assert not host_only & set(paths)


TRAIN = (
    "import os\n"
    "import torch\n"
    "from torch import nn\n"
    "from torch.utils.data import DataLoader, TensorDataset\n"
    "torch.manual_seed(0)\n"
    "data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))\n"
    "model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "for epoch in range(3):\n"
    "    for x, y in DataLoader(data, batch_size=8, shuffle=True):\n"
    "        opt.zero_grad()\n"
    "        loss = nn.functional.mse_loss(model(x), y)\n"
    "        loss.backward()\n"
    "        opt.step()\n"
    "    print(epoch, round(loss.item(), 6))\n"
    "print(model[0].weight.grad.abs().sum().item() > 0)\n"
)


def test_torch_trains_as_in_plain_pytorch(sb, guard, mounts_before):
    trace = run(sb, TRAIN, guard, mounts_before)
    assert trace["stdout"] == truth.run_plain(TRAIN).stdout


def test_cpu_and_thread_counts_are_still_found(sb, guard, mounts_before):
    # os.cpu_count() reads /sys (absent) then /proc/stat (absent): glibc falls back on the
    # affinity mask, which is the host's CPUs here. torch keeps the zygote's one thread.
    code = "import os, torch\nprint(os.cpu_count(), len(os.sched_getaffinity(0)), torch.get_num_threads())\n"
    lines = run(sb, code, guard, mounts_before)["stdout"].split()
    assert lines == [str(os.cpu_count()), str(len(os.sched_getaffinity(0))), "1"]
