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
import contextlib
import gc
import inspect
import sys
import traceback
from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch

from gradstep.schema import VERSION
from gradstep.tracer import lines
from gradstep.tracer.capture import Output, Warnings
from gradstep.tracer.grads import GradRecords
from gradstep.tracer.graph import Graph, dtype_name
from gradstep.tracer.names import SNIPPET_FILENAME, frame_namespaces, scan, snippet_frames

_seq_nr = torch._C._autograd._get_sequence_nr
_exec_order = torch._C._current_graph_task_execution_order
_TENSOR_BACKWARD = torch.Tensor.backward.__code__


@dataclass
class Limits:
    max_nodes: int = 20_000
    max_steps: int = 500
    max_stdout: int = 64_000
    max_values: int = 64  # gradients with at most this many elements carry their values
    line_repeats: int = 3  # executions of one line shown as steps before a loop is folded


class _Stop(Exception):
    """Raised inside the snippet when a hard cap makes further recording pointless."""


class Recorder:
    def __init__(self, code: str, limits: Limits):
        self.code = code
        self.limits = limits
        self.globals: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        self.steps: list[dict] = []
        self.truncated: list[str] = []
        self.out = Output(limits.max_stdout)
        self.warnings = Warnings(self._line_now)
        self.grads = GradRecords(limits.max_values)
        self.seq_base = _seq_nr()
        self.seq_last = self.seq_base
        self.graph = Graph(self.seq_base, limits.max_nodes)
        self.line: int | None = None  # snippet line executing now
        self.line_runs: Counter[int | None] = Counter()
        self.folded = 0  # forward line executions waiting in a folded loop step
        self.folded_line: int | None = None
        self.in_call = False
        self._last_roots: frozenset[int] = frozenset()
        self._live: list[int] = []  # ids of the nodes alive at the last step, sorted
        self._live_cache: tuple[list[int], frozenset[int]] = ([], frozenset())
        self._plain_states: dict[int, dict] = {}  # shared {"id": n} of nodes with nothing to say
        self.callers: list[int | None] = []  # lines that called the snippet's functions
        self.module_stack: list[str] = []
        self.module_paths: dict[int, str] = {}

    # -- running -------------------------------------------------------------

    def run(self) -> dict:
        try:
            tree = ast.parse(self.code, SNIPPET_FILENAME)
            compiled = compile(lines.instrument(tree), SNIPPET_FILENAME, "exec", dont_inherit=True)
        except SyntaxError as e:
            return self._result("error", _syntax_error(e))
        self.globals.update(
            {lines.LINE: self._on_line, lines.ENTER: self._on_enter, lines.EXIT: self._on_exit}
        )
        error = None
        with self._patched():
            try:
                exec(compiled, self.globals)
            except SystemExit as e:
                if e.code not in (None, 0):
                    error = self._error(e)
            except _Stop:
                pass
            except BaseException as e:  # the snippet's own failure is part of the trace
                error = self._error(e)
            if not self._full():
                self._flush(self.line)
                self._emit_folded()
        return self._result("error" if error else "ok", error)

    @contextlib.contextmanager
    def _patched(self):
        orig_backward, orig_grad = torch.autograd.backward, torch.autograd.grad
        orig_out, orig_err = sys.stdout, sys.stderr
        hooks = [
            torch.nn.modules.module.register_module_forward_pre_hook(self._module_enter),
            torch.nn.modules.module.register_module_forward_hook(self._module_exit, always_call=True),
        ]
        torch.autograd.backward = self._wrap(orig_backward, "backward")
        torch.autograd.grad = self._wrap(orig_grad, "grad")
        sys.stdout = sys.stderr = self.out
        try:
            with self.warnings:
                yield
        finally:
            sys.stdout, sys.stderr = orig_out, orig_err
            torch.autograd.backward, torch.autograd.grad = orig_backward, orig_grad
            for h in hooks:
                h.remove()

    def _result(self, status: str, error: dict | None) -> dict:
        if self.out.dropped:
            self.truncated.append("stdout")
        if self.graph.full:
            self.truncated.append("nodes")
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
            "truncated": self.truncated,
            "notes": [],
        }

    # -- line tracing --------------------------------------------------------

    def _on_line(self, line: int) -> None:
        """Called by the snippet before each of its statements (see lines.py)."""
        if self.in_call:  # a hook of the snippet running inside backward
            return
        self._flush(self.line)
        self.line = line
        self.line_runs[line] += 1
        if self.folded and self.line_runs[line] <= self.limits.line_repeats:
            self._emit_folded()  # the loop is over: show where it left the graph

    def _on_enter(self) -> None:
        if not self.in_call:
            self._flush(self.line)  # what the calling line built before this call
            self.callers.append(self.line)

    def _on_exit(self) -> None:
        if not self.in_call:
            self._flush(self.line)
            if self.callers:
                self.line = self.callers.pop()

    def _line_now(self) -> int | None:
        frames = snippet_frames(sys._getframe(1))
        return frames[0].f_lineno if frames else self.line

    def _flush(self, line: int | None, extra_roots=()) -> None:
        """If the code run since the last check built nodes, record a forward step."""
        seq = _seq_nr()
        if seq == self.seq_last:
            return
        self.graph.lines.mark(self.seq_last, line)
        self.seq_last = seq
        if self._full():
            return
        if self.line_runs[line] > self.limits.line_repeats:
            self.folded += 1
            self.folded_line = line
            return
        self._emit_folded()
        self._snapshot({"kind": "forward", "line": line}, extra_roots)

    def _emit_folded(self) -> None:
        if self.folded and not self._full():
            self._snapshot({"kind": "forward", "line": self.folded_line, "repeat": self.folded})
        self.folded = 0

    def _full(self) -> bool:
        if len(self.steps) < self.limits.max_steps:
            return False
        if "steps" not in self.truncated:
            self.truncated.append("steps")
        return True

    # -- module paths --------------------------------------------------------

    def _module_enter(self, module, args) -> None:
        path = self.module_paths.get(id(module))
        if path is None:
            frames = snippet_frames(sys._getframe(1))
            names = scan(frame_namespaces(frames, self.globals))
            self.module_paths.update(names.modules)
            path = self.module_paths.setdefault(id(module), type(module).__name__)
        self.module_stack.append(path)
        self.graph.modules.mark(_seq_nr(), path)

    def _module_exit(self, module, args, output) -> None:
        if self.module_stack:
            self.module_stack.pop()
        self.graph.modules.mark(_seq_nr(), self.module_stack[-1] if self.module_stack else None)

    # -- backward / grad calls -----------------------------------------------

    def _wrap(self, orig, kind: str):
        sig = inspect.signature(orig)

        def traced(*args, **kwargs):
            if self.in_call:  # re-entrant backward (e.g. inside a hook): not a step of its own
                return orig(*args, **kwargs)
            caller = sys._getframe(1)
            api = "torch.autograd.grad" if kind == "grad" else "torch.autograd.backward"
            if caller.f_code is _TENSOR_BACKWARD:
                api = "Tensor.backward"
            return self._call(orig, kind, api, sig.bind(*args, **kwargs), caller)

        traced.__wrapped__ = orig
        traced.__doc__ = orig.__doc__
        return traced

    def _call(self, orig, kind: str, api: str, bound: inspect.BoundArguments, caller) -> Any:
        a = bound.arguments
        if kind == "grad":
            outputs, inputs, gradient = a.get("outputs"), a.get("inputs"), a.get("grad_outputs")
        else:
            outputs, inputs = a.get("tensors"), a.get("inputs")
            gradient = a.get("grad_tensors", a.get("grad_variables"))
        create_graph = bool(a.get("create_graph", False))
        retain_graph = a.get("retain_graph")
        retain_graph = create_graph if retain_graph is None else bool(retain_graph)
        frames = snippet_frames(caller)
        line = frames[0].f_lineno if frames else self.line
        outs, ins = _tensors(outputs), _tensors(inputs)
        roots = [t.grad_fn for t in outs if t.grad_fn is not None]

        self._flush(line, roots)  # this line may have built the very graph it backwards through
        self._emit_folded()
        graph = self.graph
        if any(r not in graph.ids for r in roots):
            names = scan(frame_namespaces(frames, self.globals))
            graph.discover(roots, len(self.steps), line, False, names)

        order_box: list = []

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
        handles = [r.register_prehook(capture_order) for r in dict.fromkeys(roots)]
        for node in input_nodes:
            handles.append(node.register_prehook(lambda _g, node=node: ran.add(node)))

        unusable_before = graph.freed | graph.stale.keys()
        seq_before = _seq_nr()
        error: BaseException | None = None
        result = None
        self.in_call = True
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

        if not self._full():
            self._record_call(
                kind,
                api,
                line,
                retain_graph,
                create_graph,
                ins,
                gradient,
                outs,
                order_box,
                input_nodes,
                ran,
                error,
                result,
                unusable_before,
            )
        if error is not None:
            raise error
        return result

    def _record_call(
        self,
        kind,
        api,
        line,
        retain_graph,
        create_graph,
        ins,
        gradient,
        outs,
        order_box,
        input_nodes,
        ran,
        error,
        result,
        unusable_before: set[int],
    ) -> None:
        graph = self.graph
        ids = graph.ids
        order = [ids.get(n) for n in order_box[0]] if order_box else []
        skipped = {ids.get(n) for n in input_nodes if n not in ran}  # captured, never run
        order = [nid for nid in order if nid is not None and nid not in skipped]
        failed = None
        if error is not None and order:
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
            "api": api,
            "retain_graph": retain_graph,
            "create_graph": create_graph,
            "gradient": gradient is not None,
        }
        if ins:
            step["inputs"] = self._input_names(ins)
        if error is not None:
            step["error"] = {"type": type(error).__name__, "message": str(error), "line": line}
        extra_roots = [t.grad_fn for t in outs if t.grad_fn is not None]
        returned = None
        if kind == "grad" and error is None and result is not None:
            extra_roots += [g.grad_fn for g in result if g is not None and g.grad_fn is not None]
            returned = list(result)
        run = {nid: i for i, nid in enumerate(order)}
        if failed is not None:
            run[failed] = len(order)
        self._snapshot(step, extra_roots, run=run, failed=failed, grad_graph=create_graph, returned=returned)

    def _input_names(self, ins: list[torch.Tensor]) -> list[str]:
        names = scan(frame_namespaces(snippet_frames(sys._getframe(1)), self.globals))
        return [names.name_of(t) or "?" for t in ins]

    # -- snapshots -----------------------------------------------------------

    def _snapshot(self, step: dict, *args, **kwargs) -> None:
        # The tracer's own allocations would trigger full collections over torch's
        # many objects; they hold no cycles, so collect after, not during.
        enabled = gc.isenabled()
        gc.disable()
        try:
            self._take_snapshot(step, *args, **kwargs)
        finally:
            if enabled:
                gc.enable()

    def _take_snapshot(
        self, step: dict, extra_roots=(), run=None, failed=None, grad_graph=False, returned=None
    ):
        graph = self.graph
        index = len(self.steps)
        step["index"] = index
        names = scan(frame_namespaces(snippet_frames(sys._getframe(1)), self.globals))
        roots = list(extra_roots)
        shown: list[tuple[torch.Tensor, list[str]]] = []
        for t, tnames in names.tensors.values():
            fn = t.grad_fn
            if fn is not None:
                roots.append(fn)
            # .grad of a non-leaf that does not retain it is always None, and reading it warns
            g = t.grad if (fn is None or t.retains_grad) else None
            if g is not None and g.grad_fn is not None:
                roots.append(g.grad_fn)
            if (t.requires_grad and fn is None) or t.retains_grad or g is not None:
                shown.append((t, tnames))
        graph.discover(roots, index, step.get("line"), grad_graph, names)

        ids = graph.ids
        root_ids = frozenset(ids[r] for r in roots if r in ids)
        if root_ids != self._last_roots:  # edges never change: same roots, same live set
            self._live = sorted(graph.reachable(root_ids))
            self._last_roots = root_ids
        live = self._live
        live_set = self._live_set(live)
        dropped = [nid for nid in graph.objs if nid not in live_set]
        graph.check_stale()

        vars_of: dict[int, list[str]] = {}
        for t, tnames in names.tensors.values():
            fn = t.grad_fn
            if fn is not None and fn in ids:
                vars_of.setdefault(ids[fn], []).extend(tnames)
        for t, tnames in shown:
            nid = graph.accumulator_id(t)
            if nid is not None:
                vars_of.setdefault(nid, []).extend(tnames)

        run = run or {}
        special = graph.freed | graph.stale.keys() | run.keys() | vars_of.keys()
        plain = self._plain_states
        states = []
        edges = []
        edge_lists = graph.edge_lists
        for nid in live:
            if nid in special:
                states.append(self._state(nid, run, failed, vars_of))
            else:
                state = plain.get(nid)
                if state is None:
                    state = plain[nid] = {"id": nid}
                states.append(state)
            edges.extend(edge_lists[nid])
        for nid in dropped:
            states.append({"id": nid, "dropped": True})
            plain.pop(nid, None)
        graph.drop(dropped)

        grads = self.grads.records([t.grad if (t.is_leaf or t.retains_grad) else None for t, _ in shown])
        tensors = []
        for (t, tnames), grad in zip(shown, grads, strict=True):
            fn = t.grad_fn
            rec = {
                "name": tnames[0],
                "shape": list(t.shape),
                "dtype": dtype_name(t.dtype),
                "requires_grad": t.requires_grad,
                "is_leaf": t.is_leaf,
                "node": ids.get(fn) if fn is not None else graph.accumulator_id(t),
                "grad": grad,
            }
            if t.retains_grad:
                rec["retains_grad"] = True
            tensors.append(rec)
        if returned is not None:
            step["returned"] = self.grads.records(returned)

        step["nodes"] = states
        step["edges"] = edges
        step["tensors"] = tensors
        step["saved_bytes"] = graph.saved_bytes()
        step["stdout"] = self.out.since_last_step()
        step["warnings"] = self.warnings.since_last_step()
        self.steps.append(step)

    def _live_set(self, live: list[int]) -> frozenset[int]:
        if self._live_cache[0] is not live:
            self._live_cache = (live, frozenset(live))
        return self._live_cache[1]

    def _state(self, nid: int, run: dict, failed, vars_of: dict) -> dict:
        state: dict[str, Any] = {"id": nid}
        graph = self.graph
        if nid in graph.freed:
            state["freed"] = True
        stale = graph.stale.get(nid)
        if stale:
            state["stale"] = True
            state["stale_saved"] = stale
        order = run.get(nid)
        if order is not None:
            state["order"] = order
            if nid == failed:
                state["failed"] = True
            else:
                state["executed"] = True
        v = vars_of.get(nid)
        if v:
            state["vars"] = v
        return state

    def _error(self, e: BaseException) -> dict:
        tb = e.__traceback__
        line = None
        frames = []
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == SNIPPET_FILENAME:
                line = tb.tb_lineno
                frames.append((tb.tb_lineno, tb.tb_frame.f_code.co_name))
            tb = tb.tb_next
        src = self.code.splitlines()
        text = ["Traceback (most recent call last):"]
        for ln, fn in frames:
            where = "<module>" if fn == "<module>" else fn
            text.append(f"  line {ln}, in {where}")
            if 0 < ln <= len(src):
                text.append(f"    {src[ln - 1].strip()}")
        text.extend(traceback.format_exception_only(type(e), e))
        return {
            "type": type(e).__name__,
            "message": str(e),
            "line": line,
            "traceback": "\n".join(text).rstrip(),
        }


def _tensors(value) -> list[torch.Tensor]:
    if value is None:
        return []
    if isinstance(value, torch.Tensor | torch.autograd.graph.GradientEdge):
        value = [value]
    return [t for t in value if isinstance(t, torch.Tensor)]


def _syntax_error(e: SyntaxError) -> dict:
    return {
        "type": type(e).__name__,
        "message": e.msg,
        "line": e.lineno,
        "column": e.offset,
        "traceback": "".join(traceback.format_exception_only(type(e), e)).rstrip(),
    }


def record(code: str, limits: Limits | None = None) -> dict:
    """Run ``code`` here, in this process, and return its trace as plain JSON-able data."""
    return Recorder(code, limits or Limits()).run()
