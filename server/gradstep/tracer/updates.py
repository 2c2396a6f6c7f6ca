"""Optimizer calls, intercepted: each one the code makes is an "update" step.

``opt.zero_grad()`` and ``model.zero_grad()``, an optimizer's ``step()``, ``clip_grad_norm_`` /
``clip_grad_value_`` and a learning-rate scheduler's ``step()`` change ``.grad`` and the parameters
between two backward calls; as steps of their own they say what they did: which ``.grad`` they set
to None, zeroed or clipped (with the norms before and after), how far each parameter moved (the
L2 norm of its update) and the learning rates before and after.

An optimizer's ``step`` is seen through torch's global step hooks (every optimizer class's step is
wrapped by torch to call them); the rest are wrapped while a run lasts (patches.py). A call made
inside another one (``zero_grad`` inside a closure run by ``step``, a chained scheduler's own
schedulers) is part of the outer call's step. Past ``Limits.line_repeats`` executions of its line a
call gets a step once per backward call (``Loops.update_shown``): a training loop shows its
optimizer in every iteration it shows a backward of, and a line of optimizer calls with no backward
between them folds as a forward line does (its calls run untouched).
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
from typing import TYPE_CHECKING, Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

if TYPE_CHECKING:
    from types import FrameType

    from gradstep.tracer.recorder import Recorder

_transform_level = torch._C._functorch.maybe_current_level
NORM_DIGITS = 9  # as a gradient's norm (tracer/grads.py)


def _number(v: float) -> float | None:
    v = float(v)
    return float(f"{v:.{NORM_DIGITS}g}") if math.isfinite(v) else None


def _norms(tensors: list[torch.Tensor]) -> list[float | None]:
    """L2 norms, read in one go (halves normed in float32, as gradients are)."""
    if not tensors:
        return []
    floats = [t.float() if t.dtype in (torch.float16, torch.bfloat16) else t for t in tensors]
    return [_number(v) for v in torch.stack(torch._foreach_norm(floats)).tolist()]


def _on_stack(frame: FrameType) -> bool:
    f = sys._getframe(1)
    while f is not None:
        if f is frame:
            return True
        f = f.f_back
    return False


def _params(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    return [p for p in value if isinstance(p, torch.Tensor)]


def _lrs(optimizer: Any) -> list[float | None]:
    return [_number(g["lr"]) if "lr" in g else None for g in getattr(optimizer, "param_groups", ())]


class Updates:
    """The optimizer calls of one recording."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.active: FrameType | None = None  # the frame of the update call running now
        self._pending: tuple | None = None  # an optimizer step between its pre and post hook

    # -- when a call is a step ---------------------------------------------------

    def _line(self, frame: FrameType) -> tuple[bool, int | None]:
        """Does a call made from ``frame`` get a step (and at which line)?"""
        rec = self.rec
        if rec.guard.busy or rec.calls.running or _transform_level() is not None:
            return False, None
        if torch.compiler.is_compiling():
            return False, None
        if self.active is not None:
            if _on_stack(self.active):
                return False, None  # inside another update call: part of its step
            self.active = None  # that call raised: it is over
        if rec.snapshots.full():
            return False, None
        line = rec.line_at(frame)
        return rec.loops.update_shown(line), line

    # -- the calls -----------------------------------------------------------------

    def wrap(self, orig, op: str, params_of, extra=None):
        """``orig`` as the code calls it: ``params_of(args, kwargs)`` says which parameters it
        touches; ``extra(args, kwargs)`` what else the step records of its arguments."""

        @functools.wraps(orig)
        def traced(*args, **kwargs):
            caller = sys._getframe(1)
            if op == "lr_step" and caller.f_code.co_name == "_initial_step":
                return orig(*args, **kwargs)  # the scheduler's constructor setting the first rate
            shown, line = self._line(caller)
            if not shown:
                return orig(*args, **kwargs)
            if op.startswith("clip"):
                args, kwargs = _materialized(args, kwargs)
            try:
                self.rec.guard.busy = True
                params = params_of(args, kwargs)
                before = self._before(op, args, params)
            except Exception as e:  # noqa: BLE001 - the tracer's failure: run this call untraced
                self.rec.guard.note(op, e)
                return orig(*args, **kwargs)
            finally:
                self.rec.guard.busy = False
            self.active = sys._getframe(0)
            error: BaseException | None = None
            result = None
            try:
                result = orig(*args, **kwargs)
            except BaseException as e:
                error = e
            finally:
                self.active = None
            info = extra(args, kwargs) if extra is not None else {}
            self._record(op, line, args, params, before, info, result, error)
            if error is not None:
                raise error
            return result

        traced.__wrapped__ = orig
        return traced

    def step_pre_hook(self, optimizer, args, kwargs) -> None:
        """torch's global optimizer step pre-hook: an optimizer's step starts."""
        self._pending = None
        frame = sys._getframe(1)
        shown, line = self._line(frame)
        if not shown:
            return
        try:
            self.rec.guard.busy = True
            params = [p for g in optimizer.param_groups for p in g["params"]]
            before = self._before("step", (optimizer,), params)
        except Exception as e:  # noqa: BLE001
            self.rec.guard.note("step", e)
            return
        finally:
            self.rec.guard.busy = False
        self.active = frame
        self._pending = (optimizer, line, params, before)

    def step_post_hook(self, optimizer, args, kwargs) -> None:
        pending, self._pending = self._pending, None
        if pending is None or pending[0] is not optimizer:
            return
        self.active = None
        _, line, params, before = pending
        self._record("step", line, (optimizer,), params, before, {}, None, None)

    # -- what a call did -------------------------------------------------------------

    def _before(self, op: str, args: tuple, params: list[torch.Tensor]) -> dict:
        with torch.no_grad():
            if op == "zero_grad":
                return {"had": [p.grad is not None for p in params]}
            if op == "step":
                return {"values": [p.detach().clone() for p in params], "lr": _lrs(args[0])}
            if op in ("clip_grad_norm", "clip_grad_value"):
                return {"norms": _norms([p.grad for p in params if p.grad is not None])}
            if op == "lr_step":
                return {"lr": _lrs(getattr(args[0], "optimizer", None))}
        return {}

    def _record(
        self,
        op: str,
        line: int | None,
        args: tuple,
        params: list,
        before: dict,
        info: dict,
        result,
        error: BaseException | None,
    ) -> None:
        rec = self.rec
        if rec.snapshots.full():
            return
        rec.guard.busy = True
        try:
            rec.flush(line)  # what the calling line built before the call
            rec.emit_folded()
            update = self._update(op, args, params, before, info, result, error)
            step: dict[str, Any] = {"kind": "update", "line": line, "update": update}
            if error is not None:
                step["error"] = {"type": type(error).__name__, "message": str(error), "line": line}
            rec.snapshots.take(step, rec.names_at)
        except Exception as e:  # noqa: BLE001
            rec.guard.note(op, e)
        finally:
            rec.guard.busy = False

    def _update(self, op: str, args: tuple, params: list, before: dict, info: dict, result, error) -> dict:
        names = self.rec.names_at(sys._getframe(0))
        target = args[0] if args else None
        update: dict[str, Any] = {"op": op, **info}
        if op in ("zero_grad", "step", "lr_step"):
            update["of_class"] = type(target).__name__
        changes = [{"name": names.name_of(p) or "?"} for p in params]
        with torch.no_grad():
            if op == "zero_grad":
                for change, p, had in zip(changes, params, before["had"], strict=True):
                    if had:
                        change["grad"] = "set_to_none" if p.grad is None else "zeroed"
            elif op == "step" and error is None:
                deltas = [p.detach() - v for p, v in zip(params, before["values"], strict=True)]
                for change, norm in zip(changes, _norms(deltas), strict=True):
                    change["delta_norm"] = norm
                    change["updated"] = norm != 0
                update["lr_before"] = before["lr"]
            elif op in ("clip_grad_norm", "clip_grad_value"):
                have = [i for i, p in enumerate(params) if p.grad is not None]
                after = _norms([params[i].grad for i in have])
                for i, old, new in zip(have, before["norms"], after, strict=True):
                    changes[i]["grad_norm_before"] = old
                    changes[i]["grad_norm_after"] = new
                    if old != new:
                        changes[i]["grad"] = "clipped"
                if op == "clip_grad_norm":
                    norm_type = float(info.get("norm_type", 2.0))
                    grads = [params[i].grad for i in have]
                    if isinstance(result, torch.Tensor):
                        update["total_norm_before"] = _number(result)
                    if grads:
                        norms = [torch.linalg.vector_norm(g, norm_type) for g in grads]
                        total = torch.linalg.vector_norm(torch.stack(norms), norm_type)
                        update["total_norm_after"] = _number(total)
            if op in ("step", "lr_step"):
                optimizer = target if op == "step" else getattr(target, "optimizer", None)
                if op == "lr_step":
                    update["lr_before"] = before["lr"]
                update["lr_after"] = _lrs(optimizer)
        update["params"] = changes
        return update


