"""A recording's limits: its caps, and how the machine it runs on differs from a snippet's own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Limits:
    max_nodes: int = 20_000
    max_steps: int = 500
    max_stdout: int = 64_000
    max_values: int = 64  # gradients with at most this many elements carry their values
    line_repeats: int = 3  # executions of one line shown as steps before a loop is folded
    # torch.compile's default backend, inductor, builds C++ in subprocesses: a sandbox that has no
    # compiler and forks nothing says False, and compiled code runs with aot_eager (see patches.py)
    inductor: bool = True
    # A machine without a GPU can still run CUDA code as the same code on the CPU: the sandbox says
    # True, and the devices a snippet asks for become the CPU, with a note (see devices.py)
    cuda_on_cpu: bool = False
    # No keyboard, network, files or processes of its own (the sandbox): input() and downloads say so,
    # a DataLoader loads in the run's process, missing tqdm/matplotlib get stand-ins, and notes say what
    # a snippet can use instead (see offline.py)
    offline: bool = False
    # The run's memory limit (MB; the sandbox's, 0: none known): an allocation it refused ends the
    # run as ``status=limit`` (``limit=memory``) with the steps recorded before it, and says what to do
    memory_mb: int = 0

    @classmethod
    def sandboxed(cls, **kwargs: Any) -> Limits:
        """A run in the sandbox: no C++ compiler, no GPU, no keyboard, network or files."""
        return cls(**kwargs, inductor=False, cuda_on_cpu=True, offline=True)
