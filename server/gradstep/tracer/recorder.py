"""Run a snippet and record its autograd graph step by step.

Forward steps come from markers compiled into the snippet before each of its
statements (lines.py): a line whose execution moved autograd's sequence
counter built nodes. Backward
steps come from wrapping ``torch.autograd.backward`` and ``torch.autograd.grad``
(``Tensor.backward`` looks the former up at call time), so failing calls are
seen too. The engine's execution order comes from one prehook on the roots
calling ``torch._C._current_graph_task_execution_order()``.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from gradstep.schema import VERSION
from gradstep.trace_dicts import TraceDict
from gradstep.tracer import errors, lines, passes, patches
from gradstep.tracer.capture import Output, Warnings
from gradstep.tracer.devices import CudaUse
from gradstep.tracer.graph import Graph
from gradstep.tracer.guard import Guard, guarded
from gradstep.tracer.limits import Limits
from gradstep.tracer.loops import Loops
from gradstep.tracer.names import SNIPPET_FILENAME, ModuleIndex, Names, frame_namespaces, scan, snippet_frames
from gradstep.tracer.offline import OfflineUse
from gradstep.tracer.snapshots import Snapshots

_NO_CUDA = re.compile(r"not compiled with CUDA|no NVIDIA driver|CUDA is not available|CUDA driver", re.I)
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


class Recorder:
    # what the code's output and warnings go to (a live recording's also show where the user looks)
    output_type: type[Output] = Output
    warnings_type: type[Warnings] = Warnings

    def __init__(self, code: str, limits: Limits):
        self.code = code
        self.limits = limits
        self.globals: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        self.steps: list[dict] = []
        self.guard = Guard(self.steps)
        self.out = self.output_type(limits.max_stdout)
        self.warnings = self.warnings_type(self.current_line)
        self.seq_base = _seq_nr()
        self.seq_last = self.seq_base
        self.graph = Graph(self.seq_base, limits.max_nodes, passes.chosen())
        self.snapshots = Snapshots(
            self.steps, self.graph, self.guard, self.out, self.warnings, limits.max_steps, limits.max_values
        )
        self.line: int | None = None  # snippet line executing now
        self.loops = Loops(limits.line_repeats)
        self.in_call = False
        self.transformed: set[int | None] = set()  # lines that ran inside a torch.func transform
        self.call_lines: set[int] = set()  # snippet lines the engine ran during the current call
        self.forward_ad_lines: set[int | None] = set()  # lines that entered forward_ad.dual_level
        self.compile_lines: set[int | None] = set()  # lines whose torch.compile ran with aot_eager
        self.cuda = CudaUse()  # what the snippet asked of CUDA (Limits.cuda_on_cpu)
        self.offline = OfflineUse()  # what it reached for that a sandboxed run lacks (Limits.offline)
        self.built = False  # nodes were built since the last step...
        self.built_line: int | None = None  # ...by this line
        self.check_release = False
        self.callers: list[int | None] = []  # lines that called the snippet's functions
        self.module_index = ModuleIndex()
        self.module_stack: list[tuple[int, str]] = []  # (id, class name) of modules running

    # -- running -------------------------------------------------------------

    def run(self) -> dict:
        try:
            tree = ast.parse(self.code, SNIPPET_FILENAME)
            compiled = compile(lines.instrument(tree), SNIPPET_FILENAME, "exec", dont_inherit=True)
        except SyntaxError as e:
            return self._result("error", errors.syntax_error(e))
        self.globals.update(
            {lines.LINE: self._on_line, lines.ENTER: self._on_enter, lines.EXIT: self._on_exit}
        )
        error = None
        with patches.patched(self):
            try:
                exec(compiled, self.globals)
            except SystemExit as e:
                if e.code not in (None, 0):
                    error = errors.snippet_error(e, self.code)
            except BaseException as e:  # the snippet's own failure is part of the trace
                error = errors.snippet_error(e, self.code)
                self.cuda.failed(e)
                self.offline.failed(e)
            self._finish()
        try:
            return self._result("error" if error else "ok", error)
        finally:
            self._let_go()

    def _let_go(self) -> None:
        """Free the snippet's objects now, as a plain run does when its globals go.

        The markers in the snippet's globals point back at this recorder (and it at
        them): left alone, that cycle would keep the model and its graph alive until
        the next full garbage collection.
        """
        self.globals.clear()
        self.graph.objs.clear()
        self.graph.ids.clear()
        self.module_index.clear()
        self.warnings.close()

    @guarded
    def _finish(self) -> None:
        if not self.snapshots.full():
            self._flush(self.line)
            self._emit_folded()

    def _result(self, status: str, error: dict | None) -> dict:
        capped = (("steps", self.snapshots.capped), ("stdout", self.out.dropped), ("nodes", self.graph.full))
        return {
            "version": VERSION,
            "status": status,
            "error": error,
            "stdout": self.out.text(),
            "code": self.code,
            "torch": torch.__version__,
            "nodes": self.graph.table,
            "steps": self.steps,
            "warnings": self.warnings.items,
            "truncated": [what for what, hit in capped if hit],
            "notes": self._notes(error),
        }

    def _notes(self, error: dict | None) -> list[str]:
        notes = self.cuda.notes() if self.limits.cuda_on_cpu else []
        if not self.limits.cuda_on_cpu and error and _NO_CUDA.search(error["message"]):
            notes.append(
                "This machine has no GPU, so CUDA code cannot run here. Run the snippet on the CPU "
                "(drop .cuda() and device='cuda'): autograd behaves the same."
            )
        if self.transformed:
            where = self.listed(self.transformed)
            notes.append(
                f"Line(s) {where} ran inside a torch.func transform (grad, vjp, jacrev, vmap…): functorch "
                "differentiates there with its own wrapped tensors, so those inner steps are not drawn; "
                "what the transform returned is."
            )
        if self.forward_ad_lines:
            where = self.listed(self.forward_ad_lines)
            notes.append(
                f"Line(s) {where} use forward-mode AD (torch.autograd.forward_ad): dual tensors carry their "
                "tangents forward with the values and build no backward graph. gradstep draws reverse mode, so "
                "the dual computation is not drawn; its prints are in the output."
            )
        if self.compile_lines:
            where = self.listed(self.compile_lines)
            notes.append(
                f"torch.compile at line(s) {where} ran with its aot_eager backend: this sandbox has no C++ "
                "compiler for inductor, the default. Autograd sees the same graph either way (one "
                "CompiledFunctionBackward node for the compiled region); only the generated kernels differ."
            )
        if self.limits.offline:
            notes.extend(self.offline.notes())
        notes.extend(self.guard.failures)
        return notes

    # -- line tracing --------------------------------------------------------

    @guarded
    def _on_line(self, line: int, rebinds: bool = False) -> None:
        """Called by the snippet before each of its statements (see lines.py).

        ``rebinds``: the statement assigns or deletes names, so it may have let
        go of a graph without building anything; checked after it ran.
        """
        if self.in_call:  # the snippet's code run by the engine: a hook, a checkpoint's recomputation
            self.call_lines.add(line)
            return
        if _transform_level() is not None:  # inside torch.func: wrapped tensors, functorch's own autograd
            self.transformed.add(self.line)
            return
        stepped = self._flush(self.line)
        if self.check_release and not stepped and self.loops.shown(self.line):
            self.snapshots.release(self.names_at, self.line)
        self.check_release = rebinds
        self.line = line
        if self.loops.ran(line):
            self._emit_folded()  # the loop is over: show where it left the graph

    @guarded
    def _on_enter(self) -> None:
        if not self.in_call:
            self._attribute(self.line)  # what the calling line built before this call
            self.callers.append(self.line)

    @guarded
    def _on_exit(self) -> None:
        # No step here: the return value is not bound to a name yet. The caller's
        # next statement shows what this function built.
        if not self.in_call:
            self._attribute(self.line)
            if self.callers:
                self.line = self.callers.pop()

    @guarded
    def retained(self, tensor: torch.Tensor) -> None:
        """``tensor.retain_grad()`` ran: it builds no node, yet the next backward keeps the
        tensor's .grad because of it, so its line gets a step (a leaf's is a no-op: none)."""
        if not self.in_call and not tensor.is_leaf and not torch.compiler.is_compiling():
            self.built = True
            self.built_line = self.line

    def current_line(self) -> int | None:
        return self.line_at(sys._getframe(1))

    # The seam between the code and the recorder: where it is running, and what it can name.
    # (live.py records code already running in the caller's process through the same seam.)

    def line_at(self, frame) -> int | None:
        """The code's line at ``frame`` (its innermost frame on the stack from there)."""
        frames = snippet_frames(frame)
        return frames[0].f_lineno if frames else self.line

    def names_at(self, frame) -> Names:
        """The tensors the code can name from ``frame`` up: the roots of the graph walk, the labels."""
        return scan(frame_namespaces(snippet_frames(frame), self.globals), self.module_index)

    def listed(self, where: set[int | None]) -> str:
        """Lines as a note lists them."""
        return lines.listed(where)

    def _attribute(self, line: int | None) -> None:
        """Credit the nodes built since the last check to ``line``."""
        seq = _seq_nr()
        if seq != self.seq_last:
            self.graph.lines.mark(self.seq_last, line)
            self.seq_last = seq
            self.built = True
            self.built_line = line

    def _flush(self, line: int | None, extra_roots=()) -> bool:
        """At a statement boundary: record a forward step if nodes were built since the last one."""
        self._attribute(line)
        if not self.built:
            return False
        self.built = False
        line = self.built_line
        if self.snapshots.full():
            return False
        if not self.loops.shown(line):
            self.loops.fold(line)
            return False
        self._emit_folded()
        self.snapshots.take({"kind": "forward", "line": line}, self.names_at, extra_roots)
        return True

    def _emit_folded(self) -> None:
        folded = self.loops.take()
        if folded is not None and not self.snapshots.full():
            self.snapshots.take(folded, self.names_at)

    # -- backward / grad calls -----------------------------------------------

    def wrap(self, orig, kind: str):
        sig = inspect.signature(orig)

        def traced(*args, **kwargs):
            if self.in_call or self.guard.busy:  # re-entrant: inside a hook, or run by the tracer's own reads
                return orig(*args, **kwargs)
            if _transform_level() is not None:  # torch.func's own use of autograd (see _on_line)
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
            return self._call(orig, kind, api, bound, caller)

        traced.__wrapped__ = orig
        traced.__doc__ = orig.__doc__
        return traced

    def _call(self, orig, kind: str, api: str, bound: inspect.BoundArguments, caller) -> Any:
        handles: list = []
        _materialize(bound)
        self.guard.busy = True
        try:
            call = self._prepare_call(kind, api, bound, caller, handles)
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
        self.in_call = True
        self.call_lines = set()
        try:
            with torch.autograd.set_multithreading_enabled(False):
                result = orig(*bound.args, **bound.kwargs)
        except BaseException as e:
            error = e
        finally:
            self.in_call = False
            for h in handles:
                h.remove()
        seq_after = _seq_nr()
        if seq_after != seq_before:
            graph.lines.mark(seq_before, line)
        self.seq_last = seq_after
        call.rebuilt = 0 if call.create_graph else seq_after - seq_before  # a checkpoint's recomputed forward

        if not self.snapshots.full():
            self.guard.busy = True
            try:
                self._record_call(call, error, result)
            except Exception as e:  # noqa: BLE001
                self.guard.note(api, e)
            finally:
                self.guard.busy = False
        if error is not None:
            raise error
        return result

    def _prepare_call(
        self, kind: str, api: str, bound: inspect.BoundArguments, caller, handles: list
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
        line = self.line_at(caller)
        outs, ins = _tensors(outputs), _tensors(inputs)
        roots = [t.grad_fn for t in outs if t.grad_fn is not None]

        self._flush(line, roots)  # this line may have built the very graph it backwards through
        self._emit_folded()
        graph = self.graph
        if any(r not in graph.ids for r in roots):
            names = self.names_at(caller)
            graph.discover(roots, len(self.steps), line, False, names)

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

    def _record_call(self, call: _Call, error: BaseException | None, result) -> None:
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
            step["inputs"] = self._input_names(ins)
        if self.call_lines:
            step["ran_lines"] = sorted(self.call_lines)
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
            self.names_at,
            extra_roots,
            run=run,
            failed=failed,
            grad_graph=create_graph,
            returned=returned,
        )

    def _input_names(self, ins: list[torch.Tensor]) -> list[str]:
        names = self.names_at(sys._getframe(1))
        return [names.name_of(t) or "?" for t in ins]


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


def record(code: str, limits: Limits | None = None) -> TraceDict:
    """Run ``code`` here, in this process, and return its trace as plain JSON-able data: the
    recording alone (``gradstep.pipeline`` narrates and diagnoses it)."""
    return Recorder(code, limits or Limits()).run()
