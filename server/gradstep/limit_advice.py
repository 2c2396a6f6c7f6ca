"""What a run stopped by one of the server's limits says: which limit, its value, and what to do.

The server's words (NOTE [the server's voice] in gradstep.voice): a run it killed (no trace), and a
run that stopped itself at a limit with the trace of what ran until then. Imports nothing heavy:
the checker and the child's tracer import it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from gradstep.settings import _var

# Each limit a run can hit: the Settings field that sets it (None: not a setting) and its words.
SETTINGS: dict[str, str | None] = {
    "memory": "memory_mb",
    "cpu": "cpu_seconds",
    "wall": "wall_seconds",
    "output": None,
}
RECORD_DOCS = "README: “Recording your own code”"
# What the gradstep command takes instead of a setting, where its option overrides the setting
# (`gradstep trace --timeout` sets the wall limit; the other limits are the settings' there too)
COMMAND_OPTIONS: dict[str, str] = {"wall": "--timeout"}


# NOTE [a run stops short of its limits]
# A run's tracer stops the code at a statement once its CPU or wall-clock time reaches
# ``stop_point`` of its budget (tracer/limits.py LimitWatch), keeping the rest to write its trace.
# The server takes a run's word that it stopped so only where the sandbox measured at least that
# much use, less ``STOP_TOLERANCE`` (gradstep.voice Observed.saw_stop): the two read this one rule.
STOP_MARGIN = 0.15  # of the budget, at least STOP_MIN_MARGIN s: narration, packing, writing a big trace
STOP_MIN_MARGIN = 0.5
STOP_TOLERANCE = 0.25  # s: the child's clock and the runner's are read at different moments


def stop_margin(budget: float) -> float:
    """The seconds of ``budget`` a run keeps for writing its trace."""
    return max(STOP_MIN_MARGIN, STOP_MARGIN * max(budget, 0.0))


def stop_point(budget: float) -> float:
    """The seconds of ``budget`` at which a run stops itself."""
    return budget - stop_margin(budget)


def value_text(limit: str, value: float | None) -> str:
    """The limit's value as the message says it: ``1,024 MB of memory``."""
    if value is None:
        return {"memory": "memory", "cpu": "CPU time", "wall": "time", "output": "output"}.get(limit, limit)
    if limit == "memory":
        return f"{value:,.0f} MB of memory"
    if limit == "cpu":
        return f"{value:g} s of CPU time"
    if limit == "wall":
        return f"{value:g} s of wall-clock time"
    if limit == "output":
        return f"a {value / 2**20:g} MB trace"
    return f"{value:g} ({limit})"


def advice(limit: str, shrink: str = "") -> str:
    """What to do about ``limit``: a smaller size of the same code, ``gradstep.record()`` in one's
    own process, or the deployment's setting. ``shrink``: which numbers to shrink, when known."""
    if limit in ("cpu", "wall"):
        smaller = "run the same code with fewer iterations or a smaller width"
    else:
        smaller = "run the same code with a smaller width, which draws the same graph"
        smaller += (f" ({shrink})" if shrink else "") + ", or with fewer layers"
    parts = [
        smaller,
        f"record it in your own process with gradstep.record(), which has no such limit ({RECORD_DOCS})",
    ]
    setting = SETTINGS.get(limit)
    if setting is not None:
        option = COMMAND_OPTIONS.get(limit)
        command = f" (with the gradstep command, a larger {option})" if option else ""
        parts.append(f"on your own server, raise {_var(setting)}{command}")
    return "To see it whole: " + "; or ".join(parts) + "."


def largest(tensors: Iterable[tuple[str, list[int]]], n: int = 2) -> str:
    """The ``n`` largest shapes among named tensors (name, shape), as the advice names them: what a
    smaller width shrinks first (one name per shape, with how many more share it); "" when none."""
    by_shape: dict[tuple[int, ...], list[str]] = {}
    for name, shape in tensors:
        if shape:
            by_shape.setdefault(tuple(shape), []).append(name)
    sized = sorted(by_shape.items(), key=lambda item: (-math.prod(item[0]), item[0]))
    picked = [
        f"{names[0]} {'×'.join(map(str, shape))}" + (f" and {len(names) - 1} more" if len(names) > 1 else "")
        for shape, names in sized[:n]
    ]
    return f"its largest tensors: {'; '.join(picked)}" if picked else ""


def out_of_memory(error: dict | None) -> bool:
    """Whether the code's failure is an allocation the run's memory limit refused: Python's
    MemoryError, or torch's allocator (RuntimeError "... can't allocate memory ...")."""
    if not error:
        return False
    return error.get("type") == "MemoryError" or "can't allocate memory" in (error.get("message") or "")


def memory_stop(error: dict, memory_mb: int, steps: int, shrink: str) -> str:
    """The message of a run that stopped itself at the memory limit, with ``steps`` recorded."""
    where = f"Line {error['line']}" if error.get("line") else "The code"
    asked = re.search(r"tried to allocate (\d+) bytes", error.get("message") or "")
    more = f" (it asked for {_mb(int(asked.group(1)))} more)" if asked else ""
    recorded = (
        f"The graph shows the {steps} step{'' if steps == 1 else 's'} recorded before it."
        if steps
        else "It stopped before recording any step."
    )
    return (
        f"{where} needed more memory than a run may use here, {value_text('memory', memory_mb)}{more}. "
        f"{recorded} {advice('memory', shrink)}"
    )


def _mb(size: int) -> str:
    return f"{size / 2**20:.1f} MB" if size < 10 * 2**20 else f"{size / 2**20:,.0f} MB"


def time_stop(error: dict, limit: str, value: float | None, used: float, steps: int) -> str:
    """The message of a run that stopped itself short of its CPU (``limit`` ``cpu``) or wall-clock
    (``wall``) limit, with ``steps`` recorded."""
    where = f"at line {error['line']}" if error.get("line") else ""
    recorded = (
        f"The graph shows the {steps} step{'' if steps == 1 else 's'} recorded before it."
        if steps
        else "It stopped before recording any step."
    )
    return (
        f"The run had used {used:.1f} s of its {value_text(limit, value)} and was stopped {where}, "
        f"with time left to write what it recorded. {recorded} {advice(limit)}"
    ).replace("  ", " ")


def killed(limit: str, detail: str) -> str:
    """A run the server stopped (no trace): ``detail``, its own sentence, then what to do."""
    return f"{detail} Nothing it recorded could be kept. {advice(limit)}"
