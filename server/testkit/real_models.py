"""The real-model snippets of benchmarks/models/catalog.py for tests, and what plain Python says of them."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import torch

_CATALOG = Path(__file__).resolve().parents[2] / "benchmarks" / "models" / "catalog.py"
_spec = importlib.util.spec_from_file_location("gradstep_model_catalog", _CATALOG)
catalog = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(catalog)


def loop_iterations(code: str, loop_line: str) -> int:
    """How many times plain torch runs the body of the loop `loop_line` starts (counted by a line
    inserted first in its body)."""
    lines = code.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(loop_line))
    indent = re.match(r"\s*", lines[at + 1]).group(0)
    lines.insert(at + 1, f"{indent}__count[0] += 1")
    scope = {"__count": [0], "torch": torch}
    exec("\n".join(lines), scope)  # noqa: S102 - the test's own snippet
    return scope["__count"][0]
