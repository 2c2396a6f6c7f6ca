"""The server runs as an ordinary uid, as the image runs it, and every confinement layer holds.

No container engine here. The test builds what the Dockerfile builds (``container.ImageUser``: a
system user, a copy of the interpreter with the Dockerfile's file capabilities) and starts
`gradstep serve` as that user with the Dockerfile's GRADSTEP_* settings, in the emulated container
of server/testkit/container.py (a user namespace whose bounding set holds only the capabilities
deploy/docker-compose.yml adds, deploy/seccomp.json loaded), inside a guard cgroup with its own
memory and pids limits (server/testkit/sandbox_guard.py). Then real attacks through the HTTP API, and the
same snippet traced by a root server for comparison.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from gradstep.columns import rows_of
from gradstep.sandbox import capabilities
from testkit.container import (
    CAPS,
    ImageUser,
    compose_caps,
    image_env,
    image_file_caps,
    image_unavailable,
    wrapper,
)
from testkit.sandbox_guard import (
    MOUNT_POINTS,
    Guard,
    bound,
    guard_fixture,
    guard_unavailable,
    uid_base,
    work_dir_listing,
    write_attempts,
)

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from harness import Server, cmdline, descendants, proc_table  # noqa: E402

WHY_NOT = guard_unavailable() or image_unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))

# < 30 slots each; low offsets: the emulated container's user namespace maps uids 0-65535 only
UID_BASE = {"image": uid_base(400), "root": uid_base(450), "no_new_privs": uid_base(480)}
SECRET = f"nonroot-secret-{os.getpid()}"
ZERO = "0000000000000000"
SNIPPET = (
    "import torch\n"
    "x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)\n"
    "y = (x * x).sum()\n"
    "y.backward(retain_graph=True)\n"
    "y.backward()\n"
    "z = (x.exp() * 2).sum()\n"
    "z.backward()\n"
    "try:\n"
    "    z.backward()\n"
    "except RuntimeError as e:\n"
    "    print('second backward:', type(e).__name__)\n"
)


def in_guard(guard: Guard) -> list[str]:
    """A command prefix that joins the guard's cgroups, then executes the rest (so all it starts is inside)."""
    procs = " ".join(str(d / "cgroup.procs") for d in guard.dirs)
    return ["sh", "-c", f'for f in {procs}; do echo $$ > "$f"; done; exec "$@"', "sh"]


guard = guard_fixture(memory_mb=8192, pids=600)


@pytest.fixture(scope="module")
def image():
    with ImageUser() as made:
        yield made
    assert not made.exists()


@pytest.fixture(scope="module")
def private_dir(image):
    """A directory of the image's user only, holding a secret file; and a world-writable one."""
    top = Path(f"/var/tmp/nonroot-{os.getpid()}")
    top.mkdir(mode=0o755)
    (top / "private").mkdir(mode=0o700)
    (top / "private" / "secret").write_text(SECRET)
    (top / "private" / "secret").chmod(0o600)
    (top / "open").mkdir()
    (top / "open").chmod(0o777)
    for path in (top / "private", top / "private" / "secret", top / "open"):
        os.chown(path, image.uid, image.gid)
    yield top
    for path in sorted(top.rglob("*"), key=lambda p: -len(p.parts)):
        path.rmdir() if path.is_dir() else path.unlink()
    top.rmdir()


@pytest.fixture(scope="module")
def servers(guard, image, private_dir):
    """The image's server, a root server and the image's server under no_new_privs, started side
    by side: {name: Server, or the RuntimeError it failed to start with}."""
    env = {k: v for k, v in image_env().items() if k not in ("GRADSTEP_HOST", "GRADSTEP_PORT")}
    env["GRADSTEP_TEST_SECRET"] = SECRET
    user = f"{image.uid}:{image.gid}"
    made = {
        "image": Server(
            1, env, UID_BASE["image"], in_guard(guard) + wrapper(compose_caps(), user), image.python
        ),
        "root": Server(1, {"GRADSTEP_TEST_SECRET": SECRET}, UID_BASE["root"], in_guard(guard)),
        "no_new_privs": Server(
            1,
            env,
            UID_BASE["no_new_privs"],
            in_guard(guard) + wrapper(compose_caps(), user, no_new_privs=True),
            image.python,
        ),
    }
    for server in made.values():
        server.launch()
    ready: dict[str, Server | RuntimeError] = {}
    try:
        for name, server in made.items():
            try:
                ready[name] = server.wait_ready()
            except RuntimeError as e:
                ready[name] = e
        yield ready
    finally:
        left = {name: server.stop() for name, server in made.items()}
    for name, leftovers in left.items():
        assert leftovers.clean, f"{name}: " + "\n".join(leftovers.report())


def started(servers: dict, name: str) -> Server:
    server = servers[name]
    if isinstance(server, RuntimeError):
        raise server
    return server


@pytest.fixture(scope="module")
def image_server(servers) -> Server:
    return started(servers, "image")


def trace(server: Server, code: str) -> dict:
    r = httpx.post(f"{server.url}/api/trace", json={"code": code}, timeout=60, trust_env=False)
    assert r.status_code == 200, r.text
    return r.json()


