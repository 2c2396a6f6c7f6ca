"""Facts the rules and the checks read from a trace (plain dicts, as record() builds them)."""

from __future__ import annotations

import math

from gradstep import grad_equality
from gradstep.grad_equality import ACROSS_RUNS, flat_values
from gradstep.schema import CALL_KINDS
from gradstep.trace_dicts import GradDict, StepDict, TraceDict

FREED_MARK = "backward through the graph a second time"
STALE_MARK = "modified by an inplace operation"
NON_SCALAR_MARK = "grad can be implicitly created only for scalar outputs"
INTEGER_MARKS = ("tensors of floating point", "can require gradients")  # wording varies by entry point
NON_LEAF_MARK = "that is not a leaf Tensor is being accessed"


def is_integer_requires_grad(message: str) -> bool:
    lowered = message.lower()
    return all(mark in lowered for mark in INTEGER_MARKS)


def calls(trace: TraceDict) -> list[StepDict]:
    """The backward/grad call steps (not the forward lines, nor the optimizer's update steps)."""
    return [s for s in trace.get("steps") or () if s["kind"] in CALL_KINDS]


def failed_node(step: StepDict) -> int | None:
    return next((st["id"] for st in step.get("nodes") or () if st.get("failed")), None)


def state(step: StepDict, nid: int) -> dict:
    return next((st for st in step.get("nodes") or () if st["id"] == nid), {})


def first_step_where(trace: TraceDict, nid: int, flag: str, before: int) -> StepDict | None:
    """The first step (before index ``before``) that shows node ``nid`` with ``flag`` set."""
    for step in (trace.get("steps") or [])[:before]:
        for st in step.get("nodes") or ():
            if st["id"] == nid and st.get(flag):
                return step
    return None


def freed_by(trace: TraceDict, nid: int, before: int) -> StepDict | None:
    """The call step that released node ``nid``'s saved tensors (a call that ran it without retaining)."""
    step = first_step_where(trace, nid, "freed", before)
    if step is None or step["kind"] not in CALL_KINDS:
        return None
    return step


def grads(step: StepDict | None) -> dict[str, GradDict]:
    """name -> .grad record of every tensor with a grad at ``step``."""
    if step is None:
        return {}
    return {t["name"]: t["grad"] for t in step.get("tensors") or () if t.get("grad")}


def final_grads(trace: TraceDict) -> dict[str, GradDict]:
    steps = trace.get("steps") or []
    return grads(steps[-1]) if steps else {}


def _close(a: float | None, b: float | None, rel: float = 1e-4) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-6 * max(1.0, abs(a), abs(b)))


def grad_values(grad: GradDict) -> list | None:
    values = grad.get("values")
    return None if values is None else flat_values(values)


def same_grad(a: GradDict | None, b: GradDict | None) -> bool:
    """A diagnosis never hangs on one unit of a last digit: it compares at the across-runs tolerance,
    also within a run (an iteration that recomputes a gradient, a fix beside its original)."""
    return grad_equality.same_grad(a, b, ACROSS_RUNS)


def same_grads(a: dict[str, dict], b: dict[str, dict]) -> bool:
    return grad_equality.same_grads(a, b, ACROSS_RUNS)


def proportional_grads(a: dict[str, dict], b: dict[str, dict]) -> bool:
    """Every grad of ``a`` is the same positive multiple of the one in ``b``."""
    if not a or a.keys() != b.keys():
        return False
    ratio = None
    for k in a:
        na, nb = a[k]["norm"], b[k]["norm"]
        if na is None or nb is None:
            return False
        if nb == 0 or na == 0:
            if na != nb:
                return False
            continue
        r = na / nb
        if ratio is None:
            ratio = r
        elif not _close(r, ratio, 1e-3):
            return False
        va, vb = grad_values(a[k]), grad_values(b[k])
        if va is not None and vb is not None:
            if not all(isinstance(v, int | float) for v in va + vb):  # "nan", "inf": no ratio holds
                return False
            scale = max(abs(v) for v in va)
            if any(abs(x - r * y) > 2 * ACROSS_RUNS * scale for x, y in zip(va, vb, strict=True)):
                return False
    return True


def runs_cleanly(trace: TraceDict) -> bool:
    return trace["status"] == "ok" and not any(s.get("error") for s in trace.get("steps") or ())


def grad_growth(trace: TraceDict, line: int) -> dict[str, list[dict]]:
    """For each tensor: its .grad after each successful call at ``line`` (in order)."""
    out: dict[str, list[dict]] = {}
    for step in calls(trace):
        if step.get("line") == line and not step.get("error"):
            for name, grad in grads(step).items():
                out.setdefault(name, []).append(grad)
    return out


def accumulations(trace: TraceDict, line: int) -> dict[str, list[float]]:
    """Tensors whose non-zero .grad a later call at ``line`` added to: name -> norms after each such call."""
    steps = trace.get("steps") or []
    out: dict[str, list[float]] = {}
    seen: dict[str, list[float]] = {}
    for step in calls(trace):
        if step.get("line") != line or step.get("error"):
            continue
        before = grads(steps[step["index"] - 1]) if step["index"] > 0 else {}
        for name, grad in grads(step).items():
            seen.setdefault(name, []).append(grad["norm"] or 0.0)
            old = before.get(name)
            if old is not None and (old["norm"] or 0.0) > 0 and not same_grad(old, grad):
                out[name] = seen[name]
    return {name: seen[name] for name in out}
