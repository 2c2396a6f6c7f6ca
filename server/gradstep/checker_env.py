"""How a checker process starts (gradstep.checker ``_Process``): nothing of the server's but its code.

A checker is trusted code fed a stranger's bytes (a sandboxed child's result), so what it holds is
what a bug in parsing them could give away. It gets:

* **a minimal environment** (``environment``), as the sandbox's zygote does: PATH, LANG,
  HOME=/nonexistent and the import path; never the server's own (a secret there, an API key or a
  signing key, would be readable in the process's memory and in ``/proc/<pid>/environ``);
* **no capabilities**: ``python -m gradstep.checker_env`` empties the bounding and ambient sets and
  the effective, permitted and inheritable ones (``gradstep.sandbox.capabilities``), sets
  PR_SET_NO_NEW_PRIVS (no setuid binary or file capability gives any back), checks that every set
  is empty (else it exits: fail closed), then runs ``gradstep.checker`` as ``__main__`` in the
  same process (no second interpreter start). Dropping the bounding set needs CAP_SETPCAP, which
  a root server and the container image's interpreter have; without it the process holds no
  capability to drop and no_new_privs keeps it so;
* **the root directory as its working directory**, and ``-s -P``: no user site-packages, nothing
  imported from where the server was started.

It keeps the server's uid: this machine's interpreter lives under root's 0700 home, so another uid
could not even start it (the sandbox's children can only because the zygote pre-imports and then
builds them a root of their own). A root checker without capabilities still owns root's files.
"""

from __future__ import annotations

import runpy
import sys

from gradstep.sandbox import capabilities
from gradstep.sandbox.confine import PR_SET_NO_NEW_PRIVS
from gradstep.sandbox.libc import prctl

MODULE = "gradstep.checker"


def environment(pythonpath: str) -> dict[str, str]:
    """The whole environment of a checker process: nothing of the server's but its import path."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": "/nonexistent",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": pythonpath,
    }


def command() -> list[str]:
    """The checker's command line: this module, which confines the process and then runs the checker."""
    return [sys.executable, "-s", "-P", "-m", "gradstep.checker_env"]


def drop_privileges() -> None:
    """Every capability set emptied, no new privileges; raises RuntimeError if any set is left."""
    if capabilities.status()["CapBnd"]:
        try:
            capabilities.drop_bounding()
        except OSError:
            if capabilities.status()["CapPrm"]:  # capabilities it could use, and can't drop them all
                raise
    capabilities.clear_ambient()
    capabilities.clear()
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    left = {name: mask for name, mask in capabilities.left().items() if name != "CapBnd"}
    if left:
        raise RuntimeError(f"capabilities left: {left}")


def main() -> None:
    try:
        drop_privileges()
    except (OSError, RuntimeError) as e:
        print(f"gradstep checker: not starting with privileges: {e}", file=sys.stderr)
        raise SystemExit(70) from e
    runpy.run_module(MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
