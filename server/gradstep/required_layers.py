"""Refuse to serve snippets without the confinement layers the deployment requires.

The sandbox reports each layer as "active", "disabled" or "unavailable: why"
and runs without a layer the host refuses (with a warning). A server that
takes untrusted code must not do that silently: ``GRADSTEP_REQUIRE_LAYERS``
(default ``all``) names the layers that must be active, and the server stops
at start-up, saying which are missing and why, when one is not.
"""

from __future__ import annotations

import os
import sys

from gradstep.sandbox import LAYERS, capabilities


def required_layers(spec: str) -> tuple[str, ...]:
    """The layer names ``spec`` asks for: "all", "none"/"", or a comma-separated list."""
    spec = spec.strip().lower()
    if spec == "all":
        return LAYERS
    if spec in ("", "none"):
        return ()
    names = tuple(n.strip() for n in spec.split(",") if n.strip())
    unknown = [n for n in names if n not in LAYERS]
    if unknown:
        raise ValueError(
            f"GRADSTEP_REQUIRE_LAYERS names unknown layers {', '.join(unknown)}; "
            f"known: {', '.join(LAYERS)} (or all, none)"
        )
    return names


def missing_layers(layers: dict[str, str], spec: str) -> dict[str, str]:
    """{required layer: its state} for every required layer that is not active."""
    return {n: layers.get(n, "not reported") for n in required_layers(spec) if layers.get(n) != "active"}


def require_confinement(layers: dict[str, str], spec: str) -> None:
    missing = missing_layers(layers, spec)
    if missing:
        lines = "\n".join(f"  {name}: {state}" for name, state in missing.items())
        raise RuntimeError(
            "gradstep will not run untrusted snippets without these confinement layers:\n"
            f"{lines}\n{privilege_hint()}"
            "Run the server as root or with the image's capability-bearing interpreter (see docs/deploy.md), "
            "or set GRADSTEP_REQUIRE_LAYERS to the layers this host can provide (e.g. 'none' on a "
            "development machine)."
        )


def privilege_hint(executable: str = sys.executable) -> str:
    """Why a server that is not root lacks the capabilities the sandbox needs ("" for root)."""
    if os.geteuid() == 0:
        return ""
    who = f"The server runs as uid {os.geteuid()}"
    own = capabilities.status()
    if own.get("NoNewPrivs"):
        return (
            f"{who} with no_new_privs set (Docker --security-opt no-new-privileges, Kubernetes "
            f"allowPrivilegeEscalation: false): the kernel withholds the file capabilities of {executable}.\n"
        )
    try:
        os.getxattr(executable, "security.capability")
    except OSError:
        return f"{who} and {executable} carries no file capabilities.\n"
    lacking = [name for name in capabilities.NEEDED if name not in capabilities.names(own["CapEff"])]
    if lacking:
        return f"{who} without CAP_{', CAP_'.join(lacking)} (the container must add them).\n"
    return ""
