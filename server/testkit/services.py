"""Real nginx and redis-server on loopback for the cache and scale-out tests.

``installed(...)`` installs Debian's packages with apt-get when the binaries are
missing and skips the calling test, with apt's own words, only when that fails.
``RedisServer`` and ``Nginx`` run in the foreground as children of the test, on
free loopback ports, with everything they write in a temporary directory;
``stop()`` (also on ``with`` exit) kills them and removes that directory.
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parents[2]
NGINX_CONF = REPO / "deploy" / "nginx" / "nginx.conf"
PACKAGES = {"redis-server": "redis-server", "nginx": "nginx", "setcap": "libcap2-bin"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _apt(*args: str) -> str:
    env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    try:
        done = subprocess.run(["apt-get", *args], capture_output=True, text=True, timeout=600, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    return (done.stderr or done.stdout).strip()[-300:]


def ensure(*binaries: str) -> str | None:
    """Make sure the binaries exist (apt-get install, after apt-get update if needed); None, or why not."""
    missing = [b for b in binaries if shutil.which(b) is None]
    if not missing:
        return None
    packages = [PACKAGES[b] for b in missing]
    said = _apt("install", "-y", "-qq", *packages)
    if not all(shutil.which(b) for b in missing):
        said = _apt("update", "-qq") + "\n" + _apt("install", "-y", "-qq", *packages)
    if not all(shutil.which(b) for b in missing):
        return f"apt-get could not install {' '.join(packages)}: {said}"
    return None


def installed(*binaries: str) -> None:
    """Make sure the binaries exist, or skip the calling test saying why."""
    why = ensure(*binaries)
    if why:
        pytest.skip(why)


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            socket.create_connection((HOST, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{proc.args[0]} did not listen on {port} within {timeout:.0f} s")


class Service:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="gradstep-test-svc-"))
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def _run(self, cmd: list[str]) -> None:
        log = open(self.dir / "output.log", "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.dir)
        log.close()
        try:
            wait_for_port(self.port, self.proc)
        except RuntimeError as e:
            out = self.output()
            self.stop()
            raise RuntimeError(f"{e}\n{out}") from None

    def output(self) -> str:
        try:
            return (self.dir / "output.log").read_text(errors="replace")
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class RedisServer(Service):
    """redis-server on a free loopback port: no persistence, a memory cap with LRU eviction."""

    def __init__(self) -> None:
        super().__init__()
        self.start()

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def start(self) -> None:
        self._run(
            [
                "redis-server",
                "--bind",
                HOST,
                "--port",
                str(self.port),
                "--dir",
                str(self.dir),
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "yes",
                "--maxmemory",
                "64mb",
                "--maxmemory-policy",
                "allkeys-lru",
            ]  # fmt: skip
        )


def nginx_conf(upstreams: list[str], port: int, state: Path, rate: str | None = None) -> str:
    """deploy/nginx/nginx.conf with these replicas, this loopback port, paths under ``state``."""
    text = NGINX_CONF.read_text()
    servers = "".join(f"        server {u} max_fails=1 fail_timeout=10s;\n" for u in upstreams)
    text, n = re.subn(r"(?m)^\s*server app:8000[^\n]*\n", servers, text)
    assert n == 1, "deploy/nginx/nginx.conf: upstream line not found"
    text = text.replace("listen 80;", f"listen {HOST}:{port};")
    text = text.replace("/var/cache/nginx/gradstep", str(state / "cache"))
    text = text.replace("access_log /dev/stdout upstreams;", f"access_log {state / 'access.log'} upstreams;")
    if rate is not None:
        text = re.sub(r"rate=\S+;", f"rate={rate};", text)
    temps = "".join(
        f"    {name}_temp_path {state / name};\n"
        for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return text.replace("http {\n", "http {\n" + temps, 1)


class Nginx(Service):
    """Debian's nginx with deploy/nginx/nginx.conf in front of ``upstreams`` ("host:port")."""

    def __init__(self, upstreams: list[str], rate: str | None = None) -> None:
        super().__init__()
        conf = self.dir / "nginx.conf"
        conf.write_text(nginx_conf(upstreams, self.port, self.dir, rate))
        self.access_log = self.dir / "access.log"
        self._run(
            [
                "nginx",
                "-p",
                str(self.dir),
                "-c",
                str(conf),
                "-e",
                str(self.dir / "error.log"),
                "-g",
                f"daemon off; pid {self.dir / 'nginx.pid'}; user root;",
            ]  # fmt: skip
        )

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"
