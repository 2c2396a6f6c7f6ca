"""The node table: every autograd node the snippet built, with its saved values.

Nodes are keyed by the node object itself (``grad_fn`` and ``next_functions``
hand back the same Python object while it is alive); ids are small integers
given on first sight and never reused. Holding a node keeps its graph alive,
so nodes no snippet variable reaches are let go (``drop_unreachable``).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Any, NamedTuple

import torch

from gradstep.tracer.names import Names

try:
    from gradstep.tracer import _nodes
except ImportError:  # not built (no compiler at install): the same records, from Python
    _nodes = None

_UNSEQUENCED = 2**64 - 1  # AccumulateGrad nodes carry UINT64_MAX as sequence number
FREED_MARK = "backward through the graph a second time"
STALE_MARK = "modified by an inplace operation"
_CUSTOM = torch.autograd.function.BackwardCFunction


class _Saved(NamedTuple):
    """How to read one saved slot of a node."""

    label: str  # self, other, result, exponent...
    attr: str  # _saved_<label>
    raw: str | None  # _raw_saved_<label>, when torch offers the SavedTensor handle
    kind: str  # "tensor" or "tensors" once known to hold tensors, "" before


class _Slot(NamedTuple):
    """A saved slot of a node type, with the two ways it can turn out to hold tensors."""

    label: str
    attr: str
    as_tensor: _Saved
    as_tensors: _Saved


_SLOTS: dict[type, tuple[str, tuple[_Slot, ...]]] = {}  # node type -> (op name, slots)


def _slot(label: str, attr: str, raw: str | None) -> _Slot:
    return _Slot(label, attr, _Saved(label, attr, raw, "tensor"), _Saved(label, attr, raw, "tensors"))


def _type_slots(t: type) -> tuple[str, tuple[_Slot, ...]]:
    """Op name and saved slots of a node type, from ``dir()`` once per type.

    Autograd's node types are C++ classes that live as long as torch, so they are
    cached for the process; a custom Function's node types (made by the snippet)
    all read ``saved_tensors`` and are not kept.
    """
    cached = _SLOTS.get(t)
    if cached is not None:
        return cached
    if issubclass(t, _CUSTOM):
        return t.__name__, (_slot("saved_tensors", "saved_tensors", None),)
    attrs = dir(t)
    raws = {a[11:] for a in attrs if a.startswith("_raw_saved_")}
    labels = sorted(a[7:] for a in attrs if a.startswith("_saved_"))
    slots = tuple(_slot(n, "_saved_" + n, "_raw_saved_" + n if n in raws else None) for n in labels)
    cached = _SLOTS[t] = (t.__name__, slots)
    return cached


class SeqRanges:
    """Maps autograd sequence numbers to the value current when they were handed out."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.values: list[Any] = []

    def mark(self, seq: int, value: Any) -> None:
        if self.starts and self.starts[-1] == seq:
            self.values[-1] = value
        elif not self.values or self.values[-1] != value:
            self.starts.append(seq)
            self.values.append(value)

    def lookup(self, seq: int) -> Any:
        i = bisect.bisect_right(self.starts, seq) - 1
        return self.values[i] if i >= 0 else None


