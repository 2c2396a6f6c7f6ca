"""The node table: every autograd node the snippet built, with its saved values.

Nodes are keyed by the node object itself (``grad_fn`` and ``next_functions``
hand back the same Python object while it is alive); ids are small integers
given on first sight and never reused. Holding a node keeps its graph alive,
so nodes no snippet variable reaches are let go (``Graph.drop``).

The loops over nodes are passes (tracer/passes.py), in C where built and in Python: a Graph
calls the ones it is given, handing each the containers it works on.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any, NamedTuple

import torch

import gradstep
from gradstep.tracer.names import Names

try:
    from gradstep.tracer import _nodes
except ImportError as e:  # not built (no compiler at install): the same records, from Python
    _nodes = None  # passes.chosen reads this: tests set it to None to record with the Python passes
    gradstep.python_reader(f"could not be loaded ({e})")  # a missing one is said on import

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
        return lookup((self.starts, self.values), seq)


def lookup(ranges: tuple[list[int], list[Any]], seq: int) -> Any:
    """SeqRanges.lookup on its (starts, values) lists, as the passes are handed them."""
    starts, values = ranges
    i = bisect.bisect_right(starts, seq) - 1
    return values[i] if i >= 0 else None


class Into(NamedTuple):
    """Where ``read_new`` writes a node's record (the C pass takes the same tuple, by position)."""

    table: list[dict]
    children: list[list[int]]
    tensor_slots: dict[int, list[_Saved]]
    storages: dict[int, list[tuple[int, int]]]
    accumulators: dict[int, int]
    shared: dict  # the C reader's one copy of equal saved-value entries and shapes
    mark_unreadable: Callable[[int, _Saved, str], None]


class Reading(NamedTuple):
    """What ``read_new`` reads besides the nodes (the C pass takes the same tuple, by position)."""

    seq_base: int
    lines: tuple[list[int], list[Any]]  # SeqRanges (starts, values): the line of a sequence number
    modules: tuple[list[int], list[Any]]  # the (id, class name) of the module that built it
    of_tensors: dict  # Names.tensors: id(tensor) -> (tensor, [names])
    of_modules: dict  # Names.modules: id(module) -> its path
    index: dict  # Names.data_index: data address -> {(shape, dtype): name}


