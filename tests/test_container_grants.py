"""The grants docs/deploy.md asks of a container are the ones the sandbox needs, and no fewer work.

No container engine here: tests/container.py runs `gradstep serve` as root of a new user
namespace (with its own mount and pid namespaces), its capabilities cut down to the ones
deploy/docker-compose.yml adds and deploy/seccomp.json loaded, with the Dockerfile's
GRADSTEP_REQUIRE_LAYERS. What it cannot show: the engine's own AppArmor profile and cgroups.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import httpx
import pytest
from gradstep.schema import Trace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from harness import Server  # noqa: E402

CODE = "import torch\nx = torch.ones(3, requires_grad=True)\ny = (x * x * 3).sum()\ny.backward()\n"
UID_BASE = 62700


def compose_caps() -> list[str]:
    found = re.search(r"cap_add: \[([^\]]+)\]", (REPO / "deploy" / "docker-compose.yml").read_text())
    assert found, "deploy/docker-compose.yml: no cap_add"
    return [c.strip() for c in found.group(1).split(",")]


def image_required_layers() -> str:
    found = re.search(r"GRADSTEP_REQUIRE_LAYERS=(\S+)", (REPO / "Dockerfile").read_text())
    assert found, "Dockerfile: no GRADSTEP_REQUIRE_LAYERS"
    return found.group(1)


def contained(caps: list[str]) -> Server:
    wrapper = [sys.executable, str(REPO / "tests" / "container.py"), "--caps", ",".join(caps)]
    wrapper += ["--seccomp", str(REPO / "deploy" / "seccomp.json"), "--"]
    env = {"GRADSTEP_REQUIRE_LAYERS": image_required_layers()}
    return Server(1, env, uid_base=UID_BASE, wrapper=wrapper)


def plain_grad(code: str) -> list[float]:
    scope: dict = {}
    exec(compile(code, "<plain>", "exec"), scope)
    return scope["x"].grad.tolist()


def test_with_the_documented_grants_every_layer_the_image_requires_is_active():
    with contained(compose_caps()) as server:
        layers = server.get_health()["sandbox"]["layers"]
        r = httpx.post(f"{server.url}/api/trace", json={"code": CODE}, timeout=60, trust_env=False)
    required = image_required_layers().split(",")
    assert {name: layers[name] for name in required} == dict.fromkeys(required, "active")
    last = Trace.model_validate_json(r.content).steps[-1]
    assert next(t.grad.values for t in last.tensors if t.name == "x") == plain_grad(CODE)


def test_without_dac_override_the_server_refuses_to_start_naming_the_layer():
    server = contained([c for c in compose_caps() if c != "DAC_OVERRIDE"])
    with pytest.raises(RuntimeError) as refused:
        server.start()
    assert "will not run untrusted snippets" in str(refused.value)
    assert "mounts: unavailable" in str(refused.value)
