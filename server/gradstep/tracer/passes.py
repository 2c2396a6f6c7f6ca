"""The per-step passes of a snapshot, behind one seam.

Each pass exists twice: in C (tracer/_nodes.c, fast) and here in Python (the reference that
tests/tracer/test_tracer_native.py holds the C one to, and what runs when the extension is not
built). ``chosen`` picks once per recording; where a C pass fails on something it did not
expect (a tensor without storage, a wrapper), its Python twin redoes that step's pass, reading
each tensor on its own so that what it cannot read is said for that tensor alone.
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable
from typing import Any

import torch

from gradstep.tracer.graph import Graph, dtype_name

NAMES = ("roots", "step_names", "states", "new_edges", "tensor_records")


def chosen(native: Any | None) -> types.SimpleNamespace:
    """The passes a recording uses: C's where built, each falling back to its Python twin."""
    if native is None:
        return PYTHON
    return types.SimpleNamespace(**{n: _with_fallback(getattr(native, n), getattr(PYTHON, n)) for n in NAMES})


def _with_fallback(fast: Callable, reference: Callable) -> Callable:
    def run(*args: Any) -> Any:
        try:
            return fast(*args)
        except Exception:  # noqa: BLE001 - the reference says per tensor what it cannot read
            return reference(*args)

    run.__name__ = fast.__name__
    return run


def states(
    live: list[int],
    freed: set[int],
    stale: dict[int, list[str]],
    run: dict[int, int],
    failed: int | None,
    vars_of: dict[int, list[str]],
    plain: dict[int, dict],
) -> list[dict]:
    """A step's node states (the C reader's ``states`` does the same); nodes with nothing
    to say share one ``{"id": n}`` across steps."""
    special = freed | stale.keys() | run.keys() | vars_of.keys()
    states = []
    for nid in live:
        if nid in special:  # inlined: this runs for every node after every backward
            state: dict[str, Any] = {"id": nid}
            if nid in freed:
                state["freed"] = True
            if nid in stale:
                state["stale"] = True
                state["stale_saved"] = list(stale[nid])  # a copy: later steps may add to it
            order = run.get(nid)
            if order is not None:
                state["order"] = order
                state["failed" if nid == failed else "executed"] = True
            v = vars_of.get(nid)
            if v:
                state["vars"] = v
            states.append(state)
        else:
            state = plain.get(nid)
            if state is None:
                state = plain[nid] = {"id": nid}
            states.append(state)
    return states


def tensor_records(
    shown: list[tuple[torch.Tensor, list[str]]],
    facts: list[tuple],
    grads: list[dict | None],
    leaf_ids: list[int | None],
    ids: dict,
    last: dict[int, tuple],
    now: dict[int, tuple],
) -> list[dict]:
    """A step's tensor records, from what ``_roots`` read of each tensor (the C reader's
    ``tensor_records`` does the same).

    A tensor whose name, node, grad and flags are as at the last step keeps its record
    (most tensors between two forward lines): no new dict per step. ``now`` gets
    id(tensor) -> (weakref, what its record says, record) for the next step.
    """
    tensors = []
    for (t, tnames), fact, grad, leaf_id in zip(shown, facts, grads, leaf_ids, strict=True):
        fn, _, requires_grad, is_leaf, retains_grad, dtype, shape = fact
        node = ids.get(fn) if fn is not None else leaf_id
        key = (tnames[0], node, requires_grad, is_leaf, retains_grad, dtype)
        prev = last.get(id(t))
        alive = prev is not None and prev[0]() is t
        # a grad record is the same object while the gradient is unchanged (GradRecords)
        if alive and prev[1] == key and prev[2]["grad"] is grad and prev[2]["shape"] == shape:
            rec = prev[2]
        else:
            rec = {
                "name": tnames[0],
                "shape": shape,
                "dtype": dtype_name(dtype),
                "requires_grad": requires_grad,
                "is_leaf": is_leaf,
                "node": node,
                "grad": grad,
            }
            if retains_grad:
                rec["retains_grad"] = True
        now[id(t)] = (prev[0] if alive else weakref.ref(t), key, rec)
        tensors.append(rec)
    return tensors


def new_edges(live: list[int], first_new: int, children: list[list[int]]) -> list[list[int]]:
    edges = []
    for nid in live:
        if nid >= first_new:
            edges.extend([[nid, k] for k in children[nid]])
    return edges


def roots(entries: dict, extra_roots) -> tuple[list, list, list, list[tuple]]:
    """One pass over the named tensors (``Names.tensors``): graph roots, the tensors a step
    lists, each entry's grad_fn, and for each listed tensor what its record needs,
    (grad_fn, .grad, requires_grad, is_leaf, retains_grad, dtype, shape), read once (the C
    reader's ``roots`` does the same)."""
    roots = list(extra_roots)
    shown: list[tuple[torch.Tensor, list[str]]] = []
    fns: list = []
    facts: list[tuple] = []
    for entry in entries.values():
        t = entry[0]
        try:
            fn = t.grad_fn
            retains = t.retains_grad
            # .grad of a non-leaf that does not retain it is always None, and reading it warns
            g = t.grad if (fn is None or retains) else None
            listed = retains or g is not None or (fn is None and t.requires_grad)
            fact = (fn, g, t.requires_grad, t.is_leaf, retains, t.dtype, list(t.shape)) if listed else None
        except Exception:  # noqa: BLE001 - a tensor torch will not describe is left out of the step
            fn, g, fact = None, None, None
        fns.append(fn)
        if fn is not None:
            roots.append(fn)
        if g is not None and g.grad_fn is not None:
            roots.append(g.grad_fn)
        if fact is not None:
            shown.append(entry)
            facts.append(fact)
    return roots, shown, fns, facts


def step_names(
    entries: dict, fns: list, shown: list, facts: list[tuple], graph: Graph
) -> tuple[dict, list, list]:
    """The variables each node is the grad_fn of, each shown tensor's AccumulateGrad id,
    and its .grad where it can have one (the C reader's ``step_names`` does the same)."""
    ids = graph.ids
    vars_of: dict[int, list[str]] = {}
    for (_t, tnames), fn in zip(entries.values(), fns, strict=True):
        if fn is not None and fn in ids:
            vars_of.setdefault(ids[fn], []).extend(tnames)
    table = graph.table
    leaf_ids = [graph.accumulator_id(t) for t, _ in shown]
    for (_t, tnames), nid in zip(shown, leaf_ids, strict=True):
        # a leaf's AccumulateGrad already carries the leaf's name (`tensor`): repeat
        # it per step only when it differs (the leaf was renamed or has aliases)
        if nid is not None and tnames != [table[nid]["tensor"]]:
            vars_of.setdefault(nid, []).extend(tnames)
    # a leaf (no grad_fn) or a retaining non-leaf: the .grad _roots read, else None
    grads = [fact[1] for fact in facts]
    return vars_of, leaf_ids, grads


# The Python twins of tracer/_nodes.c's passes, under the C names.
PYTHON = types.SimpleNamespace(**{n: globals()[n] for n in NAMES})