class Graph:
    def __init__(self, seq_base: int, max_nodes: int, passes: SimpleNamespace):
        self.passes = passes  # the loops over nodes (tracer/passes.py), C or Python: chosen once
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
        self.iterations = SeqRanges()  # the iteration of the snippet's counted loop (None: outside)
        self.accumulators: dict[int, int] = {}  # id(leaf) -> AccumulateGrad node id
        self.shared: dict = {}  # the C reader's one copy of equal saved-value entries and shapes
        # Sequence ranges built under saved_tensors_hooks (checkpointing, save_on_cpu, the
        # snippet's own pack/unpack): their saved values are never unpacked by the tracer,
        # which would run the snippet's unpack hook (or a checkpoint's recomputation).
        self.hooks = SeqRanges()
        self.packed: dict[int, list[str]] = {}  # id -> _raw_saved_* handles read for freed checks
        self.raising: set[int] = set()  # nodes whose backward is Python (or an Error node): it may raise
        self._live_roots: frozenset[int] = frozenset()  # the roots of the last liveness check...
        self._live: list[int] = []  # ...the ids they reach, sorted...
        self._live_set: frozenset[int] = frozenset()  # ...and the same as a set

    # -- discovery -----------------------------------------------------------

    def discover(
        self, roots: Iterable[Any], step: int, line: int | None, grad_graph: bool, of: Names
    ) -> None:
        """Add every node reachable from ``roots`` that is not known yet.

        Edges of a known node never change, so the walk stops at known nodes.
        ``of`` names the snippet's tensors, to say which one a saved tensor is.
        """
        ids = self.ids
        order, nexts = self.passes.walk(roots, ids)
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
        self._read_new(of, order, nexts, first, step, line, grad_graph)
        storages, table = self.storages, self.table
        for nid in nids:
            held = storages.get(nid)
            if held:
                table[nid]["saved_bytes"] = node_saved_bytes(held)
        if self.iterations.starts:
            self._iterations(nids)

    def _iterations(self, nids: range) -> None:
        """Each new node's loop iteration (NodeInfo.iteration), by its sequence number."""
        ranges = (self.iterations.starts, self.iterations.values)
        for nid in nids:
            info = self.table[nid]
            seq = info.get("seq")
            if seq is not None:
                iteration = lookup(ranges, seq + self.seq_base)
                if iteration:
                    info["iteration"] = iteration

    def _read_new(
        self, of: Names, order: list, nexts: list, first: int, step: int, line: int | None, grad_graph: bool
    ) -> None:
        """The new nodes' records into the table, in id order: by the ``read_new`` pass, and
        one careful node at a time in Python where a node was built under a saved-tensor hook."""
        hooked = self._hooked(order)
        into = Into(
            self.table, self.children, self.tensor_slots, self.storages, self.accumulators, self.shared,
            self._mark_unreadable,
        )  # fmt: skip
        try:
            index = of.data_index(self.passes.data_index)
        except Exception:  # noqa: BLE001 - a tensor torch will not describe: saved tensors go unnamed
            index = {}
        reading = Reading(
            self.seq_base, (self.lines.starts, self.lines.values), (self.modules.starts, self.modules.values),
            of.tensors, of.modules, index,
        )  # fmt: skip
        start = 0
        while start < len(order):
            end = start
            while end < len(order) and hooked[end] == hooked[start]:
                end += 1
            if hooked[start]:
                for i in range(start, end):
                    nid = first + i
                    append_node(
                        order[i], nexts[i], nid, self.ids, step, line, grad_graph, into, reading, self.packed
                    )
            else:
                self.passes.read_new(
                    order[start:end],
                    nexts[start:end],
                    self.ids,
                    first + start,
                    step,
                    line,
                    grad_graph,
                    into,
                    reading,
                )
            start = end
        for nid, node in enumerate(order, first):
            if _can_raise(type(node)):
                self.raising.add(nid)

    def _hooked(self, order: list) -> list[bool]:
        if not self.hooks.starts:
            return [False] * len(order)
        out = []
        for node in order:
            seq = node._sequence_nr()
            out.append(seq != _UNSEQUENCED and bool(self.hooks.lookup(seq)))
        return out

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
        nids = nids if isinstance(nids, list) else list(nids)
        if self.packed:
            for nid in nids:
                raws = self.packed.get(nid)
                if raws and nid not in self.freed and _released(self.objs[nid], raws[0]):
                    self.freed.add(nid)
        self.passes.check_freed(nids, self.tensor_slots, self.freed, self.objs, self._mark_unreadable)

    def check_stale(self, mark_freed: bool = True, below: int | None = None) -> None:
        """Has any live saved tensor been modified in place since it was saved?

        ``below``: check only nodes with smaller ids (those from it on were read just now).
        """
        below = len(self.table) if below is None else below
        self.passes.check_stale(
            self.tensor_slots,
            self.freed,
            self.objs,
            self.stale,
            self._mark_unreadable,
            mark_freed,
            FREED_MARK,
            below,
        )

    def ids_of(self, nodes: Iterable[Any]) -> list[int]:
        """Ids of the known nodes among ``nodes``, in their order."""
        nodes = nodes if isinstance(nodes, list) else list(nodes)
        return self.passes.ids_of(nodes, self.ids)

    def accumulator_id(self, leaf: torch.Tensor) -> int | None:
        """Id of the live AccumulateGrad node of ``leaf``, if the graph has one."""
        return accumulator_id(leaf, self.accumulators, self.objs)

    def accumulator(self, leaf: torch.Tensor):
        nid = self.accumulator_id(leaf)
        return self.objs[nid] if nid is not None else None

    # -- liveness ------------------------------------------------------------

    def reachable(self, root_ids: Iterable[int]) -> set[int]:
        return self.passes.reachable(list(root_ids), self.children)

    def liveness(self, roots: list) -> tuple[list[int], list[int]]:
        """Sorted ids of the nodes the roots reach, and ids of known nodes they no longer reach."""
        root_ids = frozenset(self.ids[r] for r in roots if r in self.ids)
        if root_ids != self._live_roots:  # edges never change: same roots, same live set
            self._live = sorted(self.reachable(root_ids))
            self._live_set = frozenset(self._live)
            self._live_roots = root_ids
        gone = self.objs.keys() - self._live_set  # usually none: no Python loop then
        return self._live, [nid for nid in self.objs if nid in gone] if gone else []

    def drop(self, nids: Iterable[int]) -> None:
        """Let go of nodes no variable reaches, so torch can free them as it would untraced."""
        for nid in nids:
            node = self.objs.pop(nid)
            del self.ids[node]
            self.tensor_slots.pop(nid, None)
            self.storages.pop(nid, None)
            self.packed.pop(nid, None)
            self.raising.discard(nid)
            self.freed.discard(nid)
            self.stale.pop(nid, None)

    def drop_all(self) -> None:
        """Let go of every node (no step will show them): the run keeps the memory it would untraced."""
        self.drop(list(self.objs))
        self._live_roots, self._live, self._live_set = frozenset(), [], frozenset()

    def saved_bytes(self) -> int:
        return self.passes.saved_bytes(self.storages, self.freed)


