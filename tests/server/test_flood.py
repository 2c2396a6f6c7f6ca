"""One client, or a wave of addresses, cannot stall a replica (issue 47, items 4 and 5).

Each test attempts a flood against a real server (`gradstep serve`, its sandbox in the tests'
uid range) or the real app, and shows it failing by what the server does, never by a timed
threshold: crafted code is refused without being parsed in the server's process; /healthz and
another client's run are answered while a client's big snippets are parked at the reader; a
wave of addresses from one network neither keeps a later client from the next worker nor holds
the whole queue. benchmarks/healthz_flood.py measures the latencies.
"""

from __future__ import annotations

import ast
import os
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import httpx
import orjson
import pytest
from fastapi.testclient import TestClient
from gradstep import reading, runs
from gradstep.app import create_app
from gradstep.reach import reaches
from gradstep.settings import Settings
from testkit.browser_support import start_server, stop_server
from testkit.sandbox_guard import guard_unavailable, uid_base

pytestmark = pytest.mark.skipif(guard_unavailable() is not None, reason=str(guard_unavailable()))

TRIVIAL = "import torch\nx = torch.ones(2, requires_grad=True)\n(x * 3).sum().backward()\n"
# 60,000 characters whose parse costs ~0.5-1 s, nearly all of it one C call holding the GIL
CRAFTED = 'f"' + "{a:{b}}a" * 7499 + '"'
# big, and cheap to read: it waits for its turn at a reader like any big snippet
BIG = TRIVIAL + "y = x * 2\n" * 600
SLEEPS = "import time\ntime.sleep(1000)\n"


def wait_for(condition, what: str, timeout: float = 90.0) -> None:
    """A safety net for a hung server (never an assert on speed)."""
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.02)


def from_address(address: str) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), trust_env=False, timeout=120)


def health(base: str) -> dict:
    return httpx.get(f"{base}/healthz", trust_env=False, timeout=30).json()  # local: the detail


