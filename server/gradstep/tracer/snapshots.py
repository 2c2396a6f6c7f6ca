"""Snapshots: the graph as one step shows it, each step taken once and kept in order.

A step's nodes are those the named tensors reach (discovered as they appear, let go when
no name reaches them), each with its state; its edges are those of its new nodes; its
tensors carry their names and ``.grad``. The step cap is kept here too.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterable
from types import FrameType

from gradstep.tracer.capture import Output, Warnings
from gradstep.tracer.grads import GradRecords
from gradstep.tracer.graph import Graph
from gradstep.tracer.guard import Guard
from gradstep.tracer.leaves import Leaves
from gradstep.tracer.names import Names

NamesAt = Callable[[FrameType], Names]  # the recorder's seam: what the code can name from a frame up


class Snapshots:
    def __init__(
        self,
        steps: list[dict],
        graph: Graph,
        guard: Guard,
        out: Output,
        warnings: Warnings,
        max_steps: int,
        max_values: int,
        leaves: Leaves,
    ) -> None:
        self.steps = steps
        self.leaves = leaves  # tensors that can hold a .grad and no name reaches, and their labels
        self.graph = graph
        self.guard = guard
        self.out = out
        self.warnings = warnings
        self.max_steps = max_steps
        self.capped = False  # max_steps reached: no step is taken from then on
        self.grads = GradRecords(max_values)
        self.released: list[int] = []  # ids let go between steps, shown as dropped in the next
        self.iteration: int | None = None  # of the outermost loop running (the recorder counts them)
        self._plain_states: dict[int, dict] = {}  # shared {"id": n} of nodes with nothing to say
        self._tensor_recs: dict[int, tuple] = {}  # id(tensor) -> (weakref, what its record says, record)

    def full(self) -> bool:
        """Is the step cap reached? (The first time, every node is let go.)"""
        if len(self.steps) < self.max_steps:
            return False
        if not self.capped:
            self.capped = True
            # No step will show them: let go of every node so the rest of the run
            # keeps exactly the memory it would keep untraced.
            self.graph.drop_all()
        return True

    def take(
        self,
        step: dict,
        names_at: NamesAt,
        extra_roots: Iterable = (),
        run: dict[int, int] | None = None,
        failed: int | None = None,
        grad_graph: bool = False,
        returned: list | None = None,
    ) -> None:
        """Complete ``step`` with the graph as the code can name it now, and keep it.

        ``extra_roots``: nodes to show though no name reaches them (a call's outputs); a call's
        ``run`` (node id -> its place in the engine's order), the node it ``failed`` in, whether
        it built a ``grad_graph`` (create_graph) and the gradients autograd.grad ``returned``.
        """
        # The tracer's own allocations would trigger full collections over torch's
        # many objects; they hold no cycles, so collect after, not during.
        enabled = gc.isenabled()
        gc.disable()
        try:
            self._take(step, names_at, extra_roots, run, failed, grad_graph, returned)
        except Exception as e:  # noqa: BLE001 - the step is kept with what it has, and said so
            self.guard.note(f"step {step['kind']} at line {step.get('line')}", e)
            if not self.steps or self.steps[-1] is not step:
                step["index"] = len(self.steps)
                step.setdefault("nodes", [])
                self.steps.append(step)
        finally:
            if enabled:
                gc.enable()

    def _take(
        self,
        step: dict,
        names_at: NamesAt,
        extra_roots: Iterable,
        run: dict[int, int] | None,
        failed: int | None,
        grad_graph: bool,
        returned: list | None,
    ) -> None:
        graph = self.graph
        index = len(self.steps)
        step["index"] = index
        if self.iteration:
            step["iteration"] = self.iteration
        names = names_at(sys._getframe(1))
        passes = graph.passes
        roots, shown, fns, facts = passes.roots(names.tensors, extra_roots)
        known = len(graph.table)  # nodes from here on are read by this discovery: none is stale yet
        graph.discover(roots, index, step.get("line"), grad_graph, names)
        ids = graph.ids
        live, dropped = graph.liveness(roots)
        graph.drop(dropped)
        dropped = self.released + dropped  # shown once as dropped, then gone
        self.released = []
        graph.check_stale(below=known)

        # Leaves a live graph or an optimizer holds though no name reaches them: listed after the
        # named tensors, under labels of their own (the passes read them as more entries).
        entries = names.tensors
        unnamed = self.leaves.unnamed(entries, graph, names.optimizers, self._tensor_recs)
        named_shown = len(shown)
        if unnamed:
            _, more_shown, more_fns, more_facts = passes.roots(unnamed, ())
            entries = {**entries, **unnamed}
            fns, shown, facts = fns + more_fns, shown + more_shown, facts + more_facts

        vars_of, leaf_ids, grads_in = passes.step_names(
            entries, fns, shown, facts, ids, graph.table, graph.accumulators, graph.objs
        )

        run = run or {}
        states = passes.states(live, graph.freed, graph.stale, run, failed, vars_of, self._plain_states)
        # The edges this step added (its new nodes' edges): the whole graph of a step
        # is the table's `next` of its nodes, and where gradient flowed follows from
        # `executed` and `order`; repeating either in every step would double the trace.
        edges = []
        if graph.first_new is not None:
            edges = passes.new_edges(live, graph.first_new, graph.children)
            graph.first_new = None
        for nid in dropped:
            states.append({"id": nid, "dropped": True})
            self._plain_states.pop(nid, None)

        grads = self.grad_records(grads_in)
        now: dict[int, tuple] = {}
        tensors = passes.tensor_records(shown, facts, grads, leaf_ids, ids, self._tensor_recs, now)
        self._tensor_recs = now
        for (t, _), rec in zip(shown[named_shown:], tensors[named_shown:], strict=True):
            rec["unnamed"] = True
            was = self.leaves.was(t)
            if was:
                rec["was"] = was
        if returned is not None:
            step["returned"] = self.grad_records(returned)

        step["nodes"] = states
        step["edges"] = edges
        step["tensors"] = tensors
        step["saved_bytes"] = graph.saved_bytes()
        step["stdout"] = self.out.since_last_step()
        step["warnings"] = self.warnings.since_last_step()
        passes.untrack(step)  # plain data, no cycles: collections need not walk it again (C only)
        self.steps.append(step)

    def grad_records(self, grads: list) -> list[dict | None]:
        try:
            return self.grads.records(grads)
        except Exception:  # noqa: BLE001 - one by one: a gradient that cannot be read shows as none
            out = []
            for g in grads:
                try:
                    out.append(self.grads.records([g])[0])
                except Exception as e:  # noqa: BLE001
                    self.guard.note("gradient values", e)
                    out.append(None)
            return out

    def release(self, names_at: NamesAt, line: int | None) -> None:
        """Let go of graphs a deleted or rebound name no longer reaches (no step)."""
        graph = self.graph
        if not graph.objs or self.full():
            return
        names = names_at(sys._getframe(1))
        roots = graph.passes.roots(names.tensors, ())[0]
        # nodes built but not shown yet (a folded loop) must be known, or what they reach looks dropped
        graph.discover(roots, len(self.steps), line, False, names)
        _live, dropped = graph.liveness(roots)
        if dropped:
            graph.drop(dropped)
            self.released.extend(dropped)
            for nid in dropped:
                self._plain_states.pop(nid, None)
