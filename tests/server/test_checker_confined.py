"""A checker process (gradstep.checker ``_Process``, started by gradstep.checker_env) holds nothing of
the server's it does not need: no secret of its environment, no capability, no way to gain one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gradstep.checker import _Process
from gradstep.sandbox import capabilities

SECRET = f"gradstep-checker-secret-{os.getpid()}"


@pytest.fixture(scope="module")
def checker():
    os.environ["GRADSTEP_TEST_SECRET"] = SECRET  # in the server's environment
    try:
        process = _Process()
        process.wait_ready()  # it started, confined, and serves
    finally:
        os.environ.pop("GRADSTEP_TEST_SECRET", None)
    yield process
    process.stop()


def test_a_secret_in_the_servers_environment_is_not_in_the_checkers(checker):
    environ = Path(f"/proc/{checker.proc.pid}/environ").read_bytes()
    assert SECRET.encode() not in environ
    names = sorted(entry.split(b"=", 1)[0].decode() for entry in environ.split(b"\0") if entry)
    assert names == ["HOME", "LANG", "PATH", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH"]


def test_the_checker_has_no_capabilities_and_no_new_privileges(checker):
    sets = capabilities.status(checker.proc.pid)
    assert sets["CapEff"] == sets["CapPrm"] == sets["CapInh"] == sets["CapAmb"] == 0
    if capabilities.status()["CapEff"] >> capabilities.NEEDED["SETPCAP"] & 1:
        assert sets["CapBnd"] == 0  # nothing to regain on an exec either
    assert sets["NoNewPrivs"] == 1


def test_the_checker_does_not_work_in_the_servers_directory(checker):
    assert os.readlink(f"/proc/{checker.proc.pid}/cwd") == "/"


def test_the_checker_still_checks_a_trace(checker):
    from gradstep.checker import _ENCODE

    body = b'{"status": "ok"}'
    reply = checker.call(_ENCODE, {}, body)
    assert reply.problem is None and reply.stored is not None
