"""Tensors that can hold a ``.grad`` though no name reaches them now, and the labels they show under.

``w = w - 0.1 * w.grad`` rebinds ``w`` to a non-leaf; the leaf it named lives on in the new
graph's AccumulateGrad node, and the next backward accumulates into its ``.grad``. A model
rebuilt in a loop leaves its old parameters in the old graph, an optimizer holds parameters no
variable names. Each step lists every such tensor with its real ``.grad``, under a label a
person tells apart from the new binding: the name and line that bound it ("w (line 2)"), the
iteration when that line bound several ("w (line 7, iteration 2)"). A tensor's label is chosen
the first time it shows unnamed and kept for the rest of the run; no two tensors share one.

Where a name was bound is noted cheaply: an assignment's marker (lines.py) hands the recorder the
plain names it binds, and after the statement ran each is looked up once in its namespace.
"""

from __future__ import annotations

import weakref
from collections import Counter
from typing import Any

import torch

from gradstep.tracer.graph import Graph
from gradstep.tracer.names import ModuleIndex


class Leaves:
    def __init__(self, module_index: ModuleIndex) -> None:
        self.module_index = module_index
        # id(tensor) -> (its weakref, the name and line that first bound it, the how-many-th
        # tensor that name got at that line)
        self.bound: dict[int, tuple[weakref.ref, str, int, int]] = {}
        self.counts: Counter[tuple[str, int]] = Counter()
        # id(tensor) -> (its weakref, its label, the name it had, if any): kept once chosen
        self.labels: dict[int, tuple[weakref.ref, str, str | None]] = {}
        self.used: set[str] = set()
        self.pending: tuple[Any, tuple[str, ...], int] | None = None

    # -- where names were bound ----------------------------------------------

    def binding(self, frame: Any, names: tuple[str, ...], line: int) -> None:
        """An assignment at ``line`` in ``frame`` is about to bind ``names``: read once it ran."""
        self.settle()
        self.pending = (frame, names, line)

    def settle(self) -> None:
        """Note the tensors the last assignment bound (the statement has run by now)."""
        pending, self.pending = self.pending, None
        if pending is None:
            return
        frame, names, line = pending
        ns = frame.f_locals
        for name in names:
            value = ns.get(name)
            if isinstance(value, torch.Tensor):
                self._note(value, name, line)
            elif isinstance(value, torch.nn.Module):
                tensors, _ = self.module_index.walk(name, value)
                for t, tnames in tensors.values():
                    self._note(t, tnames[0], line)

    def _note(self, t: torch.Tensor, name: str, line: int) -> None:
        key = id(t)
        known = self.bound.get(key)
        if known is not None and known[0]() is t:
            return  # the first binding names it: `w = w.requires_grad_()` keeps `w`'s line
        self.counts[(name, line)] += 1
        self.bound[key] = (weakref.ref(t, _forget(self.bound, key)), name, line, self.counts[(name, line)])

    # -- the unnamed tensors of a step ------------------------------------------

    def unnamed(self, named: dict, graph: Graph, optimizers: list, last: dict) -> dict:
        """id(tensor) -> (tensor, [label]) of the tensors no entry of ``named`` (Names.tensors) is,
        held by a live AccumulateGrad node or an optimizer's param_groups. ``last``: the
        previous step's records (Snapshots._tensor_recs), for the name a tensor was listed under."""
        out: dict = {}
        held: dict[int, tuple[torch.Tensor, str]] = {}  # id -> (param, its path in its optimizer)
        for path, opt in optimizers:
            for gi, group in enumerate(getattr(opt, "param_groups", ())):
                for pi, p in enumerate(group.get("params", ())):
                    if isinstance(p, torch.Tensor) and id(p) not in named:
                        held.setdefault(id(p), (p, f"{path}.param_groups[{gi}]['params'][{pi}]"))
        objs = graph.objs
        # By node id, not by the dict's order: ids of freed tensors are reused, so an entry's
        # place in ``accumulators`` depends on the allocator (the C and Python passes differ).
        for key, nid in sorted(graph.accumulators.items(), key=lambda item: item[1]):
            if key in named:
                continue
            node = objs.get(nid)
            if node is None:
                continue
            t = node.variable
            if id(t) != key or key in out:
                continue
            info = graph.table[nid]
            path = held[key][1] if key in held else None
            out[key] = (t, [self.label(t, last, info.get("tensor"), path, f"leaf (line {info.get('line')})")])
        for key, (p, path) in held.items():
            if key not in out:
                out[key] = (p, [self.label(p, last, None, path)])
        return out

    def label(
        self, t: torch.Tensor, last: dict, was: str | None, path: str | None, fallback: str = ""
    ) -> str:
        """``t``'s label, chosen once: the name and line that bound it; else the name it was
        last listed under, ``(earlier)``; else ``path`` (where its optimizer holds it); else
        ``was`` (the name its AccumulateGrad node was found under), ``(earlier)``; else ``fallback``."""
        key = id(t)
        known = self.labels.get(key)
        if known is not None and known[0]() is t:
            return known[1]
        bound = self.bound.get(key)
        prev = last.get(key)
        if bound is not None and bound[0]() is t:
            _, name, line, k = bound
            was = name
            label = (
                f"{name} (line {line}, iteration {k})"
                if self.counts[(name, line)] > 1
                else f"{name} (line {line})"
            )
        elif prev is not None and prev[0]() is t and not prev[2].get("unnamed"):
            was = prev[1][0]
            label = f"{was} (earlier)"
        elif path:
            label = path
        elif was:
            label = f"{was} (earlier)"
        else:
            label = fallback
        unique, n = label, 1
        while unique in self.used:
            n += 1
            unique = f"{label} #{n}"
        self.used.add(unique)
        self.labels[key] = (weakref.ref(t, _forget(self.labels, key)), unique, was)
        return unique

    def was(self, t: torch.Tensor) -> str | None:
        """The name the tensor had before it showed unnamed (None if it never had one)."""
        known = self.labels.get(id(t))
        return known[2] if known is not None else None

    def clear(self) -> None:
        self.pending = None
        self.bound.clear()
        self.labels.clear()


def _forget(table: dict, key: int):
    """A weakref callback: ``table`` lets go of its entry for ``key`` when the tensor goes."""

    def forget(ref: weakref.ref) -> None:
        entry = table.get(key)
        if entry is not None and entry[0] is ref:
            del table[key]

    return forget
