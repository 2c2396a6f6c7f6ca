"""Backward and autograd.grad calls, intercepted: each one the code makes is a step.

``torch.autograd.backward`` and ``torch.autograd.grad`` are wrapped (patches.py; ``Tensor.backward``
looks the former up at call time), so failing calls are seen too. The engine's execution order
comes from one prehook on the roots calling ``torch._C._current_graph_task_execution_order()``;
on a small graph, or where a node may raise, a hook per node says which nodes really ran and
where a nan or an inf first appeared.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from gradstep.tracer.graph import Graph
from gradstep.tracer.guard import Guard
from gradstep.tracer.snapshots import Snapshots

if TYPE_CHECKING:
    from gradstep.tracer.recorder import Recorder

_seq_nr = torch._C._autograd._get_sequence_nr
_exec_order = torch._C._current_graph_task_execution_order
_TENSOR_BACKWARD = torch.Tensor.backward.__code__
_ANOMALY = re.compile(r"Function '(\w+)' returned nan values")
EXACT_ORDER_NODES = 256  # graphs up to this size get the execution order from a hook per node
_transform_level = torch._C._functorch.maybe_current_level  # not None inside a torch.func transform


@dataclass
class _Call:
    """A backward/grad call in flight: what the snippet asked for, and hooks' findings."""

    kind: str
    api: str
    line: int | None
    retain_graph: bool
    create_graph: bool
    ins: list[torch.Tensor]
    gradient: bool  # gradient= / grad_outputs= given
    outs: list[torch.Tensor]
    order_box: list  # the engine's execution order, captured by a root prehook
    input_nodes: dict  # nodes of inputs=, which the engine may capture without running
    ran: set  # input nodes that did run
    unusable_before: set[int]  # freed or stale before the call
    started: list | None = None  # nodes in the order they started, where a node may raise after running
    finished: set | None = None  # nodes whose post hooks ran (anomaly mode raises after those)
    rebuilt: int = 0  # autograd nodes built while the call ran without create_graph
    produced: list | None = None  # nodes whose output gradient first went non-finite (None: not hooked)


def _not_finite(grads) -> bool:
    """Any of a node's gradients (a tuple, None for an edge without one) holds a nan or an inf.

    Not checked (False) inside a torch.func transform (``is_grads_batched``: batched tensors have
    no single truth value), nor where the check itself fails: a tracer hook never raises into the
    snippet's backward."""
    if _transform_level() is not None:
        return False
    try:
        for g in grads:
            if g is not None and g.layout == torch.strided and (g.is_floating_point() or g.is_complex()):
                if not bool(torch.isfinite(g.detach()).all()):  # detached: builds no node under create_graph
                    return True
    except Exception:  # noqa: BLE001
        return False
    return False


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

        order_box: list = []
        produced: list = []  # nodes that turned finite gradients into non-finite ones, as they ran

        def capture_order(_grad_outputs):
            if not order_box:
                order_box.append(_exec_order())

        # Nodes of the inputs: under autograd.grad (or inputs=) the engine may only
        # capture their gradient without running them. (get_gradient_edge would build
        # a node of its own for a leaf: find its AccumulateGrad among known nodes.)
        input_nodes = {}
        for t in ins:
            node = t.grad_fn if t.grad_fn is not None else graph.accumulator(t)
            if node is not None:
                input_nodes[node] = None
        ran: set = set()
        handles.extend(r.register_prehook(capture_order) for r in dict.fromkeys(roots))
        for node in input_nodes:
            handles.append(node.register_prehook(lambda _g, node=node: ran.add(node)))
        started = finished = None
        small = len(graph.objs) <= EXACT_ORDER_NODES
        reach = (
            graph.reachable(graph.ids[r] for r in roots if r in graph.ids) if graph.raising or small else ()
        )
        if small or torch.is_anomaly_enabled() or not graph.raising.isdisjoint(reach):
            # A node may raise after the engine planned the nodes past it (anomaly mode checks
            # outputs after a node ran; a custom backward or a double backward torch does not
            # implement raises): a prehook on each node says what really started. Always on a
            # graph of a learner's size; on a big one (a hook per node costs ~2 us a call) only
            # where such a node is reachable.
            started, finished = [], set()

            def done(grad_inputs, grad_outputs, node) -> None:
                finished.add(node)
                # where a nan/inf first appears: this node's output gradient is not finite though
                # what it received is (one isfinite per gradient; the second only on a hit)
                if _not_finite(grad_inputs) and not _not_finite(grad_outputs):
                    produced.append(node)

            for nid in reach or graph.reachable(graph.ids[r] for r in roots if r in graph.ids):
                node = graph.objs[nid]
                handles.append(node.register_prehook(lambda _g, node=node: started.append(node)))
                handles.append(node.register_hook(lambda i, o, node=node: done(i, o, node)))

        return _Call(
            kind,
            api,
            line,
            retain_graph,
            create_graph,
            ins,
            gradient is not None,
            outs,
            order_box,
            input_nodes,
            ran,
            graph.freed | graph.stale.keys(),
            started,
            finished,
            produced=produced if started is not None else None,
        )

    def _record(self, rec: Recorder, call: _Call, error: BaseException | None, result) -> None:
        kind, line, retain_graph, create_graph = call.kind, call.line, call.retain_graph, call.create_graph
        ins, outs, order_box, input_nodes, ran = (
            call.ins,
            call.outs,
            call.order_box,
            call.input_nodes,
            call.ran,
        )
        unusable_before = call.unusable_before
        graph = self.graph
        ids = graph.ids
        order = graph.ids_of(order_box[0]) if order_box else []
        skipped = {ids[n] for n in input_nodes if n not in ran and n in ids}  # captured, never run
        if skipped:
            order = [nid for nid in order if nid not in skipped]
        failed = None
        if call.started is not None:
            order = graph.ids_of(call.started)
            if error is not None and order and _raised_in(call.started[-1], call.finished, error):
                failed, order = order[-1], order[:-1]
        elif error is not None and order:
            # The engine stops at the first node it cannot run: one freed before this
            # call, or one whose saved tensor was modified in place. (Nodes this call
            # ran before failing are freed now, so the freed set must be the old one.)
            graph.check_stale(mark_freed=False)
            for i, nid in enumerate(order):
                if nid in unusable_before or nid in graph.stale:
                    failed, order = nid, order[:i]
                    break
            # else: no node was unusable, so the engine ran its whole plan and the error
            # came after it (e.g. an unused input without allow_unused=True).
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
        if call.produced:
            step["nonfinite"] = graph.ids_of(call.produced)
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


def _raised_in(node, finished: set, error: BaseException) -> bool:
    """Did the call fail in ``node``, the last to start? It did not finish, or anomaly mode
    named it (its check runs after the node's post hooks); else the error came after the
    engine's plan (an unused input without allow_unused)."""
    if node not in finished:
        return True
    nan = _ANOMALY.match(str(error))
    return nan is not None and nan.group(1) == node.name()


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
