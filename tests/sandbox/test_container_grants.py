"""The grants the deploy files ask of a container are the capabilities the image's interpreter
carries, and that interpreter gets them only where the container grants them all. (And the image
installs what the Makefile installs.)

No container engine here: server/testkit/container.py emulates one (a user namespace, the bounding set cut
down to the granted capabilities, deploy/seccomp.json, the image's non-root user) and
``container.ImageUser`` builds the image's user and capability-bearing interpreter.
tests/sandbox/test_nonroot.py runs the image's server that way and attacks it.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from testkit.container import (
    CAPS,
    REPO,
    ImageUser,
    compose_caps,
    image_file_caps,
    image_unavailable,
    image_user,
    k8s_caps,
    wrapper,
)
from testkit.sandbox_guard import guard_unavailable

SHOW_CAPS = "import re; print(re.search(r'CapEff:\\s+(\\w+)', open('/proc/self/status').read()).group(1))"


def test_compose_adds_exactly_the_capabilities_the_image_interpreter_carries():
    assert sorted(compose_caps()) == sorted(image_file_caps())


def test_kubernetes_adds_exactly_the_capabilities_the_image_interpreter_carries():
    assert sorted(k8s_caps()) == sorted(image_file_caps())


def test_the_image_pins_the_torch_the_makefile_installs():
    makefile = re.search(r"^TORCH\s*\?=\s*(\S+)", (REPO / "Makefile").read_text(), re.M)
    image = re.search(r"pip install --index-url \S+ (torch==\S+)", (REPO / "Dockerfile").read_text())
    assert makefile and image
    assert image.group(1) == makefile.group(1)


def test_compose_and_kubernetes_run_the_image_user():
    uid, _, gid = image_user().partition(":")
    compose = (REPO / "deploy" / "docker-compose.yml").read_text()
    k8s = (REPO / "deploy" / "k8s" / "gradstep.yaml").read_text()
    assert re.search(r'user: "(\d+):(\d+)"', compose).groups() == (uid, gid)
    assert re.search(r"runAsUser: (\d+)", k8s).group(1) == uid
    assert re.search(r"runAsGroup: (\d+)", k8s).group(1) == gid
    assert "runAsNonRoot: true" in k8s


needs_image = pytest.mark.skipif(
    (guard_unavailable() or image_unavailable()) is not None,
    reason=str(guard_unavailable() or image_unavailable()),
)


@pytest.fixture(scope="module")
def image():
    with ImageUser() as made:
        yield made
    assert not made.exists()


def in_container(image: ImageUser, caps: list[str], code: str) -> subprocess.CompletedProcess:
    argv = [*wrapper(caps, f"{image.uid}:{image.gid}"), image.python, "-c", code]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


@needs_image
def test_with_the_documented_grants_the_interpreter_holds_exactly_its_file_capabilities(image):
    done = in_container(image, compose_caps(), SHOW_CAPS)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout, 16) == sum(1 << CAPS[c] for c in image_file_caps())


@needs_image
def test_without_one_of_them_the_interpreter_cannot_start(image):
    # The kernel refuses to execute a file whose effective capabilities it cannot grant in full.
    done = in_container(image, [c for c in compose_caps() if c != "SETPCAP"], "print('started')")
    assert done.returncode != 0 and "started" not in done.stdout
    assert "Operation not permitted" in done.stderr
