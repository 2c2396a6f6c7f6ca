"""Find the tensors a snippet can name: its variables, module parameters, list items.

These names are what a learner sees on nodes and in the tensors panel, and
the tensors found here are the roots from which the graph is walked.
"""

from __future__ import annotations

import sys
import types
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from gradstep.meaning import named_key

SNIPPET_FILENAME = "<snippet>"
_MAX_ITEMS = 256  # items scanned per list/dict, so a huge container stays cheap
_MAX_DEPTH = 3
_SKIP_TYPES = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type, types.MethodType)


@dataclass
class Names:
    """Tensors reachable by name at one moment, each object once, first name first."""

    tensors: dict[int, tuple[torch.Tensor, list[str]]] = field(default_factory=dict)
    modules: dict[int, str] = field(default_factory=dict)  # id(module) -> dotted path
    optimizers: list[tuple[str, object]] = field(default_factory=list)  # (name, optimizer): not scanned
    _by_data: dict | None = None

    def add(self, name: str, t: torch.Tensor) -> None:
        entry = self.tensors.get(id(t))
        if entry is None:
            self.tensors[id(t)] = (t, [name])
        elif name not in entry[1]:
            # a new list, not an append: entries are shared with cached module walks
            self.tensors[id(t)] = (t, [*entry[1], name])

    def merge(self, tensors: dict, modules: dict) -> None:
        """Add a module walk's finds (from ModuleIndex.walk): a dict update when none of them
        is known yet, which is the usual case and far cheaper than one add() each."""
        if self.modules.keys().isdisjoint(modules):
            self.modules.update(modules)
        else:
            for mid, path in modules.items():
                self.modules.setdefault(mid, path)
        if self.tensors.keys().isdisjoint(tensors):
            self.tensors.update(tensors)
        else:
            for t, tnames in tensors.values():
                self.add(tnames[0], t)

    def name_of(self, t: torch.Tensor) -> str | None:
        entry = self.tensors.get(id(t))
        return entry[1][0] if entry else None

    def data_index(self, build: Callable[[dict], dict]) -> dict:
        """Data address -> {(shape, dtype): first name} of the named tensors, made once by
        ``build`` from ``tensors`` (the ``data_index`` pass, tracer/passes.py)."""
        if self._by_data is None:
            self._by_data = build(self.tensors)
        return self._by_data


def snippet_frames(frame: types.FrameType | None) -> list[types.FrameType]:
    """The snippet's frames on the stack, innermost first."""
    out = []
    while frame is not None:
        if frame.f_code.co_filename == SNIPPET_FILENAME:
            out.append(frame)
        frame = frame.f_back
    return out


def current_line(frame: types.FrameType | None = None) -> int | None:
    frames = snippet_frames(frame or sys._getframe(1))
    return frames[0].f_lineno if frames else None


class ModuleIndex:
    """Remembers what a walk of each module tree found, until any module changes.

    The tracer bumps ``generation`` whenever a module attribute is set or a
    parameter, buffer or submodule registered, so a cached walk is never stale.
    """

    def __init__(self) -> None:
        self.generation = 0
        self._walks: dict[tuple[int, str], tuple[int, weakref.ref, dict, dict]] = {}
        self._self = weakref.ref(self)  # for the walks' weakref callbacks, without a cycle

    def touch(self, *args, **kwargs) -> None:
        self.generation += 1

    def walk(self, name: str, module: torch.nn.Module) -> tuple[dict, dict]:
        """What ``module`` holds under ``name``: id(tensor) -> (tensor, [its first name]) and
        id(module) -> dotted path, as Names.merge takes them (shared: never mutated)."""
        key = (id(module), name)
        hit = self._walks.get(key)
        if hit is not None and hit[0] == self.generation and hit[1]() is module:
            return hit[2], hit[3]
        found = Names()
        _walk_module(found, name, module)
        tensors = {k: (t, tnames[:1]) for k, (t, tnames) in found.tensors.items()}
        modules = found.modules
        # A walk holds the module's parameters: it goes with the module, or tracing would
        # keep the parameters of a deleted model alive where plain torch frees them.
        self._walks[key] = (self.generation, weakref.ref(module, _forget(self._self, key)), tensors, modules)
        return tensors, modules

    def clear(self) -> None:
        self._walks.clear()


