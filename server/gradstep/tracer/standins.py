"""Stand-ins for ``tqdm`` and ``matplotlib`` where they are not installed (the sandbox).

Pasted training code wraps its loop in a progress bar and plots its losses; neither has anything
to do with autograd, and neither can show anything in a run with no terminal and no screen. The
stand-ins take the calls and do nothing visible: a ``tqdm`` hands its iterable through unchanged,
``matplotlib.pyplot`` accepts any call and draws nothing. A note says so (offline.py).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from gradstep.tracer.names import SNIPPET_FILENAME

PACKAGES = ("tqdm", "matplotlib")


class tqdm:  # noqa: N801 - the name pasted code imports
    """A progress bar that shows nothing: iterating it is iterating ``iterable``."""

    def __init__(self, iterable: Iterable | None = None, *args: Any, total: int | None = None, **kwargs: Any):
        self.iterable = iterable
        self.total = total if total is not None or iterable is None else _length(iterable)
        self.n = 0

    def __iter__(self) -> Iterator:
        for item in self.iterable if self.iterable is not None else ():
            self.n += 1
            yield item

    def __len__(self) -> int:
        return self.total or 0

    def __enter__(self) -> tqdm:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: float = 1) -> None:
        self.n += n

    def write(self, s: str, *args: Any, **kwargs: Any) -> None:
        print(s)

    def __getattr__(self, name: str) -> Callable[..., None]:  # set_description, set_postfix, close, refresh…
        return _nothing


def trange(*args: int, **kwargs: Any) -> tqdm:
    return tqdm(range(*args), **kwargs)


def _length(iterable: Iterable) -> int | None:
    try:
        return len(iterable)  # type: ignore[arg-type]
    except TypeError:
        return None


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


class Ignored:
    """Whatever a plotting call returns: a figure, axes, a line — any call or attribute on it is ignored."""

    def __call__(self, *args: Any, **kwargs: Any) -> Ignored:
        return self

    def __getattr__(self, name: str) -> Ignored:
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __getitem__(self, key: object) -> Ignored:
        return self

    def __setitem__(self, key: object, value: object) -> None:
        return None

    def __iter__(self) -> Iterator:
        return iter(())

    def __enter__(self) -> Ignored:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __repr__(self) -> str:
        return "<not drawn>"


IGNORED = Ignored()


def _subplots(nrows: int = 1, ncols: int = 1, *, squeeze: bool = True, **kwargs: Any) -> tuple[Ignored, Any]:
    """``fig, ax = plt.subplots(...)``: axes shaped as matplotlib shapes them (a numpy array of axes)."""
    import numpy as np

    axes = np.empty((nrows, ncols), dtype=object)
    axes.fill(IGNORED)
    if squeeze:
        axes = axes.squeeze()
        if axes.ndim == 0:
            return IGNORED, IGNORED
    return IGNORED, axes


# submodules pasted code imports as names (``from matplotlib import pyplot``)
_SUBMODULES = frozenset(
    ("pyplot", "animation", "cm", "colors", "ticker", "patches", "gridspec", "style", "auto")
)


def _names(module: str, value: object) -> Callable[[str], object]:
    """A stand-in module's ``__getattr__``: its submodules are stand-ins, every other public name ``value``."""

    def getattr_(attr: str) -> object:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr in _SUBMODULES:
            return importlib.import_module(f"{module}.{attr}")
        return value

    return getattr_


def _module(name: str) -> types.ModuleType:
    module = types.ModuleType(name, "A stand-in: this run has no screen (gradstep).")
    module.__path__ = []  # a package: its submodules are stand-ins too
    if name.split(".")[0] == "tqdm":
        module.tqdm, module.trange = tqdm, trange
        module.__getattr__ = _names(name, _nothing)  # tqdm.auto, tqdm.notebook … hold the same names
    else:
        module.rcParams = {}
        module.__getattr__ = _names(name, IGNORED)
        if name == "matplotlib.pyplot":
            module.subplots = _subplots
            module.show = _nothing
    return module


def _imported_by_snippet() -> bool:
    """The import statement running now is the snippet's (its frame is the first outside importlib)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename == SNIPPET_FILENAME


class StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on ``sys.meta_path``: finds the stand-ins only where no real package was found, and only
    for the snippet's own imports (a library probing for an optional ``tqdm`` still finds none)."""

    def __init__(self, on_import: Callable[[str], None]):
        self.on_import = on_import
        self.made: list[str] = []  # names of the stand-ins it made, to take out of sys.modules after

    def find_spec(
        self, fullname: str, path: object, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] not in PACKAGES:
            return None
        parent = sys.modules.get(fullname.rpartition(".")[0])
        if (
            not (parent is not None and getattr(parent.__spec__, "loader", None) is self)
            and not _imported_by_snippet()
        ):
            return None  # a submodule of a stand-in is one too; a package, only for the snippet's own import
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        self.on_import(spec.name.split(".")[0])
        self.made.append(spec.name)
        return _module(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None

    def remove(self) -> None:
        """Take the finder and the stand-ins it made out of this process. (By the names it made: a
        scan of sys.modules would touch every module object, and in a forked child each touch
        copies a page: ~18 ms a run.)"""
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for name in self.made:
            module = sys.modules.get(name)
            if module is not None and getattr(module.__spec__, "loader", None) is self:
                del sys.modules[name]
        self.made.clear()