def node_saved_bytes(storages: list[tuple[int, int]]) -> int:
    """A node's saved bytes: its saved tensors' storages (storage key, bytes), each counted once
    (``x * x`` saves x as self and other; a view saves its base's storage)."""
    return sum(dict(storages).values())


def accumulator_id(leaf: torch.Tensor, accumulators: dict[int, int], objs: dict[int, Any]) -> int | None:
    """Id of the live AccumulateGrad node of ``leaf``, if ``accumulators`` has one."""
    nid = accumulators.get(id(leaf))
    node = objs.get(nid) if nid is not None else None
    return nid if node is not None and node.variable is leaf else None


def append_node(
    node: Any,
    nexts: tuple,
    nid: int,
    ids: dict,
    step: int,
    line: int | None,
    grad_graph: bool,
    into: Into,
    reading: Reading,
    packed: dict[int, list[str]] | None = None,
) -> None:
    """One node's record, whatever it holds: what cannot be read is said, not raised.
    ``packed``: the node was built under a saved-tensor hook; the raw handles read go there."""
    kids = [ids[c] for c, _ in nexts if c is not None and c in ids]
    into.tensor_slots.pop(nid, None)  # what a failed read may have left
    into.storages.pop(nid, None)
    try:
        info = node_info(node, nid, step, line, grad_graph, into, reading, packed)
    except Exception as e:  # noqa: BLE001 - a node torch cannot describe stays in the graph
        seq = careful_key(node)
        info = {"id": nid, "op": type(node).__name__, "step": step}
        info["seq"] = None if seq == _UNSEQUENCED else seq - reading.seq_base
        info["line"] = line if seq == _UNSEQUENCED else lookup(reading.lines, seq) or line
        info["saved"] = []
        info["unreadable"] = f"{type(e).__name__}: {e}"
        into.tensor_slots.pop(nid, None)
        into.storages.pop(nid, None)
    info["next"] = kids
    into.table.append(info)
    into.children.append(kids)