def lines(server: Server, code: str) -> list[str]:
    """What the snippet printed, line by line (it must not have raised)."""
    t = trace(server, code)
    assert t["error"] is None, t["error"]
    return t["stdout"].splitlines()


def server_and_zygote(server: Server) -> tuple[int, int]:
    """Host pids of the `gradstep serve` process and of its zygote (the wrappers before the server
    name it in their arguments; the zygote's spare children share its command line)."""
    table = proc_table()
    ours = [pid for pid in descendants(server.pid, table) if cmdline(pid).startswith(server.executable)]
    serve = [pid for pid in ours if "gradstep serve" in cmdline(pid)]
    assert len(serve) == 1, serve
    zygote = [pid for pid in ours if table[pid][0] == serve[0] and "gradstep.sandbox.zygote" in cmdline(pid)]
    assert len(zygote) == 1, zygote
    return serve[0], zygote[0]


def visible_to_a_snippet(server: Server) -> list[str]:
    """What a snippet's minimal root holds (the interpreter, its libraries and packages)."""
    return bound(ast.literal_eval(lines(server, MOUNT_POINTS)[0]))


def caps_of(pid: int) -> dict[str, str]:
    return {name: f"{mask:016x}" for name, mask in capabilities.status(pid).items()}


def uids_of(pid: int) -> list[int]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return [int(u) for u in line.split()[1:]]
    raise AssertionError("no Uid line")


# -- the arrangement ----------------------------------------------------------------------------


def test_healthz_lists_every_layer_the_image_requires_as_active(image_server):
    layers = image_server.get_health()["sandbox"]["layers"]
    required = image_env()["GRADSTEP_REQUIRE_LAYERS"].split(",")
    assert {name: layers[name] for name in required} == dict.fromkeys(required, "active")


def test_the_server_and_its_zygote_run_as_the_image_user_with_the_file_capabilities_only(image_server, image):
    granted = f"{sum(1 << CAPS[c] for c in image_file_caps()):016x}"
    for pid in server_and_zygote(image_server):
        assert uids_of(pid) == [image.uid] * 4
        caps = caps_of(pid)
        assert (caps["CapEff"], caps["CapPrm"], caps["CapInh"], caps["CapAmb"]) == (
            granted,
            granted,
            ZERO,
            ZERO,
        )


def test_with_no_new_privs_the_server_refuses_to_start_saying_why(servers):
    refused = servers["no_new_privs"]
    assert isinstance(refused, RuntimeError), "it started under no_new_privs"
    assert "will not run untrusted snippets" in str(refused)
    assert "uid: unavailable" in str(refused)
    assert "root: unavailable: PermissionError: [Errno 1] unshare(CLONE_NEWNS)" in str(refused)
    assert "with no_new_privs set" in str(refused)


def test_a_snippet_traces_the_same_as_under_the_root_server(image_server, servers):
    ours, roots = trace(image_server, SNIPPET), trace(started(servers, "root"), SNIPPET)
    assert ours == roots
    scope: dict = {}
    exec(compile(SNIPPET, "<plain>", "exec"), scope)  # plain torch, in this process
    last = rows_of(ours)["steps"][-1]
    grad = next(t["grad"]["values"] for t in last["tensors"] if t["name"] == "x")
    assert grad == pytest.approx(scope["x"].grad.tolist(), rel=1e-4)  # the trace rounds the values it shows


# -- attacks through the HTTP API -----------------------------------------------------------------