class Graph:
    def __init__(self, seq_base: int, max_nodes: int):
        self.native = _nodes  # the C versions of the loops below (tracer/_nodes.c), when built
        self.seq_base = seq_base
        self.max_nodes = max_nodes
        self.full = False  # max_nodes reached: new nodes are no longer recorded
        self.first_new: int | None = None  # lowest id discovered since the last step
        self.ids: dict[Any, int] = {}  # live node object -> id
        self.objs: dict[int, Any] = {}  # id -> live node object
        self.table: list[dict] = []  # NodeInfo dicts, index = id
        self.children: list[list[int]] = []
        self.tensor_slots: dict[int, list[_Saved]] = {}  # id -> slots holding tensors
        self.storages: dict[int, list[tuple[int, int]]] = {}  # id -> (storage key, bytes)
        self.freed: set[int] = set()
        self.stale: dict[int, list[str]] = {}
        self.lines = SeqRanges()
        self.modules = SeqRanges()
        self._accumulators: dict[int, int] = {}  # id(leaf) -> AccumulateGrad node id
        self.shared: dict = {}  # the C reader's one copy of equal saved-value entries and shapes

    # -- discovery -----------------------------------------------------------

    def discover(
        self, roots: Iterable[Any], step: int, line: int | None, grad_graph: bool, of: Names
    ) -> None:
        """Add every node reachable from ``roots`` that is not known yet.

        Edges of a known node never change, so the walk stops at known nodes.
        ``of`` names the snippet's tensors, to say which one a saved tensor is.
        """
        ids = self.ids
        if self.native is not None:
            order, nexts = self.native.walk(roots, ids)
        else:
            order, nexts = _walk(roots, ids)
        if not order:
            return
        first = len(self.table)
        room = max(self.max_nodes - first, 0)
        if len(order) > room:
            self.full = True  # the node cap: later nodes are not recorded
            del order[room:]
        if not order:
            return
        if self.first_new is None:
            self.first_new = first
        nids = range(first, first + len(order))
        ids.update(zip(order, nids, strict=True))
        self.objs.update(zip(nids, order, strict=True))
        del nexts[len(order) :]
        if self.native is not None:
            index = of.data_index(self.native.data_index)
            self.native.read_new(self, of, index, order, nexts, ids, first, step, line, grad_graph)
            return
        table, children = self.table, self.children
        for nid, node, node_nexts in zip(nids, order, nexts, strict=True):
            kids = [ids[c] for c, _ in node_nexts if c is not None and c in ids]
            info = self._info(node, nid, step, line, grad_graph, of)
            info["next"] = kids
            table.append(info)
            children.append(kids)

    def _info(self, node: Any, nid: int, step: int, line: int | None, grad_graph: bool, of: Names) -> dict:
        op, slots = _type_slots(type(node))
        seq = node._sequence_nr()
        if seq == _UNSEQUENCED:
            var = node.variable
            info: dict[str, Any] = {
                "id": nid,
                "op": op,
                "step": step,
                "seq": None,
                "line": line,
                "tensor": of.name_of(var),
            }
            self._accumulators[id(var)] = nid
        else:
            info = {"id": nid, "op": op, "step": step, "seq": seq - self.seq_base}
            info["line"] = self.lines.lookup(seq) or line
            module = self.modules.lookup(seq)
            if module is not None:
                info["module"] = of.modules.get(module[0]) or module[1]
        if grad_graph:
            info["grad_graph"] = True
        saved: list[dict] = []
        info["saved"] = saved
        if not slots:
            return info
        held: list[_Saved] = []
        storages: list[tuple[int, int]] = []
        name_of_data = of.name_of_data
        for slot in slots:
            try:
                value = getattr(node, slot.attr)
            except RuntimeError as e:
                # Unreadable when first seen (modified in place on the line that
                # built it, or freed by a call not seen): a slot without metadata.
                saved.append({"name": slot.label, "kind": "tensor"})
                held.append(slot.as_tensor)
                self._mark_unreadable(nid, slot.as_tensor, str(e))
                continue
            if value is None:
                continue  # a slot this call did not need
            kind = type(value)
            if kind in _PLAIN_SET:
                saved.append({"name": slot.label, "kind": "value", "value": value})
            elif kind is _TENSOR or isinstance(value, _TENSOR):
                st = value.untyped_storage()
                n = st.nbytes()
                storages.append((st.data_ptr(), n))
                entry = {
                    "name": slot.label,
                    "kind": "tensor",
                    "shape": list(value.shape),
                    "dtype": _DTYPES.get(value.dtype) or dtype_name(value.dtype),
                    "bytes": n,
                }
                name = name_of_data(value)
                if name:
                    entry["of"] = name
                saved.append(entry)
                held.append(slot.as_tensor)
            elif (kind is list or kind is tuple) and value and isinstance(value[0], _TENSOR):
                saved.append(_describe(slot.label, "tensors", value, storages, of))
                held.append(slot.as_tensors)
            else:
                saved.append({"name": slot.label, "kind": "value", "value": _jsonable(value)})
        if held:
            self.tensor_slots[nid] = held
            self.storages[nid] = storages
        return info

    def _mark_unreadable(self, nid: int, slot: _Saved, message: str) -> None:
        if FREED_MARK in message:
            self.freed.add(nid)
        elif STALE_MARK in message:
            names = self.stale.setdefault(nid, [])
            if slot.label not in names:
                names.append(slot.label)

    # -- state checks --------------------------------------------------------

    def check_freed(self, nids: Iterable[int]) -> None:
        """After a backward: did it release these nodes' saved tensors?"""
        if self.native is not None:
            self.native.check_freed(self, nids if isinstance(nids, list) else list(nids))
            return
        for nid in nids:
            slots = self.tensor_slots.get(nid)
            if not slots or nid in self.freed:
                continue
            node = self.objs[nid]
            slot = slots[0]  # a release frees every slot of the node at once
            if slot.raw is not None and slot.kind == "tensor":
                if getattr(node, slot.raw).data is None:
                    self.freed.add(nid)
            else:  # list and custom-Function saves read through a stale handle: re-read
                try:
                    getattr(node, slot.attr)
                except RuntimeError as e:
                    self._mark_unreadable(nid, slot, str(e))

    def check_stale(self, mark_freed: bool = True, below: int | None = None) -> None:
        """Has any live saved tensor been modified in place since it was saved?

        ``below``: check only nodes with smaller ids (those from it on were read just now).
        """
        below = len(self.table) if below is None else below
        if self.native is not None:
            self.native.check_stale(self, mark_freed, FREED_MARK, below)
            return
        stale = self.stale
        for nid, slots in self.tensor_slots.items():
            if nid in self.freed or nid >= below:
                continue
            node = self.objs[nid]
            done = stale.get(nid, ())
            for slot in slots:
                if slot.label in done:
                    continue
                try:
                    getattr(node, slot.attr)
                except RuntimeError as e:
                    if mark_freed or FREED_MARK not in str(e):
                        self._mark_unreadable(nid, slot, str(e))

    def ids_of(self, nodes: Iterable[Any]) -> list[int]:
        """Ids of the known nodes among ``nodes``, in their order."""
        if self.native is not None:
            return self.native.ids_of(nodes, self.ids)
        return [nid for nid in map(self.ids.get, nodes) if nid is not None]

    def accumulator_id(self, leaf: torch.Tensor) -> int | None:
        """Id of the live AccumulateGrad node of ``leaf``, if the graph has one."""
        nid = self._accumulators.get(id(leaf))
        node = self.objs.get(nid) if nid is not None else None
        return nid if node is not None and node.variable is leaf else None

    def accumulator(self, leaf: torch.Tensor):
        nid = self.accumulator_id(leaf)
        return self.objs[nid] if nid is not None else None

    # -- liveness ------------------------------------------------------------

    def reachable(self, root_ids: Iterable[int]) -> set[int]:
        if self.native is not None:
            return self.native.reachable(root_ids, self.children)
        seen: set[int] = set()
        stack = list(root_ids)
        children = self.children
        while stack:
            nid = stack.pop()
            if nid in seen:
                continue
            seen.add(nid)
            stack.extend(children[nid])
        return seen

    def drop(self, nids: Iterable[int]) -> None:
        """Let go of nodes no variable reaches, so torch can free them as it would untraced."""
        for nid in nids:
            node = self.objs.pop(nid)
            del self.ids[node]
            self.tensor_slots.pop(nid, None)
            self.storages.pop(nid, None)
            self.freed.discard(nid)
            self.stale.pop(nid, None)

    def saved_bytes(self) -> int:
        if self.native is not None:
            return self.native.saved_bytes(self.storages, self.freed)
        seen: dict[int, int] = {}
        freed = self.freed
        for nid, entries in self.storages.items():
            if nid in freed:
                continue
            for key, n in entries:
                seen[key] = n
        return sum(seen.values())


