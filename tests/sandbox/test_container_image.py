"""The Docker image, built by a real container engine and run with the README's flags.

Slow (it builds the image: minutes the first time, a few seconds from the engine's cache), so
it runs only when asked, with ``make test-image`` (GRADSTEP_TEST_IMAGE=1), which installs the
engine where it is missing. Asked for elsewhere, it skips, saying why, where no engine is
installed; in CI (CI set) that is a failure instead: CI installs the engine, so a skip there
would hide that the image was never tested. Podman with runc (crun refuses hybrid cgroups);
docker works the same way (GRADSTEP_ENGINE=docker). The build takes its base from
GRADSTEP_IMAGE_BASE (a local one where Docker Hub can't be pulled: deploy/image-base.sh) and
reaches packages the way pip does on the machine it runs on: its index, extra indexes, find-links
and CA bundle (from pip's config files and PIP_* variables, local paths mounted read-only) become
build arguments, and where those find-links hold the pinned CPU build of torch, torch comes from
there instead of the PyTorch index. GRADSTEP_IMAGE_BUILD_ARGS adds to them; GRADSTEP_IMAGE names
an image to test instead of building one.

The container runs with exactly the flags of the README's ``docker run`` line (read from it);
then the server's /healthz, a trace compared with plain torch, and attacks from the battery.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from gradstep.columns import rows_of
from testkit.container import image_env
from testkit.sandbox_guard import MOUNT_POINTS, bound

REPO = Path(__file__).resolve().parents[2]
ENGINE = os.environ.get("GRADSTEP_ENGINE", "podman")
START_TIMEOUT = 240.0  # seconds: the zygote imports torch and warms up (slower in a busy container)
NAME = f"gradstep-test-{os.getpid()}"  # the container


def why_not() -> str | None:
    if os.environ.get("GRADSTEP_TEST_IMAGE") != "1":
        return "slow (builds the Docker image): run it with `make test-image` (GRADSTEP_TEST_IMAGE=1)"
    if shutil.which(ENGINE) is None:
        return f"no container engine here ({ENGINE} not found; GRADSTEP_ENGINE picks another)"
    if os.geteuid() != 0:
        return "the image test runs the engine as root (rootless engines need their own setup)"
    return None


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false")


if os.environ.get("GRADSTEP_TEST_IMAGE") == "1" and in_ci() and why_not() is not None:
    pytest.fail(f"the image test was asked for in CI and cannot run: {why_not()}", pytrace=False)

pytestmark = [pytest.mark.image, pytest.mark.skipif(why_not() is not None, reason=str(why_not()))]


def engine(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    runtime = ["--runtime", "runc"] if ENGINE == "podman" else []
    done = subprocess.run([ENGINE, *runtime, *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise RuntimeError(
            f"{ENGINE} {' '.join(args[:2])} failed ({done.returncode}):\n{done.stderr[-4000:]}"
        )
    return done


def documented_run_flags() -> list[str]:
    """The flags of the README's `docker run` line (without --rm, the port and the image name)."""
    section = (REPO / "README.md").read_text().split("## Docker and deploying", 1)[1]
    command = re.search(r"^docker run .*?(?<!\\)$", section, re.M | re.S)
    assert command, "README: no docker run line under 'Docker and deploying'"
    argv = shlex.split(command.group(0).replace("\\\n", " "))
    assert argv[:3] == ["docker", "run", "--rm"] and argv[-1] == "gradstep", argv
    flags = argv[3:-1]
    i = flags.index("-p")
    return flags[:i] + flags[i + 2 :]


PIP_SETTINGS = ("index-url", "extra-index-url", "find-links", "cert")  # the Dockerfile's PIP_* arguments