def reader_pids(server_pid: int) -> list[int]:
    """The server's reader processes (gradstep.reading)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == server_pid and reading.MARK.encode() in cmdline:
            found.append(int(entry.name))
    return found


# -- reading: after admission, off the loop, bounded ------------------------------------------


def test_crafted_code_is_refused_at_a_runs_price_without_a_parse_in_the_server(monkeypatch):
    parsed = []
    real_parse = ast.parse
    monkeypatch.setattr(
        ast, "parse", lambda source, *a, **kw: parsed.append(len(source)) or real_parse(source, *a, **kw)
    )
    settings = Settings(workers=1, rate=0.001, burst=1, uid_base=uid_base(2250))
    app = create_app(settings)  # no lifespan: nothing here reaches the sandbox
    client = TestClient(app, client=("203.0.113.30", 1000))
    r = client.post("/api/trace", json={"code": CRAFTED})
    assert r.status_code == 422 and "too costly" in r.json()["error"]
    assert len(CRAFTED) not in parsed  # read in a reader process, given up on there
    assert app.state.service.readers.stats()["too_costly"] == 1
    # it cost a run: the client's second attempt is refused before anything is read
    assert client.post("/api/trace", json={"code": CRAFTED + " "}).status_code == 429
    assert app.state.service.readers.stats()["reads"] == 1
    app.state.service.readers.close()


def test_big_code_its_reader_read_is_never_parsed_in_the_server_not_even_for_its_run(monkeypatch):
    code = BIG + "# read once, by its reader\n"
    parsed = []
    real_parse = ast.parse
    monkeypatch.setattr(
        ast, "parse", lambda source, *a, **kw: parsed.append(len(source)) or real_parse(source, *a, **kw)
    )
    app = create_app(Settings(workers=1, rate=0, uid_base=uid_base(2260)))  # no lifespan: no sandbox
    try:
        _, fields = anyio.run(app.state.service._read, code, {}, "203.0.113.31")
        assert runs.served_fields(code) == fields  # what the run, its fixes and Apply fix write in
        assert len(code) not in parsed
    finally:
        app.state.service.readers.close()
    assert fields["reaches"] == reaches(code)  # the reader's look is the server's own (parsed here now)


def test_a_reader_has_no_secret_in_its_environment():
    readers = reading.CodeReaders(1, 1.0)
    os.environ["GRADSTEP_CACHE_SECRET"] = "a secret that must stay in the server"
    try:
        assert readers.read(BIG) == []
        (pid,) = readers.pids()
        assert b"GRADSTEP" not in Path(f"/proc/{pid}/environ").read_bytes()
    finally:
        del os.environ["GRADSTEP_CACHE_SECRET"]
        readers.close()


def test_healthz_and_another_clients_run_are_answered_while_a_clients_big_snippets_are_parked():
    # read_seconds: the parked read is not given up on while the test looks
    env = {"GRADSTEP_WORKERS": "2", "GRADSTEP_READ_SECONDS": "30", "GRADSTEP_UID_BASE": str(uid_base(2260))}
    proc, base = start_server(**env)
    flooder = from_address("127.0.0.2")
    reader = None
    try:
        assert flooder.post(f"{base}/api/trace", json={"code": BIG + "# first\n"}).status_code == 200
        (reader,) = reader_pids(proc.pid)
        os.kill(reader, signal.SIGSTOP)  # every big read now parks at the reader
        with ThreadPoolExecutor(4) as pool:  # one client, four connections, big snippets
            flood = [
                pool.submit(flooder.post, f"{base}/api/trace", json={"code": BIG + f"# {i}\n"})
                for i in range(4)
            ]
            wait_for(lambda: health(base)["reading"]["inside"] == 1, "a read to park at the reader")
            wait_for(lambda: any(f.done() for f in flood), "a flood request past the client's waiting cap")
            other = from_address("127.0.0.3")
            public = other.get(f"{base}/healthz", headers={"x-forwarded-for": "198.51.100.3"})
            assert public.status_code == 200 and public.json()["status"] == "ok"
            r = other.post(f"{base}/api/trace", json={"code": TRIVIAL})
            assert r.status_code == 200 and r.json()["status"] == "ok"
            assert sum(not f.done() for f in flood) == 3  # still parked: one read, two waiting their turn
            assert [f.result().status_code for f in flood if f.done()] == [429]
            os.kill(reader, signal.SIGCONT)
            reader = None
            answers = sorted(f.result().status_code for f in flood)
        assert answers == [200, 200, 200, 429]  # read and run once the reader went on
    finally:
        if reader is not None:
            os.kill(reader, signal.SIGCONT)
        stop_server(proc)


# -- the queue: fair across networks, bounded -------------------------------------------------


def hold(port: int, name: str, address: str, code: str) -> socket.socket:
    """A request of ``address`` (behind the trusted proxy) whose run lasts until its connection closes."""
    body = orjson.dumps({"code": code + f"# {name}\n"})
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(
        b"POST /api/trace HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"X-Forwarded-For: {address}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    return s


def test_a_wave_of_addresses_from_one_network_neither_delays_a_later_client_nor_fills_the_queue():
    # one worker, a run on deck, 3 waiting: every place taken by a wave of 10.0.0.x (each a client
    # of its own, each run sleeping until its client hangs up: the test says when a worker frees)
    proc, base = start_server(
        GRADSTEP_WORKERS="1",
        GRADSTEP_QUEUE="4",
        GRADSTEP_WALL_SECONDS="300",
        GRADSTEP_QUEUE_SECONDS="300",
        GRADSTEP_TRUST_PROXY="1",
        GRADSTEP_UID_BASE=str(uid_base(2270)),
    )
    port = int(base.rsplit(":", 1)[1])

    def networks() -> dict:
        return health(base)["queue"]["networks"]

    wave: dict[str, socket.socket] = {}
    try:
        for i in range(1, 6):
            wave[f"w{i}"] = hold(port, f"w{i}", f"10.0.0.{i}", SLEEPS)
            wait_for(lambda i=i: health(base)["running_or_queued"] == i, f"wave request {i} inside")
        assert networks() == {"10.0.0.0/24": {"inside": 5, "through": 2}}  # one running, one on deck
        with ThreadPoolExecutor(1) as pool:
            late = pool.submit(
                httpx.post,
                f"{base}/api/trace",
                json={"code": TRIVIAL},
                headers={"x-forwarded-for": "198.51.100.1"},
                timeout=120,
                trust_env=False,
            )
            wait_for(lambda: "198.51.100.0/24" in networks(), "the later client inside")
            # the wave's newest gave its place to the later client
            wave["w5"].settimeout(60)
            assert wave["w5"].recv(4096).startswith(b"HTTP/1.1 503")
            wave.pop("w5").close()
            wave.pop("w1").close()  # the running one ends: a worker's turn is given
            wait_for(lambda: len(health(base)["queue"]["recent"]) >= 3, "the next turn")
            # it went to the later client, not to the wave's runs that waited longer (w3, w4); the
            # later client may even be done and w3 let through after it
            assert health(base)["queue"]["recent"][:3] == ["10.0.0.0/24", "10.0.0.0/24", "198.51.100.0/24"]
            for name in list(wave):  # the rest of the wave hangs up: whichever held the worker lets go
                wave.pop(name).close()
            assert late.result().status_code == 200 and late.result().json()["status"] == "ok"
        wait_for(lambda: health(base)["running_or_queued"] == 0, "every place given back")
    finally:
        for s in wave.values():
            s.close()
        stop_server(proc)
