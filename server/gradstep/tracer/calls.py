"""Backward and autograd.grad calls, intercepted: each one the code makes is a step.

``torch.autograd.backward`` and ``torch.autograd.grad`` are wrapped (patches.py; ``Tensor.backward``
looks the former up at call time), so failing calls are seen too. A call's arguments say what it
asks for; what the engine did is watched by engine.py.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from gradstep.tracer.engine import Watch
from gradstep.tracer.graph import Graph
from gradstep.tracer.guard import Guard
from gradstep.tracer.snapshots import Snapshots

if TYPE_CHECKING:
    from gradstep.tracer.recorder import Recorder

_seq_nr = torch._C._autograd._get_sequence_nr
_TENSOR_BACKWARD = torch.Tensor.backward.__code__
_transform_level = torch._C._functorch.maybe_current_level  # not None inside a torch.func transform


@dataclass
class _Call:
    """A backward/grad call in flight: what the code asked for, and what the engine did."""

    kind: str
    api: str
    line: int | None
    retain_graph: bool
    create_graph: bool
    ins: list[torch.Tensor]
    gradient: bool  # gradient= / grad_outputs= given
    outs: list[torch.Tensor]
    watch: Watch  # what the engine does, seen by hooks
    rebuilt: int = 0  # autograd nodes built while the call ran without create_graph


class Calls:
    """The backward/grad calls of one recording. The recorder handed to ``wrap`` says where the
    code is and what it can name, and shows what the calling line built before the call."""

    def __init__(self, graph: Graph, snapshots: Snapshots, guard: Guard) -> None:
        self.graph = graph
        self.snapshots = snapshots
        self.guard = guard
        self.running = False  # a call is in flight: code running now is run by the engine (a hook)
        self.lines: set[int] = set()  # lines of the code the engine ran during the current call

    def wrap(self, orig, kind: str, rec: Recorder):
        """``orig`` (torch.autograd.backward or grad) as the code calls it while ``rec`` records it."""
        sig = inspect.signature(orig)

        def traced(*args, **kwargs):
            if self.running or self.guard.busy:  # re-entrant: inside a hook, or run by the tracer's own reads
                return orig(*args, **kwargs)
            if _transform_level() is not None:  # torch.func's own use of autograd (see Recorder._on_line)
                return orig(*args, **kwargs)
            if torch.compiler.is_compiling():  # torch.compile tracing its joint graph, on fake tensors
                return orig(*args, **kwargs)
            caller = sys._getframe(1)
            api = "torch.autograd.grad" if kind == "grad" else "torch.autograd.backward"
            if caller.f_code is _TENSOR_BACKWARD:
                api = "Tensor.backward"
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:  # let torch itself say what is wrong with the arguments
                return orig(*args, **kwargs)
            return self._call(rec, orig, kind, api, bound, caller)

        traced.__wrapped__ = orig
        traced.__doc__ = orig.__doc__
        return traced

    def _call(self, rec: Recorder, orig, kind: str, api: str, bound: inspect.BoundArguments, caller) -> Any:
        handles: list = []
        _materialize(bound)
        self.guard.busy = True
        try:
            call = self._prepare(rec, kind, api, bound, caller, handles)
        except Exception as e:  # noqa: BLE001 - the tracer's failure: run this call untraced
            self.guard.note(api, e)
            for h in handles:
                h.remove()
            return orig(*bound.args, **bound.kwargs)
        finally:
            self.guard.busy = False
        line = call.line
        graph = self.graph
        seq_before = _seq_nr()
        error: BaseException | None = None
        result = None
        self.running = True
        self.lines = set()
        try:
            with torch.autograd.set_multithreading_enabled(False):
                result = orig(*bound.args, **bound.kwargs)
        except BaseException as e:
            error = e
        finally:
            self.running = False
            for h in handles:
                h.remove()
        seq_after = _seq_nr()
        if seq_after != seq_before:
            graph.lines.mark(seq_before, line)
        rec.seq_last = seq_after  # the call's own nodes are accounted for: the next line's start after them
        call.rebuilt = 0 if call.create_graph else seq_after - seq_before  # a checkpoint's recomputed forward

        if not self.snapshots.full():
            self.guard.busy = True
            try:
                self._record(rec, call, error, result)
            except Exception as e:  # noqa: BLE001
                self.guard.note(api, e)
            finally:
                self.guard.busy = False
        if error is not None:
            raise error
        return result

    def _prepare(
        self, rec: Recorder, kind: str, api: str, bound: inspect.BoundArguments, caller, handles: list
    ) -> _Call:
        a = bound.arguments
        if kind == "grad":
            outputs, inputs, gradient = a.get("outputs"), a.get("inputs"), a.get("grad_outputs")
        else:
            outputs, inputs = a.get("tensors"), a.get("inputs")
            gradient = a.get("grad_tensors", a.get("grad_variables"))
        create_graph = bool(a.get("create_graph", False))
        retain_graph = a.get("retain_graph")
        retain_graph = create_graph if retain_graph is None else bool(retain_graph)
        line = rec.line_at(caller)
        outs, ins = _tensors(outputs), _tensors(inputs)
        roots = [t.grad_fn for t in outs if t.grad_fn is not None]

        rec.flush(line, roots)  # this line may have built the very graph it backwards through
        rec.emit_folded()
        graph = self.graph
        if any(r not in graph.ids for r in roots):
            names = rec.names_at(caller)
            graph.discover(roots, len(self.snapshots.steps), line, False, names)

        watch = Watch(graph, roots, ins, handles)
        return _Call(kind, api, line, retain_graph, create_graph, ins, gradient is not None, outs, watch)

    def _record(self, rec: Recorder, call: _Call, error: BaseException | None, result) -> None:
        kind, line, retain_graph, create_graph = call.kind, call.line, call.retain_graph, call.create_graph
        ins, outs = call.ins, call.outs
        graph = self.graph
        order, failed = call.watch.outcome(error)
        if not retain_graph:
            graph.check_freed(order)
        step: dict[str, Any] = {
            "kind": kind,
            "line": line,
            "api": call.api,
            "retain_graph": retain_graph,
            "create_graph": create_graph,
            "gradient": call.gradient,
        }
        if ins:
            names = rec.names_at(sys._getframe(0))
            step["inputs"] = [names.name_of(t) or "?" for t in ins]
        if self.lines:
            step["ran_lines"] = sorted(self.lines)
        if call.rebuilt:
            step["rebuilt"] = call.rebuilt
        if error is not None:
            step["error"] = {"type": type(error).__name__, "message": str(error), "line": line}
        if call.watch.produced:
            step["nonfinite"] = graph.ids_of(call.watch.produced)
        extra_roots = [t.grad_fn for t in outs if t.grad_fn is not None]
        returned = None
        if kind == "grad" and error is None and result is not None:
            returned = list(result.values()) if isinstance(result, dict) else list(result)
            extra_roots += [g.grad_fn for g in returned if g is not None and g.grad_fn is not None]
        run = dict(zip(order, range(len(order)), strict=True))
        if failed is not None:
            run[failed] = len(order)
        self.snapshots.take(
            step,
            rec.names_at,
            extra_roots,
            run=run,
            failed=failed,
            grad_graph=create_graph,
            returned=returned,
        )
        rec.loops.called()  # the optimizer calls after it get steps again (Loops.update_shown)


def _tensors(value) -> list[torch.Tensor]:
    if value is None:
        return []
    if isinstance(value, torch.Tensor | torch.autograd.graph.GradientEdge):
        value = [value]
    elif isinstance(value, dict):  # autograd.grad(loss, dict(model.named_parameters()))
        value = value.values()
    return [t for t in value if isinstance(t, torch.Tensor)]


def _materialize(bound: inspect.BoundArguments) -> None:
    """Arguments given as one-shot iterators (``inputs=model.parameters()``) become lists,
    so the tracer reading them leaves them whole for torch."""
    for key, value in bound.arguments.items():
        if isinstance(value, Iterator):
            bound.arguments[key] = list(value)
