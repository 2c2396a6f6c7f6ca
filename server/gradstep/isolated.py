"""Run the tracer in a separate process with a wall-clock limit.

A plain child process: no confinement yet (the sandbox hardens this path).
Whatever happens to the child, the caller gets a trace with a clear status.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import orjson

from gradstep.schema import VERSION


def failed_trace(code: str, status: str, message: str, limit: str | None = None) -> dict:
    return {
        "version": VERSION,
        "status": status,
        "error": {"type": status, "message": message, "line": None},
        "limit": limit,
        "code": code,
        "steps": [],
        "nodes": [],
    }


def trace_in_subprocess(code: str, timeout: float = 30.0) -> dict:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}
    env.update(OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gradstep.tracer"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(code.encode("utf-8"), timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return failed_trace(code, "timeout", f"The snippet ran longer than {timeout:g} s and was stopped.")
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        return failed_trace(code, "crashed", f"The process running the snippet was killed by {name}.")
    try:
        return orjson.loads(out)
    except orjson.JSONDecodeError:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        return failed_trace(code, "crashed", f"The tracer produced no trace ({tail[0]}).")
