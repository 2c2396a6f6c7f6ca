"""The passes over a graph's nodes and a step's tensors, behind one seam.

Each pass exists twice: in C (tracer/_nodes.c, fast) and here in Python (the reference that
tests/tracer/test_tracer_native.py holds the C one to, and what runs when the extension is not
built), under the same name and taking the same arguments: the containers it reads and
writes, never the Graph or Names that hold them. ``chosen`` picks once per recording; where a
C pass fails on something it did not expect (a tensor without storage, a wrapper), its Python
twin redoes that call, reading each node or tensor on its own so that what it cannot read is
said for that one alone. Both readers keep to NOTE [reader shared state] below.
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch

from gradstep.tracer import graph
from gradstep.tracer.graph import (
    Into,
    Reading,
    _Saved,
    accumulator_id,
    append_node,
    careful_key,
    dtype_name,
)

# NOTE [reader shared state]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~
# The C reader (tracer/_nodes.c) and the Python one (the passes here, graph.py's helpers) keep no
# state of their own. What a recording knows lives in the containers each pass is handed (the
# Graph's node table, ids, children and saved slots, the Names' index, a step's records), which
# either reader reads and writes alike: one pass can be C's and the next Python's, and where a C
# pass fails its twin redoes the call on the same containers (read_new resumes after the nodes C
# appended: ``_resuming``), so a C pass writes nothing the Python one would not.
#
# The one thing they share besides is graph.py's caches, handed to C once by ``setup``: _SLOTS
# (a node type's op name and saved slots, filled by _type_slots) and _DTYPES (dtype names, filled
# by dtype_name). C reads them and, on a miss, calls the Python function that fills them, so a
# type or dtype is read once per process whichever reader meets it first, and read the same. C's
# globals are those references and interned strings (the schema's field names, torch's attribute
# names): nothing a recording leaves behind.
#
# Hence: new state goes into the containers or into graph.py's caches handed through ``setup``,
# never into a C static or a module global of one reader; records carry the same keys in the same
# order from both (tests/tracer/test_tracer_native.py compares whole traces), and C's keys are the
# schema's fields (tests/tracer/test_tracer_seam.py).

# A snapshot's passes, once per step (snapshots.Snapshots._take).
NAMES = ("roots", "step_names", "states", "new_edges", "tensor_records")
# The Graph's passes: discovering and reading nodes, checking their saved tensors, liveness.
GRAPH = (
    "walk",
    "read_new",
    "data_index",
    "check_freed",
    "check_stale",
    "ids_of",
    "reachable",
    "saved_bytes",
)
# Every pass, and ``untrack`` (a finished step out of the garbage collector's sight, which only
# C can do): the C module's method table holds these and ``setup`` (tests/tracer/test_tracer_seam.py).
ALL = (*NAMES, *GRAPH, "untrack")


def chosen() -> types.SimpleNamespace:
    """The passes a recording uses: C's where built (``graph._nodes``, which tests set to None
    to record with these), each falling back to its Python twin."""
    native = graph._nodes
    if native is None:
        fast = dict(vars(PYTHON))
    else:
        fast = {n: _with_fallback(getattr(native, n), getattr(PYTHON, n)) for n in ALL}
        fast["read_new"] = _resuming(native.read_new, PYTHON.read_new)
    # a node whose edges cannot be read ends the walk there, in either reader
    fast["walk"] = _with_fallback((PYTHON if native is None else native).walk, careful_walk)
    return types.SimpleNamespace(**fast)


def _with_fallback(fast: Callable, reference: Callable) -> Callable:
    def run(*args: Any) -> Any:
        try:
            return fast(*args)
        except Exception:  # noqa: BLE001 - the reference says per tensor what it cannot read
            return reference(*args)

    run.__name__ = fast.__name__
    return run


def _resuming(fast: Callable, reference: Callable) -> Callable:
    """``read_new`` appends as it goes: where the C pass fails, the Python one reads the nodes
    it had not appended (and the one it was appending, again)."""

    def read_new(
        nodes: list, nexts: list, ids: dict, first_id: int, step: int, line: Any, grad_graph: bool,
        into: Into, reading: Reading,
    ) -> None:  # fmt: skip
        try:
            return fast(nodes, nexts, ids, first_id, step, line, grad_graph, into, reading)
        except Exception:  # noqa: BLE001 - read the rest of the run node by node
            kept = min(len(into.table), len(into.children))  # a node half appended is read again
            del into.table[kept:], into.children[kept:]
            done = kept - first_id
            return reference(nodes[done:], nexts[done:], ids, kept, step, line, grad_graph, into, reading)

    return read_new


# -- the Graph's passes ----------------------------------------------------------


def walk(roots: Iterable[Any], ids: dict) -> tuple[list, list[tuple]]:
    """The nodes ``roots`` reach that ``ids`` does not know, in creation order (sequence
    number; AccumulateGrad, which has none, by first sight), and each one's next_functions.
    Edges of a known node never change, so the walk stops at known nodes."""
    return _walk(roots, ids, careful=False)


def careful_walk(roots: Iterable[Any], ids: dict) -> tuple[list, list[tuple]]:
    """``walk`` where a node whose edges or sequence number cannot be read is kept as a leaf."""
    return _walk(roots, ids, careful=True)


def _walk(roots: Iterable[Any], ids: dict, careful: bool) -> tuple[list, list[tuple]]:
    new: dict[Any, tuple] = {}  # node -> its next_functions, for nodes not seen before
    stack = [r for r in roots if r is not None and r not in ids]
    while stack:
        node = stack.pop()
        if node in new:
            continue
        if careful:
            try:
                nexts = tuple(node.next_functions)
            except Exception:  # noqa: BLE001
                nexts = ()
        else:
            nexts = node.next_functions
        new[node] = nexts
        for child, _ in nexts:
            if child is not None and child not in ids and child not in new:
                stack.append(child)
    order = sorted(new, key=careful_key if careful else _creation_key)
    return order, [new[node] for node in order]


def _creation_key(node: Any) -> int:
    return node._sequence_nr()


def read_new(
    nodes: list,
    nexts: list,
    ids: dict,
    first_id: int,
    step: int,
    line: int | None,
    grad_graph: bool,
    into: Into,
    reading: Reading,
) -> None:
    """The records of ``nodes`` (new, in id order from ``first_id``, each already in ``ids``)
    appended to ``into.table``, their children's ids to ``into.children``; one node at a time,
    each saying what of it cannot be read."""
    for nid, node, node_nexts in zip(range(first_id, first_id + len(nodes)), nodes, nexts, strict=True):
        append_node(node, node_nexts, nid, ids, step, line, grad_graph, into, reading)


def data_index(entries: dict) -> dict:
    """Data address -> {(shape, dtype): first name} of the named tensors (``entries``:
    Names.tensors' values, (tensor, [names]))."""
    by_data: dict = {}
    for obj, names in entries.values():
        try:
            ptr = obj.data_ptr()
        except Exception:  # noqa: BLE001 - no saved tensor can share data it does not have
            continue
        by_data.setdefault(ptr, {}).setdefault((tuple(obj.shape), obj.dtype), names[0])
    return by_data


def check_freed(
    nids: list[int],
    tensor_slots: dict[int, list[_Saved]],
    freed: set[int],
    objs: dict[int, Any],
    mark_unreadable: Callable[[int, _Saved, str], None],
) -> None:
    """After a backward: did it release these nodes' saved tensors? A SavedTensor handle's data
    is None once freed; list and custom-Function saves read through a stale handle: re-read."""
    for nid in nids:
        slots = tensor_slots.get(nid)
        if not slots or nid in freed:
            continue
        node = objs[nid]
        slot = slots[0]  # a release frees every slot of the node at once
        if slot.raw is not None and slot.kind == "tensor":
            if getattr(node, slot.raw).data is None:
                freed.add(nid)
        else:
            try:
                getattr(node, slot.attr)
            except RuntimeError as e:
                mark_unreadable(nid, slot, str(e))


def check_stale(
    tensor_slots: dict[int, list[_Saved]],
    freed: set[int],
    objs: dict[int, Any],
    stale: dict[int, list[str]],
    mark_unreadable: Callable[[int, _Saved, str], None],
    mark_freed: bool,
    freed_mark: str,
    below: int,
) -> None:
    """Has a live saved tensor of a node with an id below ``below`` been modified in place since
    it was saved? Reading it raises then (or once freed): ``mark_unreadable`` sorts which,
    except freed ones when not ``mark_freed``."""
    for nid, slots in tensor_slots.items():
        if nid in freed or nid >= below:
            continue
        node = objs[nid]
        done = stale.get(nid, ())
        for slot in slots:
            if slot.label in done:
                continue
            try:
                getattr(node, slot.attr)
            except RuntimeError as e:
                if mark_freed or freed_mark not in str(e):
                    mark_unreadable(nid, slot, str(e))


def ids_of(nodes: list, ids: dict) -> list[int]:
    """Ids of the known nodes among ``nodes``, in their order."""
    return [nid for nid in map(ids.get, nodes) if nid is not None]


def reachable(root_ids: list[int], children: list[list[int]]) -> set[int]:
    """The ids the roots reach through ``children``."""
    seen: set[int] = set()
    stack = list(root_ids)
    while stack:
        nid = stack.pop()
        if nid in seen:
            continue
        seen.add(nid)
        stack.extend(children[nid])
    return seen


def saved_bytes(storages: dict[int, list[tuple[int, int]]], freed: set[int]) -> int:
    """Bytes of the saved tensors of nodes not freed, each storage counted once."""
    seen: dict[int, int] = {}
    for nid, entries in storages.items():
        if nid in freed:
            continue
        for key, n in entries:
            seen[key] = n
    return sum(seen.values())


def untrack(tree: Any) -> bool:
    """C takes a finished step's plain data out of the garbage collector's sight; Python cannot,
    and says so (False: still tracked)."""
    return False


# -- a snapshot's passes ----------------------------------------------------------


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
    """A step's tensor records, from what ``roots`` read of each tensor (the C reader's
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
    entries: dict,
    fns: list,
    shown: list,
    facts: list[tuple],
    ids: dict,
    table: list[dict],
    accumulators: dict[int, int],
    objs: dict[int, Any],
) -> tuple[dict, list, list]:
    """The variables each node is the grad_fn of, each shown tensor's AccumulateGrad id,
    and its .grad where it can have one (the C reader's ``step_names`` does the same)."""
    vars_of: dict[int, list[str]] = {}
    for (_t, tnames), fn in zip(entries.values(), fns, strict=True):
        if fn is not None and fn in ids:
            vars_of.setdefault(ids[fn], []).extend(tnames)
    leaf_ids = [accumulator_id(t, accumulators, objs) for t, _ in shown]
    for (_t, tnames), nid in zip(shown, leaf_ids, strict=True):
        # a leaf's AccumulateGrad already carries the leaf's name (`tensor`): repeat
        # it per step only when it differs (the leaf was renamed or has aliases)
        if nid is not None and tnames != [table[nid]["tensor"]]:
            vars_of.setdefault(nid, []).extend(tnames)
    # a leaf (no grad_fn) or a retaining non-leaf: the .grad roots() read, else None
    grads = [fact[1] for fact in facts]
    return vars_of, leaf_ids, grads


# The Python twins of tracer/_nodes.c's passes, under the C names.
PYTHON = types.SimpleNamespace(**{n: globals()[n] for n in ALL})