def node_info(
    node: Any,
    nid: int,
    step: int,
    line: int | None,
    grad_graph: bool,
    into: Into,
    reading: Reading,
    packed: dict[int, list[str]] | None = None,
) -> dict:
    """A node's record (NodeInfo); the slots holding tensors and their storages into ``into``."""
    op, slots = _type_slots(type(node))
    seq = node._sequence_nr()
    if seq == _UNSEQUENCED and op != "AccumulateGrad":  # once_differentiable's Error node
        info = {"id": nid, "op": op, "step": step, "seq": None, "line": line}
    elif seq == _UNSEQUENCED:
        var = node.variable
        entry = reading.of_tensors.get(id(var))  # (tensor, [names]), as Names.name_of
        info: dict[str, Any] = {
            "id": nid,
            "op": op,
            "step": step,
            "seq": None,
            "line": line,
            "tensor": entry[1][0] if entry else None,
        }
        into.accumulators[id(var)] = nid
    else:
        info = {"id": nid, "op": op, "step": step, "seq": seq - reading.seq_base}
        info["line"] = lookup(reading.lines, seq) or line
        module = lookup(reading.modules, seq)
        if module is not None:
            info["module"] = reading.of_modules.get(module[0]) or module[1]
    if grad_graph:
        info["grad_graph"] = True
    saved: list[dict] = []
    info["saved"] = saved
    if not slots:
        return info
    held: list[_Saved] = []
    storages: list[tuple[int, int]] = []
    if packed is not None:
        _read_packed(node, nid, slots, saved, storages, into, packed)
        return info
    index = reading.index
    for slot in slots:
        try:
            value = getattr(node, slot.attr)
        except RuntimeError as e:
            # Unreadable when first seen (modified in place on the line that
            # built it, or freed by a call not seen): a slot without metadata.
            saved.append({"name": slot.label, "kind": "tensor"})
            held.append(slot.as_tensor)
            into.mark_unreadable(nid, slot.as_tensor, str(e))
            continue
        if value is None:
            continue  # a slot this call did not need
        kind = type(value)
        if kind in _PLAIN_SET:
            saved.append({"name": slot.label, "kind": "value", "value": value})
        elif kind is _TENSOR or isinstance(value, _TENSOR):
            try:
                st = value.untyped_storage()
                n = st.nbytes()
                storages.append((st.data_ptr(), n))
            except Exception as e:  # noqa: BLE001 - sparse or wrapped: no storage of its own
                saved.append(_storageless(slot.label, "tensor", value, e))
                held.append(slot.as_tensor)
                continue
            entry = {
                "name": slot.label,
                "kind": "tensor",
                "shape": list(value.shape),
                "dtype": _DTYPES.get(value.dtype) or dtype_name(value.dtype),
                "bytes": n,
            }
            name = name_of_data(index, value)
            if name:
                entry["of"] = name
            saved.append(entry)
            held.append(slot.as_tensor)
        elif _is_tensor_list(value):
            try:
                saved.append(_describe(slot.label, "tensors", value, storages, index))
            except Exception as e:  # noqa: BLE001
                saved.append(_storageless(slot.label, "tensors", value[0], e))
            held.append(slot.as_tensors)
        else:
            saved.append({"name": slot.label, "kind": "value", "value": _jsonable(value)})
    if held:
        into.tensor_slots[nid] = held
        into.storages[nid] = storages
    return info


def _read_packed(
    node: Any, nid: int, slots: tuple[_Slot, ...], saved: list, storages: list, into: Into, packed: dict
) -> None:
    """Saved values of a node built under saved_tensors_hooks, as the pack hook left them.

    Reading ``_saved_<name>`` would call the unpack hook (the snippet's code, or a
    checkpoint's recomputation of the forward): the raw handle shows what was packed.
    """
    raws: list[str] = []
    for slot in slots:
        raw_attr = "_raw_saved_tensors" if slot.attr == "saved_tensors" else slot.as_tensor.raw
        if raw_attr is None:  # sizes, flags, tensor lists: hooks pack only single tensors
            saved.append({"name": slot.label, "kind": "value", "unreadable": HOOKED})
            continue
        handles = getattr(node, raw_attr)
        for i, handle in enumerate(handles if isinstance(handles, tuple) else (handles,)):
            label = f"{slot.label}[{i}]" if isinstance(handles, tuple) else slot.label
            kept = handle.data
            if kept is None and handle.unpack_hook is None:
                continue  # a slot this call did not need, or already freed
            entry: dict[str, Any] = {"name": label, "kind": "tensor", "packed": _packed_as(kept)}
            inner = _tensors_in(kept)
            if inner:
                n = 0
                for t in inner:
                    st = t.untyped_storage()
                    storages.append((st.data_ptr(), st.nbytes()))
                    n += st.nbytes()
                entry["shape"], entry["dtype"], entry["bytes"] = (
                    list(inner[0].shape),
                    dtype_name(inner[0].dtype),
                    n,
                )
            saved.append(entry)
        raws.append(raw_attr)
    if raws:
        packed[nid] = raws
        into.storages[nid] = storages