def pip_settings() -> dict[str, str]:
    """Where pip on this machine finds packages, as the PIP_* names the Dockerfile takes: from its
    config files and PIP_* variables (`pip config list`; a variable wins, then [install], then
    [global], as in pip itself)."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    found: dict[tuple[str, str], str] = {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        section, _, option = key.rpartition(".")
        found[section, option] = ast.literal_eval(value)
    settings = {}
    for option in PIP_SETTINGS:
        for section in (":env:", "install", "global"):
            if (section, option) in found:
                settings["PIP_" + option.upper().replace("-", "_")] = found[section, option]
                break
    return settings


def local_paths(name: str, value: str) -> set[str]:
    """What a setting names on this machine's disk, to mount into the build: a CA bundle, a
    find-links directory, or a local index (file://.../simple) with the files beside it."""
    paths = set()
    for item in value.split():
        path = item.removeprefix("file://")
        if not (path.startswith("/") and os.path.exists(path)):
            continue
        paths.add(str(Path(path).parent) if name.endswith("INDEX_URL") else path)
    return paths


def local_torch(settings: dict[str, str]) -> bool:
    """Whether pip's find-links hold the Dockerfile's torch, CPU build, for the base's Python."""
    pinned = re.search(r"torch==(\S+)", (REPO / "Dockerfile").read_text())
    assert pinned, "Dockerfile: no torch==..."
    wheel = f"torch-{pinned.group(1)}+cpu-cp3*.whl"
    dirs = [Path(d.removeprefix("file://")) for d in settings.get("PIP_FIND_LINKS", "").split()]
    return any(d.is_dir() and any(d.glob(wheel)) for d in dirs)


def build_args() -> list[str]:
    """This machine's pip settings as build arguments, local paths they name mounted read-only."""
    settings = pip_settings()
    args: list[str] = []
    mounts: set[str] = set()
    for name, value in settings.items():
        args += ["--build-arg", f"{name}={value}"]
        mounts |= local_paths(name, value)
    if local_torch(settings):  # pip takes the local +cpu wheel over the index's (CUDA) one
        args += ["--build-arg", f"TORCH_INDEX_URL={settings.get('PIP_INDEX_URL', 'https://pypi.org/simple')}"]
    args += [f"--volume={m}:{m}:ro" for m in sorted(mounts)]
    if ENGINE == "podman":
        args += ["--format", "docker"]  # OCI images drop the HEALTHCHECK
    if base := os.environ.get("GRADSTEP_IMAGE_BASE"):
        args += ["--build-arg", f"BASE_IMAGE={base}"]
    return args + shlex.split(os.environ.get("GRADSTEP_IMAGE_BUILD_ARGS", ""))


@pytest.fixture(scope="module")
def image() -> str:
    if named := os.environ.get("GRADSTEP_IMAGE"):
        return named
    tag = "localhost/gradstep:test"
    before = engine("image", "inspect", "--format", "{{.Id}}", tag, check=False).stdout.strip()
    engine("build", "--tag", tag, *build_args(), str(REPO), timeout=3600)
    if before and before != engine("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip():
        engine("rmi", before, check=False)  # the image this build replaced (1.5 GB left untagged)
    return tag


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 5) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


@pytest.fixture(scope="module")
def server(image):
    """The image's server, started with the README's flags on a loopback port: its base URL."""
    port = free_port()
    name = NAME
    flags = documented_run_flags()
    if ENGINE == "podman":  # podman's defaults are lower than these machines' hard limits allow
        flags += ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
    flags = [
        f"seccomp={REPO / f.removeprefix('seccomp=')}" if f.startswith("seccomp=deploy/") else f
        for f in flags
    ]
    engine("run", "--detach", "--name", name, "-p", f"127.0.0.1:{port}:8000", *flags, image)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            state = engine("inspect", "--format", "{{.State.Status}}", name, check=False).stdout.strip()
            if state not in ("running", "created", "configured"):
                logs = engine("logs", name, check=False)
                raise RuntimeError(f"the container stopped ({state}):\n{logs.stdout}{logs.stderr}")
            try:
                if get(f"{url}/healthz")["status"] == "ok":  # the zygote is up (the detail is local only)
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not answer in {START_TIMEOUT:.0f} s")
            time.sleep(0.5)
        yield url
    finally:
        engine("rm", "--force", name, check=False)


def trace(url: str, code: str) -> dict:
    request = urllib.request.Request(
        f"{url}/api/trace",
        data=json.dumps({"code": code}).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as r:
        return json.load(r)


def printed(url: str, code: str) -> list[str]:
    t = trace(url, code)
    assert t["error"] is None, t["error"]
    return t["stdout"].splitlines()


def local_health() -> dict:
    """/healthz asked from inside the container (a local request: its detail), as the image's own
    health check asks; from the host it gives the public answer only."""
    script = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8000/healthz').read().decode())"
    return json.loads(engine("exec", NAME, "python", "-c", script).stdout)


def test_healthz_gives_the_host_only_the_public_answer(server):
    assert set(get(f"{server}/healthz")) == {"status", "version"}


def test_healthz_lists_every_layer_the_image_requires_as_active(server):
    layers = local_health()["sandbox"]["layers"]
    required = image_env()["GRADSTEP_REQUIRE_LAYERS"].split(",")
    assert {name: layers[name] for name in required} == dict.fromkeys(required, "active")
    assert set(layers) - set(required) == {"cgroup"}  # the container's --memory/--pids-limit stand in


@pytest.mark.skipif(ENGINE != "podman", reason="`healthcheck run` is podman's (docker runs it on its own)")
def test_the_images_healthcheck_passes(server):
    done = engine("healthcheck", "run", NAME, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_snippet_runs_as_its_slots_uid_with_no_capability(server):
    code = (
        "status = dict(line.split(':', 1) for line in open('/proc/self/status'))\n"
        "for key in ('Uid', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp'):\n"
        "    print(key, ' '.join(status[key].split()))\n"
    )
    out = dict(line.split(" ", 1) for line in printed(server, code))
    uids = set(out.pop("Uid").split())
    assert len(uids) == 1 and uids != {"10001"} and uids != {"0"}  # its slot's own uid
    assert out == dict.fromkeys(("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"), "0" * 16) | {
        "NoNewPrivs": "1",
        "Seccomp": "2",
    }


def test_a_snippet_traces_as_plain_torch_computes_it(server):
    code = "import torch\nx = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)\n(x.exp() * x).sum().backward()\n"
    t = trace(server, code)
    assert t["status"] == "ok" and t["error"] is None
    import torch

    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x.exp() * x).sum().backward()
    last = rows_of(t)["steps"][-1]  # the wire's tables are columns (trace version 4)
    grad = next(s["grad"]["values"] for s in last["tensors"] if s["name"] == "x")
    assert grad == pytest.approx(x.grad.tolist(), rel=1e-4)


def test_the_containers_files_are_not_in_the_snippets_root(server):
    paths = ["/etc/passwd", "/etc/hostname", "/home", "/var", "/srv/gradstep", "/sys/fs/cgroup", "/usr/bin"]
    code = (
        "import os\n"
        f"for path in {paths!r}:\n"
        "    try:\n"
        "        print(os.listdir(path) if os.path.isdir(path) else open(path).read()[:50])\n"
        "    except OSError as e:\n"
        "        print(type(e).__name__)\n"
        "print(sorted(os.listdir('/')))\n"
    )
    *found, top = printed(server, code)
    assert found == ["FileNotFoundError"] * len(paths)
    visible = bound(ast.literal_eval(printed(server, MOUNT_POINTS)[0]))
    assert any(p.startswith("/opt/gradstep/lib/python3.") and p.endswith("/site-packages") for p in visible)
    assert top == str(sorted({"dev", "proc", "tmp"} | {p.split("/")[1] for p in visible}))


def test_the_servers_interpreter_is_visible_but_not_readable(server):
    code = (
        "try:\n"
        "    open('/opt/gradstep/bin/gradstep-python', 'rb').read(4)\n"
        "except OSError as e:\n"
        "    print(type(e).__name__)\n"
    )
    assert printed(server, code) == ["PermissionError"]  # 0750 root:gradstep, the snippet's uid is neither


def test_network_and_fork_fail(server):
    code = (
        "import os, socket\n"
        "for attempt in (lambda: socket.create_connection(('127.0.0.1', 8000), timeout=2), os.fork):\n"
        "    try:\n"
        "        attempt()\n"
        "        print('it worked')\n"
        "    except OSError as e:\n"
        "        print(type(e).__name__, e.errno)\n"
    )
    assert printed(server, code) == ["PermissionError 1", "PermissionError 1"]  # seccomp


def test_without_the_grants_the_container_does_not_start(image):
    # The engine's default capabilities lack SYS_ADMIN: the kernel refuses to execute the
    # capability-bearing interpreter at all, so no snippet ever runs unconfined.
    flags = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"] if ENGINE == "podman" else []
    done = engine("run", "--rm", *flags, image, check=False, timeout=120)
    assert done.returncode != 0
    assert "operation not permitted" in (done.stdout + done.stderr).lower()
