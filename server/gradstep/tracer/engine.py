"""What the engine does in one backward/grad call, seen through hooks on the graph.

One prehook on the roots takes the engine's execution order
(``torch._C._current_graph_task_execution_order()``); a prehook on each input's node says
whether it ran (under ``autograd.grad`` the engine may only capture its gradient). On a
graph of a learner's size, or where a node may raise, a hook per node says which nodes
really started and finished, and where a nan or an inf first appeared.
"""

from __future__ import annotations

import re

import torch

from gradstep.tracer.graph import Graph

_exec_order = torch._C._current_graph_task_execution_order
_ANOMALY = re.compile(r"Function '(\w+)' returned nan values")
EXACT_ORDER_NODES = 256  # graphs up to this size get the execution order from a hook per node
_transform_level = torch._C._functorch.maybe_current_level  # not None inside a torch.func transform


class Watch:
    """Hooks on the graph for one call (``handles``: to remove once it returned), and what they saw."""

    def __init__(self, graph: Graph, roots: list, ins: list[torch.Tensor], handles: list) -> None:
        self.graph = graph
        order_box: list = []  # the engine's execution order, captured by a root prehook
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

        self.order_box = order_box
        self.input_nodes = input_nodes  # nodes of inputs=, which the engine may capture without running
        self.ran = ran  # input nodes that did run
        self.started = started  # nodes in the order they started, where a node may raise after running
        self.finished = finished  # nodes whose post hooks ran (anomaly mode raises after those)
        self.produced = produced  # nodes whose output gradient first went non-finite (empty: not hooked)
        self.unusable_before = graph.freed | graph.stale.keys()  # freed or stale before the call

    def outcome(self, error: BaseException | None) -> tuple[list[int], int | None]:
        """Ids of the nodes the call ran, in order, and of the node it failed in (None: it did not)."""
        graph = self.graph
        ids = graph.ids
        order = graph.ids_of(self.order_box[0]) if self.order_box else []
        skipped = {ids[n] for n in self.input_nodes if n not in self.ran and n in ids}  # captured, never run
        if skipped:
            order = [nid for nid in order if nid not in skipped]
        failed = None
        if self.started is not None:
            order = graph.ids_of(self.started)
            if error is not None and order and _raised_in(self.started[-1], self.finished, error):
                failed, order = order[-1], order[:-1]
        elif error is not None and order:
            # The engine stops at the first node it cannot run: one freed before this
            # call, or one whose saved tensor was modified in place. (Nodes this call
            # ran before failing are freed now, so the freed set must be the old one.)
            graph.check_stale(mark_freed=False)
            for i, nid in enumerate(order):
                if nid in self.unusable_before or nid in graph.stale:
                    failed, order = nid, order[:i]
                    break
            # else: no node was unusable, so the engine ran its whole plan and the error
            # came after it (e.g. an unused input without allow_unused=True).
        return order, failed


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


def _raised_in(node, finished: set, error: BaseException) -> bool:
    """Did the call fail in ``node``, the last to start? It did not finish, or anomaly mode
    named it (its check runs after the node's post hooks); else the error came after the
    engine's plan (an unused input without allow_unused)."""
    if node not in finished:
        return True
    nan = _ANOMALY.match(str(error))
    return nan is not None and nan.group(1) == node.name()
