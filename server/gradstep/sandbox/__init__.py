"""The sandbox (docstring to be written)."""

from gradstep.sandbox.config import LAYERS, RunResult, SandboxConfig
from gradstep.sandbox.runner import Sandbox

__all__ = ["LAYERS", "RunResult", "Sandbox", "SandboxConfig"]