def name_of_data(index: dict, t: torch.Tensor) -> str | None:
    """The named tensor with the same data as ``t`` (a saved tensor is often a new object),
    from ``index`` (Names.data_index)."""
    # most saved tensors are intermediates no name holds: one lookup by address settles them
    try:
        same_address = index.get(t.data_ptr())
    except Exception:  # noqa: BLE001 - sparse, or a functorch wrapper: no data pointer
        return None
    return same_address and same_address.get((tuple(t.shape), t.dtype))


_PLAIN = (int, float, bool, str)
_TENSOR = torch.Tensor
_PLAIN_SET = frozenset(_PLAIN)
_DTYPES: dict[torch.dtype, str] = {}


HOOKED = "built under a saved-tensor hook: not read, since reading it would run the unpack hook"


def _is_tensor_list(value: Any) -> bool:
    """A saved list holding a tensor (IndexBackward0's indices start with None for a skipped dim)."""
    kind = type(value)
    return (kind is list or kind is tuple) and any(isinstance(v, _TENSOR) for v in value)


def _tensors_in(packed: Any) -> list[torch.Tensor]:
    """The tensors a pack hook returned (a tensor, or a tuple such as save_on_cpu's)."""
    if isinstance(packed, _TENSOR):
        return [packed]
    if isinstance(packed, tuple | list):
        return [t for t in packed if isinstance(t, _TENSOR)]
    return []


def _packed_as(packed: Any) -> str:
    """What the pack hook kept, in words: a checkpoint keeps a placeholder, save_on_cpu a copy."""
    if isinstance(packed, _TENSOR):
        return f"tensor on {packed.device}"
    inner = _tensors_in(packed)
    if inner:
        return f"{type(packed).__name__} holding a tensor on {inner[0].device}"
    return type(packed).__qualname__


_RAISES: dict[type, bool] = {}


def _can_raise(t: type) -> bool:
    """A custom Function's backward (the snippet's Python) or once_differentiable's Error node
    can raise while the engine runs it: then only hooks on each node say what really ran."""
    known = _RAISES.get(t)
    if known is None:
        known = _RAISES[t] = issubclass(t, _CUSTOM) or t.__name__ in ("Error", "NotImplemented")
    return known


def _storageless(label: str, kind: str, t: torch.Tensor, e: Exception) -> dict:
    """A saved tensor whose memory cannot be read (a sparse tensor, a functorch wrapper)."""
    return {
        "name": label,
        "kind": kind,
        "shape": list(t.shape),
        "dtype": dtype_name(t.dtype),
        "unreadable": f"{t.layout} tensor, its bytes cannot be read: {type(e).__name__}: {e}",
    }


def _released(node: Any, raw_attr: str) -> bool:
    handle = getattr(node, raw_attr)
    handle = handle[0] if isinstance(handle, tuple) and handle else handle
    return not isinstance(handle, tuple) and handle.data is None and handle.unpack_hook is None


def careful_key(node: Any) -> int:
    """A node's sequence number, or AccumulateGrad's where it cannot be read."""
    try:
        return node._sequence_nr()
    except Exception:  # noqa: BLE001
        return _UNSEQUENCED


def dtype_name(dtype: torch.dtype) -> str:
    name = _DTYPES.get(dtype)
    if name is None:
        name = _DTYPES[dtype] = str(dtype).removeprefix("torch.")
    return name


def _describe(label: str, kind: str, tensors, storages: list, index: dict) -> dict:
    tensors = [t for t in tensors if isinstance(t, _TENSOR)]
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
        name = name_of_data(index, first)
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


if _nodes is not None:  # the caches both readers share: NOTE [reader shared state] in passes.py
    _nodes.setup(_TENSOR, _SLOTS, _type_slots, _jsonable, _describe, _DTYPES, dtype_name)
