"""A run with no keyboard, no network, no files and no processes of its own (the sandbox): what
pasted code gets.

Code pasted from a project reads a value with ``input()``, opens its data files, downloads
pretrained weights, imports libraries this server does not have, shows a progress bar and a plot.
In the sandbox each of these ends in an answer, not a bare traceback:

* ``sys.argv`` is ``["snippet.py"]``, as for ``python snippet.py``: ``argparse`` takes its defaults
  (not the arguments of the process that runs the snippet); ``__file__`` is ``snippet.py`` too
  (set by the recorder, with the snippet's globals);
* ``input()`` shows its prompt and raises ``EOFError``, as Python does when its input is empty
  (wherever the process's stdin points), and a note says why;
* ``torch.hub`` downloads raise ``NoNetwork`` (a ``ConnectionError``) naming the call;
* ``tqdm`` and ``matplotlib``, where missing, are stand-ins that show nothing (standins.py);
* a ``DataLoader`` that asks for worker processes loads its batches in the main process instead
  (a run here starts no processes), and a note says so; other ways of starting a process fail as
  they do, and a note says to do the work in the run's own process;
* a missing library, a missing file or a network failure ends the run as in plain Python, and a
  note says what a snippet has here and what to do instead.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import inspect
import socket
import sys
import urllib.error
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch.hub
import torch.utils.data

from gradstep.note_text import use
from gradstep.tracer.standins import StandInFinder

SCRIPT = "snippet.py"  # sys.argv[0] while the snippet runs
_DOWNLOADS = ("load", "load_state_dict_from_url", "download_url_to_file", "list", "help")


class NoNetwork(ConnectionError):
    """A download asked for in a run that has no network."""


@dataclass
class OfflineUse:
    """What the snippet reached for that a run here does not have, for the trace's notes."""

    standins: dict[str, int | None] = field(default_factory=dict)  # package -> line that imported it
    missing_module: str | None = None
    missing_file: str | None = None
    network: bool = False
    keyboard: set[int | None] = field(default_factory=set)  # lines that called input()
    workers: set[int | None] = field(default_factory=set)  # lines whose DataLoader asked for worker processes
    processes: bool = False  # it failed starting a process (multiprocessing, subprocess)
    arguments: bool = False  # argparse ended the run: it wanted command-line arguments

    def failed(self, e: BaseException) -> None:
        if isinstance(e, SystemExit):
            self.arguments = _raised_in(e, _ARGPARSE)
        elif _raised_in(e, _PROCESS_MODULES):
            self.processes = True  # before the file case: a semaphore's FileNotFoundError names no file
        elif isinstance(e, ModuleNotFoundError) and e.name:
            self.missing_module = e.name
        elif isinstance(e, FileNotFoundError) and e.filename is not None:
            self.missing_file = str(e.filename)
        elif _network_error(e):
            self.network = True

    def facts(self) -> list[dict]:
        """The facts of the notes (``Trace.uses``)."""
        out = []
        if self.missing_module is not None:
            out.append(use("missing_module", name=self.missing_module))
        if self.missing_file is not None:
            out.append(use("missing_file", name=self.missing_file))
        for kind, happened in (("network", self.network), ("keyboard", self.keyboard)):
            if happened:
                out.append(use(kind, self.keyboard if kind == "keyboard" else ()))
        for kind, happened in (("arguments", self.arguments), ("processes", self.processes)):
            if happened:
                out.append(use(kind))
        if self.workers:
            out.append(use("workers", self.workers))
        for package, line in sorted(self.standins.items()):
            out.append(use("standin", [line], name=package))
        return out


# Where starting a process fails in a run here (seccomp refuses fork and exec; no /dev/shm)
_PROCESS_MODULES = ("/multiprocessing/", "/subprocess.py", "/concurrent/futures/process.py")
_ARGPARSE = ("/argparse.py",)