def test_a_snippet_holds_no_capability_in_any_set(image_server):
    code = (
        "status = dict(line.split(':', 1) for line in open('/proc/self/status'))\n"
        "for key in ('Uid', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp'):\n"
        "    print(key, ' '.join(status[key].split()))\n"
    )
    out = dict(line.split(" ", 1) for line in lines(image_server, code))
    # the uid of the slot it ran in, one of workers + extra slots
    uid = int(out["Uid"].split()[0])
    assert uid in range(UID_BASE["image"], UID_BASE["image"] + image_server.health["sandbox"]["slots"])
    assert out["Uid"] == " ".join([str(uid)] * 4)
    assert [out[s] for s in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")] == [ZERO] * 5
    assert (out["NoNewPrivs"], out["Seccomp"]) == ("1", "2")


def test_a_snippet_cannot_read_the_servers_environment(image_server):
    # In the container's pid namespace the server is pid 1 and the zygote the snippet's parent; the
    # snippet is in a PID namespace of its own, whose pid 1 it is, and its parent is outside (pid 0).
    code = (
        "import os\n"
        "print(os.environ.get('GRADSTEP_TEST_SECRET'))\n"
        "for path in ['/proc/1/environ', f'/proc/{os.getppid()}/environ', '/proc/1/cmdline']:\n"
        "    try:\n"
        "        own = open(path.replace('/1/', '/self/'), 'rb').read()\n"
        "        print('its own' if open(path, 'rb').read() == own else 'another')\n"
        "    except OSError as e:\n"
        "        print(type(e).__name__)\n"
    )
    t = trace(image_server, code)
    assert SECRET not in str(t)
    # /proc/1/environ is its own, which it may not read either: started with file capabilities, it
    # is not dumpable after its uid change, so its /proc files are root's
    assert t["stdout"].splitlines() == ["None", "PermissionError", "FileNotFoundError", "its own"]


def test_a_snippet_cannot_read_a_file_only_the_server_user_may_read(image_server, private_dir, image):
    # The server user's private files are not in the minimal root; its interpreter is (the
    # zygote has it mapped), but readable by its group only: the snippet's uid cannot.
    paths = [str(private_dir / "private" / "secret"), str(private_dir / "private"), image.python]
    code = (
        "import os\n"
        f"for path in {paths!r}:\n"
        "    try:\n"
        "        print(os.listdir(path) if os.path.isdir(path) else open(path, 'rb').read(100))\n"
        "    except OSError as e:\n"
        "        print(type(e).__name__, e.errno)\n"
    )
    assert image.python in visible_to_a_snippet(image_server)
    t = trace(image_server, code)
    assert SECRET not in str(t)
    assert t["stdout"].splitlines() == ["FileNotFoundError 2", "FileNotFoundError 2", "PermissionError 13"]


def test_a_snippet_sees_only_the_minimal_root(image_server):
    code = (
        "import os\n"
        "print(sorted(os.listdir('/')))\n"
        "for path in ['/etc/passwd', '/home', '/var', '/sys/fs/cgroup', '/srv']:\n"
        "    print(path, os.path.exists(path))\n"
    )
    visible = visible_to_a_snippet(image_server)
    top, *rest = lines(image_server, code)
    assert top == str(sorted({"dev", "proc", "tmp"} | {p.split("/")[1] for p in visible}))
    assert rest == [f"{p} False" for p in ["/etc/passwd", "/home", "/var", "/sys/fs/cgroup", "/srv"]]


def test_a_snippet_cannot_write_outside_its_work_dir(image_server, private_dir):
    marker = f"nonroot-write-{os.getpid()}"
    targets = [str(private_dir / "open" / marker), f"/var/tmp/{marker}", f"/dev/shm/{marker}"]
    code = write_attempts(targets, marker)  # then one file in its own work dir
    # not in the minimal root (ENOENT); and where the root has a directory, read-only (EROFS)
    visible = visible_to_a_snippet(image_server)
    assert lines(image_server, code) == ["FileNotFoundError 2"] * 3 + [work_dir_listing(marker, visible)]
    assert lines(image_server, write_attempts(["/" + marker], marker))[0] == "OSError 30"
    for path in [*targets, f"/tmp/{marker}"]:
        assert not os.path.exists(path), path


def test_a_snippet_cannot_signal_the_server_or_its_zygote(image_server):
    zygote = server_and_zygote(image_server)[1]
    code = (
        "import os, signal\n"
        "for pid in (1, os.getppid(), -1):\n"
        "    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n"
        "        print('killed')\n"
        "    except OSError as e:\n"
        "        print(type(e).__name__)\n"
    )
    # pid 1 is the snippet itself (seccomp lets it signal only itself; pid 1 of its namespace drops
    # a SIGKILL it sends itself); its parent, the zygote, is outside its namespace: pid 0
    assert lines(image_server, code) == ["killed", "PermissionError", "PermissionError"]
    assert image_server.get_health()["sandbox"]["zygote"] and server_and_zygote(image_server)[1] == zygote


def test_a_snippet_has_no_network(image_server):
    code = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {image_server.port}), timeout=2)\n"
        "    print('connected')\n"
        "except OSError as e:\n"
        "    print(type(e).__name__, e.errno)\n"
    )
    assert lines(image_server, code) == ["PermissionError 1"]  # no socket at all (seccomp)


def test_a_fork_bomb_fails(image_server):
    code = "import os\nwhile True:\n    if os.fork() == 0:\n        while True:\n            pass\n"
    error = trace(image_server, code)["error"]
    assert (error["type"], error["message"]) == ("PermissionError", "[Errno 1] Operation not permitted")


# -- the refusal's reasons, read by the interpreter a container would run -------------------------

HINT = "from gradstep.required_layers import privilege_hint; print(privilege_hint())"


def hint_under(caps: list[str], tag: str) -> str:
    """What the refusal would say of a server run, as the image's user, by an interpreter with ``caps``."""
    with ImageUser(caps, tag) as made:
        argv = [*wrapper(compose_caps(), f"{made.uid}:{made.gid}"), made.python, "-c", HINT]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_refusal_says_when_the_interpreter_carries_no_file_capabilities():
    assert "carries no file capabilities" in hint_under([], "bare")


def test_the_refusal_names_the_capabilities_the_interpreter_lacks():
    lacking = [c for c in image_file_caps() if c not in ("SETPCAP", "KILL")]
    assert hint_under(lacking, "few").endswith("without CAP_SETPCAP, CAP_KILL (the container must add them).")


def test_the_image_interpreter_leaves_nothing_to_explain():
    assert hint_under(image_file_caps(), "full") == ""
