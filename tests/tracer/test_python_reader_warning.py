"""Without its C node reader, gradstep says so once on import (and how to build it), except in the
sandbox's own processes, where a warning would be recorded as the snippet's."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import gradstep
import pytest

SAID = "gradstep's C node reader"


@pytest.fixture(scope="module")
def without_c(tmp_path_factory) -> Path:
    """A copy of the package without the built extension: a checkout that never ran `make native`."""
    root = tmp_path_factory.mktemp("no_c")
    shutil.copytree(
        Path(gradstep.__file__).parent, root / "gradstep", ignore=shutil.ignore_patterns("*.so", "*.pyd")
    )
    return root


def _stderr(root: Path, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-W", "default", *args],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        cwd=root,
        timeout=120,
    )
    return out.stderr


def test_importing_gradstep_without_the_c_reader_warns_once_with_how_to_build_it(without_c: Path):
    err = _stderr(without_c, "-c", "import gradstep, gradstep.tracer.graph as g; assert g._nodes is None")
    assert err.count(SAID) == 1, err
    assert "RuntimeWarning" in err and "make native" in err


def test_importing_gradstep_with_the_c_reader_says_nothing():
    root = Path(gradstep.__file__).parent.parent
    assert SAID not in _stderr(root, "-c", "import gradstep, gradstep.tracer.graph as g; assert g._nodes")


def test_the_sandboxs_zygote_does_not_warn(without_c: Path):
    # started as the runner starts it, with a descriptor that is no socket: it imports gradstep
    # (the package first), then stops
    err = _stderr(without_c, "-s", "-m", "gradstep.sandbox.zygote", "999")
    assert "Bad file descriptor" in err, f"the zygote did not get past its imports: {err}"
    assert SAID not in err, err