def _raised_in(e: BaseException, modules: tuple[str, ...]) -> bool:
    """Whether ``e`` was raised from inside one of the standard library's ``modules`` (by path)."""
    tb = e.__traceback__
    while tb is not None:
        if any(part in tb.tb_frame.f_code.co_filename for part in modules):
            return True
        tb = tb.tb_next
    return False


def _network_error(e: BaseException | None) -> bool:
    """A failure to reach the network, anywhere in the exception's chain."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, socket.gaierror | ConnectionError | urllib.error.URLError | TimeoutError):
            return True
        if type(e).__name__ in (
            "ConnectionError",
            "NameResolutionError",
            "MaxRetryError",
        ):  # requests, urllib3
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def _no_keyboard(use: OfflineUse, line_now: Callable[[], int | None]) -> Callable[..., str]:
    def no_input(prompt: object = "") -> str:
        use.keyboard.add(line_now())
        print(prompt, end="", flush=True)
        raise EOFError("EOF when reading a line")  # input() at the end of its input

    return no_input


def _no_download(fn: Callable, name: str, use: OfflineUse) -> Callable:
    @functools.wraps(fn)
    def offline_download(*args: object, **kwargs: object):
        use.network = True
        raise NoNetwork(
            f"torch.hub.{name}() downloads from the internet, and a run here has no network: build the model "
            "with torch.nn and start from its random weights"
        )

    return offline_download


_LOADER_INIT = torch.utils.data.DataLoader.__init__
_LOADER_PARAMS = inspect.signature(_LOADER_INIT)
# What only loading in worker processes takes: torch refuses each of them with num_workers=0
_WORKERS_ONLY = {
    "prefetch_factor": None,
    "persistent_workers": False,
    "multiprocessing_context": None,
    "timeout": 0,
}


def _in_process_loading(use: OfflineUse, line_now: Callable[[], int | None]) -> Callable:
    """``DataLoader.__init__`` that loads in the main process where worker processes were asked for."""

    @functools.wraps(_LOADER_INIT)
    def init(self, *args: object, **kwargs: object) -> None:
        try:
            bound = _LOADER_PARAMS.bind(self, *args, **kwargs)
        except TypeError:
            return _LOADER_INIT(self, *args, **kwargs)  # torch says what is wrong with the call
        workers = bound.arguments.get("num_workers", 0)
        if isinstance(workers, int) and workers > 0:
            use.workers.add(line_now())
            bound.arguments.update(num_workers=0, **_WORKERS_ONLY)
        return _LOADER_INIT(*bound.args, **bound.kwargs)

    return init


@contextlib.contextmanager
def offline(use: OfflineUse, line_now: Callable[[], int | None]) -> Iterator[None]:
    """Run the body without keyboard, downloads or worker processes, with stand-ins for missing
    tqdm/matplotlib; everything changed is restored after."""
    hub = torch.hub
    saved = {name: getattr(hub, name) for name in _DOWNLOADS}
    for name in _DOWNLOADS:
        setattr(hub, name, _no_download(saved[name], name, use))
    orig_input, orig_argv = builtins.input, sys.argv
    builtins.input = _no_keyboard(use, line_now)
    sys.argv = [SCRIPT]
    torch.utils.data.DataLoader.__init__ = _in_process_loading(use, line_now)
    finder = StandInFinder(lambda package: use.standins.setdefault(package, line_now()))
    sys.meta_path.append(finder)
    try:
        yield
    finally:
        finder.remove()
        torch.utils.data.DataLoader.__init__ = _LOADER_INIT
        builtins.input, sys.argv = orig_input, orig_argv
        zoo = sys.modules.get("torch.utils.model_zoo")  # imported in the run: it took hub's function
        if zoo is not None and getattr(zoo, "load_url", None) is hub.load_state_dict_from_url:
            zoo.load_url = saved["load_state_dict_from_url"]
        for name, fn in saved.items():
            setattr(hub, name, fn)