def _forget(index_ref: weakref.ref, key: tuple[int, str]):
    def forget(module_ref: weakref.ref) -> None:
        index = index_ref()
        hit = index._walks.get(key) if index is not None else None
        if hit is not None and hit[1] is module_ref:
            del index._walks[key]

    return forget


def scan(namespaces: Iterable[dict], index: ModuleIndex | None = None) -> Names:
    names = Names()
    seen: set[int] = set()
    index = index or ModuleIndex()
    for ns in namespaces:
        for key, value in list(ns.items()):
            if isinstance(key, str) and not key.startswith("__"):
                _visit(names, seen, key, value, 0, index)
    return names


def frame_namespaces(frames: list[types.FrameType], globals_: dict) -> list[dict]:
    """Globals first (their names are the ones a reader knows), then function locals."""
    out = [globals_]
    for f in reversed(frames):
        if f.f_code.co_name != "<module>":
            out.append(f.f_locals)
    return out


def _visit(names: Names, seen: set[int], name: str, value: object, depth: int, index: ModuleIndex) -> None:
    if isinstance(value, torch.Tensor):
        names.add(name, value)
        return
    if depth >= _MAX_DEPTH or isinstance(value, (*_SKIP_TYPES, str, bytes, int, float)) or value is None:
        return
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, torch.nn.Module):
        names.merge(*index.walk(name, value))
    elif isinstance(value, torch.optim.Optimizer):
        # its params are the model's; its state is not part of any graph (a param no name
        # reaches is listed under its optimizer's path: tracer/leaves.py)
        names.optimizers.append((name, value))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value[:_MAX_ITEMS]):
            _visit(names, seen, f"{name}[{i}]", item, depth + 1, index)
    elif isinstance(value, dict):
        for i, (k, item) in enumerate(value.items()):
            if i >= _MAX_ITEMS:
                break
            if named_key(k):  # NOTE [names the tracer writes] (gradstep.meaning)
                _visit(names, seen, f"{name}[{k!r}]", item, depth + 1, index)
    else:
        attrs = getattr(value, "__dict__", None)
        if isinstance(attrs, dict):
            for k, item in list(attrs.items())[:_MAX_ITEMS]:
                if isinstance(k, str) and k.isidentifier() and not k.startswith("__"):
                    _visit(names, seen, f"{name}.{k}", item, depth + 1, index)


def _walk_module(names: Names, name: str, module: torch.nn.Module) -> None:
    # A plain walk of ``_modules``: named_modules()/named_parameters() cost several
    # times more on a deep model, and this runs at every step.
    stack = [(name, module)]
    while stack:
        path, mod = stack.pop()
        if id(mod) in names.modules:
            continue
        names.modules[id(mod)] = path
        attrs = mod.__dict__
        for k, p in attrs["_parameters"].items():
            if p is not None:
                names.add(path + "." + k, p)
        for k, b in attrs["_buffers"].items():
            if b is not None:
                names.add(path + "." + k, b)
        # Plain tensor attributes of the snippet's own modules (an RNN's carried
        # hidden state, a stored target) keep graphs alive, so they are roots too.
        # torch's built-in modules keep none worth a scan at every step.
        if type(mod).__module__ == "__main__":
            for k, v in attrs.items():
                if isinstance(v, torch.Tensor) and k[0] != "_":
                    names.add(path + "." + k, v)
        children = [(path + "." + k, m) for k, m in attrs["_modules"].items() if m is not None]
        stack.extend(reversed(children))
