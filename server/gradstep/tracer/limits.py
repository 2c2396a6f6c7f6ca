"""A recording's limits: its caps, and how the machine it runs on differs from a snippet's own."""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass
from typing import Any

from gradstep.limit_advice import stop_margin, stop_point


class StoppedAtLimit(BaseException):
    """Raised into the code at a statement boundary when the run's CPU or wall-clock time is nearly spent: the
    recording ends there, with time left to write what it recorded (a BaseException: the code's
    own ``except Exception`` does not swallow it)."""

    def __init__(self, limit: str, used: float):
        super().__init__(f"stopped short of the run's {limit} limit, after {used:.1f} s")
        self.limit, self.used = limit, used


class LimitWatch:
    """The CPU time and wall-clock time a run may still use before it stops itself, checked at each
    statement: RLIMIT_CPU's soft limit (the sandbox's, lowered for a fix run) and ``wall_seconds``
    from now (the code has just arrived: the sandbox's clock started when it was handed over), each
    less a margin for writing the trace. Without them (a recording in one's own process) it never
    stops anything."""

    def __init__(self, wall_seconds: float = 0) -> None:
        # NOTE [a run stops short of its limits] (gradstep.limit_advice): the server checks the stop
        soft, _ = resource.getrlimit(resource.RLIMIT_CPU)
        self.start = time.process_time()
        self.wall_start = time.monotonic()
        self.stop_at: float | None = None
        if soft != resource.RLIM_INFINITY:
            self.stop_at = soft - stop_margin(soft - self.start)
        self.wall_stop_at: float | None = None
        if wall_seconds > 0:
            self.wall_stop_at = self.wall_start + stop_point(wall_seconds)

    def check(self) -> None:
        if self.stop_at is not None:
            now = time.process_time()
            if now >= self.stop_at:
                raise StoppedAtLimit("cpu", now - self.start)
        if self.wall_stop_at is not None:
            now = time.monotonic()
            if now >= self.wall_stop_at:
                raise StoppedAtLimit("wall", now - self.wall_start)


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
    # The run's CPU limit (s; the sandbox's, 0: none known): said in the message of a run that
    # stopped itself short of it (``LimitWatch``: ``status=limit``, ``limit=cpu``, its steps kept)
    cpu_seconds: int = 0
    wall_seconds: float = 0  # the same for the run's wall-clock limit (s; 0: none known)

    @classmethod
    def sandboxed(cls, **kwargs: Any) -> Limits:
        """A run in the sandbox: no C++ compiler, no GPU, no keyboard, network or files."""
        return cls(**kwargs, inductor=False, cuda_on_cpu=True, offline=True)
