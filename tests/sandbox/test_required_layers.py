"""A server never runs snippets without the confinement layers GRADSTEP_REQUIRE_LAYERS names.

Layers are switched off for real (SandboxConfig.disable) in a real sandbox; the
app must then refuse to start, naming the layer.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from fastapi.testclient import TestClient
from gradstep.app import create_app
from gradstep.required_layers import missing_layers, required_layers
from gradstep.runs import TraceRunner, sandbox_config
from gradstep.sandbox import LAYERS, Sandbox
from gradstep.settings import Settings
from testkit.sandbox_guard import uid_base


def app_without(layer: str, require: str):
    settings = Settings(workers=1, rate=0, require_layers=require, uid_base=uid_base(), health_detail=True)
    sandbox = Sandbox(sandbox_config(settings, disable=frozenset({layer})))
    return create_app(settings, runner=TraceRunner(settings, sandbox=sandbox))


def test_all_means_every_layer_of_the_sandbox():
    assert required_layers("all") == LAYERS


def test_none_requires_nothing():
    assert required_layers("none") == ()


def test_an_unknown_layer_name_is_refused_with_the_known_ones_listed():
    with pytest.raises(ValueError, match="seccomp"):
        required_layers("namespaces,seccom")


def test_a_layer_the_host_refuses_is_missing_with_its_reason():
    layers = dict.fromkeys(LAYERS, "active") | {"cgroup": "unavailable: read-only file system"}
    assert missing_layers(layers, "all") == {"cgroup": "unavailable: read-only file system"}


def test_a_server_missing_a_required_layer_refuses_to_start():
    with pytest.raises(RuntimeError, match="seccomp: disabled"):
        with TestClient(app_without("seccomp", "all")):
            pass


def test_a_server_requiring_only_the_layers_it_has_starts_and_reports_the_rest():
    required = ",".join(n for n in LAYERS if n != "seccomp")
    with TestClient(app_without("seccomp", required)) as client:
        health = client.get("/healthz").json()
    assert health["sandbox"]["layers"]["seccomp"] == "disabled"


def test_gradstep_serve_with_a_misspelt_layer_exits_with_a_message():
    done = subprocess.run(
        [sys.executable, "-m", "gradstep", "serve", "--port", "1"],
        env={"GRADSTEP_REQUIRE_LAYERS": "seccom", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "GRADSTEP_REQUIRE_LAYERS names unknown layers seccom" in done.stderr