def _materialized(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``parameters=model.parameters()`` (a generator) as a list, so that reading it leaves it
    whole for torch."""
    if args and not isinstance(args[0], torch.Tensor | list | tuple):
        args = (list(args[0]), *args[1:])
    params = kwargs.get("parameters")
    if params is not None and not isinstance(params, torch.Tensor | list | tuple):
        kwargs = {**kwargs, "parameters": list(params)}
    return args, kwargs


def _clip_params(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    return _params(args[0] if args else kwargs["parameters"])


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: Any) -> Any:
    return args[i] if len(args) > i else kwargs.get(name, default)


def _clip_norm_info(args: tuple, kwargs: dict) -> dict:
    return {
        "max_norm": _number(_arg(args, kwargs, 1, "max_norm", math.nan)),
        "norm_type": float(_arg(args, kwargs, 2, "norm_type", 2.0)),
    }


def _clip_value_info(args: tuple, kwargs: dict) -> dict:
    return {"clip_value": _number(_arg(args, kwargs, 1, "clip_value", math.nan))}


def _zero_grad_info(args: tuple, kwargs: dict) -> dict:
    return {"set_to_none": bool(_arg(args, kwargs, 1, "set_to_none", True))}


def _optimizer_params(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    return [p for g in args[0].param_groups for p in g["params"]]


def _module_params(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    return list(args[0].parameters())


def _no_params(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    return []


def _schedulers() -> list[type]:
    """The scheduler classes whose own ``step`` the code may call."""
    module = torch.optim.lr_scheduler
    base = module.LRScheduler
    return [
        c
        for c in vars(module).values()
        if isinstance(c, type) and issubclass(c, base) and "step" in c.__dict__
    ]


@contextlib.contextmanager
def installed(rec: Recorder):
    """The optimizer calls traced while the block runs, as they were after it."""
    updates = rec.updates
    clip = torch.nn.utils.clip_grad
    utils = torch.nn.utils
    saved: list[tuple[Any, str, Any]] = [
        (torch.optim.Optimizer, "zero_grad", torch.optim.Optimizer.zero_grad),
        (torch.nn.Module, "zero_grad", torch.nn.Module.zero_grad),
    ]
    saved += [
        (owner, name, getattr(owner, name))
        for owner in (clip, utils)
        for name in ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm")
    ]
    saved += [(c, "step", c.__dict__["step"]) for c in _schedulers()]
    for owner, name, orig in saved:
        if name == "zero_grad":
            params = _optimizer_params if owner is torch.optim.Optimizer else _module_params
            new = updates.wrap(orig, "zero_grad", params, _zero_grad_info)
        elif name == "step":
            new = updates.wrap(orig, "lr_step", _no_params)
        elif name == "clip_grad_value_":
            new = updates.wrap(orig, "clip_grad_value", _clip_params, _clip_value_info)
        else:
            new = updates.wrap(orig, "clip_grad_norm", _clip_params, _clip_norm_info)
        setattr(owner, name, new)
    pre = register_optimizer_step_pre_hook(updates.step_pre_hook)
    post = register_optimizer_step_post_hook(updates.step_post_hook)
    try:
        yield
    finally:
        pre.remove()
        post.remove()
        for owner, name, orig in saved:
            setattr(owner, name, orig)