_PLAIN = (int, float, bool, str)
_TENSOR = torch.Tensor
_PLAIN_SET = frozenset(_PLAIN)
_DTYPES: dict[torch.dtype, str] = {}


def _creation_key(node: Any) -> int:
    return node._sequence_nr()


def _walk(roots: Iterable[Any], ids: dict) -> tuple[list, list[tuple]]:
    """The nodes ``roots`` reach that ``ids`` does not know, in creation order (sequence
    number; AccumulateGrad, which has none, by first sight), and each one's next_functions.
    Edges of a known node never change, so the walk stops at known nodes."""
    new: dict[Any, tuple] = {}  # node -> its next_functions, for nodes not seen before
    stack = [r for r in roots if r is not None and r not in ids]
    while stack:
        node = stack.pop()
        if node in new:
            continue
        nexts = node.next_functions
        new[node] = nexts
        for child, _ in nexts:
            if child is not None and child not in ids and child not in new:
                stack.append(child)
    order = sorted(new, key=_creation_key)
    return order, [new[node] for node in order]


def dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPES.get(dtype)
    if name is None:
        name = _DTYPES[dtype] = str(dtype).removeprefix("torch.")
    return name


def _describe(label: str, kind: str, tensors, storages: list, of: Names) -> dict:
    total = 0
    for t in tensors:
        st = t.untyped_storage()
        n = st.nbytes()
        storages.append((st.data_ptr(), n))
        total += n
    first = tensors[0]
    entry = {
        "name": label,
        "kind": kind,
        "shape": list(first.shape),
        "dtype": dtype_name(first.dtype),
        "bytes": total,
    }
    if len(tensors) == 1:
        name = of.name_of_data(first)
        if name:
            entry["of"] = name
    return entry


def _jsonable(value: Any) -> Any:
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is tuple or kind is list or kind is torch.Size:
        if set(map(type, value)) <= _PLAIN_SET:  # sizes, strides: the common case, checked in C
            return list(value)
        return [_jsonable(v) for v in value]
    if isinstance(value, torch.SymInt | torch.SymFloat):
        return int(value) if isinstance(value, torch.SymInt) else float(value)
    return repr(value)


if _nodes is not None:
    _nodes.setup(_TENSOR, _SLOTS, _type_slots, _jsonable, _describe, _DTYPES, dtype_name)
