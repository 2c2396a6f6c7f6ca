"""Record code already running in the caller's process (``gradstep.record()``), not a snippet.

The snippet recorder learns where it is from markers compiled into the snippet. Here the
code is the user's own functions, methods and modules, so lines come from ``sys.settrace``,
limited to the user's files (a call into torch or any installed package turns tracing off
for that frame at once). Everything else is the snippet recorder's: the same patches, the
same backward/grad wrappers, the same snapshots, through its seam (``line_at``,
``names_at``, ``listed``): lines are ``Locations`` ids, names come from the tensors the user
watches and the locals of their frames inside the recording.
"""

from __future__ import annotations

import contextlib
import linecache
import sys
import types
import warnings
from typing import Any

import torch

from gradstep.tracer import errors, patches
from gradstep.tracer.capture import Output, Warnings
from gradstep.tracer.limits import Limits
from gradstep.tracer.locations import OUTSIDE, Locations, shown_path, source
from gradstep.tracer.names import Names, scan
from gradstep.tracer.recorder import Recorder

_seq_nr = torch._C._autograd._get_sequence_nr

# Inside a torch.compile'd function, dynamo's frame hook sees every Python frame, the trace
# callbacks' and what they call included: it would compile the recorder (and break the user's
# graph where the recorder calls into C). The callbacks are skipped by it, and run the recorder
# with the hook off (two C calls: importing torch._dynamo for its wrappers costs seconds).
try:
    from torch._C._dynamo import eval_frame as _eval_frame

    _set_eval_frame = _eval_frame.set_eval_frame
    _SKIP = _eval_frame._FrameExecStrategy(_eval_frame._FrameAction.SKIP, _eval_frame._FrameAction.DEFAULT)

    def _skipped_by_dynamo(fn):
        _eval_frame.set_code_exec_strategy(fn.__code__, _SKIP)
        return fn

except (ImportError, AttributeError):  # a torch without dynamo: nothing to keep out of

    def _set_eval_frame(callback):
        return None

    def _skipped_by_dynamo(fn):
        return fn


class _Tee:
    """The user's own stream, as their program sees it (``fileno``, ``buffer``, ``encoding``...: all
    the real stream's), with what is written to it also kept for the trace."""

    def __init__(self, kept: Output, real):
        self._kept, self._real = kept, real

    def write(self, s: str) -> int:
        n = self._real.write(s)
        self._kept.write(s)
        return n

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self._real, name)


class _EchoWarnings(Warnings):
    """Warnings kept for the trace and still shown as Python shows them, under the program's own
    filters and "already shown" registries: the block neither resets nor restores them (a filter the
    code sets inside the block stays set, as it would unrecorded)."""

    def __enter__(self) -> Warnings:
        self._shown = warnings.showwarning
        warnings.showwarning = self._show
        return self

    def __exit__(self, *exc) -> None:
        if warnings.showwarning == self._show:  # unless the code installed its own meanwhile
            warnings.showwarning = self._shown

    def _show(self, message, category, filename, lineno, file=None, line=None) -> None:
        super()._show(message, category, filename, lineno, file, line)
        self._shown(message, category, filename, lineno, file, line)


def _show_frame(filename: str, line: int, name: str) -> list[str]:
    """A frame of the user's file as Python writes it (the path shortened as the trace's are)."""
    text = [f'  File "{shown_path(filename)}", line {line}, in {name}']
    if src := linecache.getline(filename, line).strip():
        text.append(f"    {src}")
    return text


_NOT_NAMES = frozenset({"In", "Out"})  # IPython's input/output history


def _namespace(frame: types.FrameType) -> dict:
    """A frame's variables as names for tensors; a module's (a script, a notebook) without its
    private names and IPython's history (``_``, ``_3``, ``Out``: earlier outputs, not variables)."""
    ns = frame.f_locals
    if frame.f_code.co_name != "<module>":
        return ns
    return {k: v for k, v in ns.items() if not k.startswith("_") and k not in _NOT_NAMES}


class LiveRecorder(Recorder):
    """One recording of the caller's code: ``start`` / ``stop`` around each recorded block."""

    warnings_type = _EchoWarnings

    def __init__(self, limits: Limits, watched: dict[str, Any], use_locals: bool = True):
        super().__init__("", limits)
        self.watched = watched  # name -> object the user asked to watch
        self.use_locals = use_locals
        self.locs = Locations()
        self.frames = errors.Frames(self.locs.is_user, _show_frame, self.locs.of)
        # Nodes built outside the recorded code (before it began, between blocks, after it) are marked
        # with a location of their own: the graph would otherwise credit them to the step that found them.
        self.outside = self.locs.of(OUTSIDE, 0)
        self.graph.lines.mark(0, self.outside)
        self.blocks = 0
        self.anchor: types.FrameType | None = None  # the frame the recording was entered from
        self.error: dict | None = None
        self._stack: contextlib.ExitStack | None = None
        self._prev_trace: Any = None
        self._prev_anchor_trace: Any = None
        self.paused_tracer = False  # a debugger's or coverage tool's sys.settrace was paused

    def streams(self) -> tuple[Any, Any]:
        """The user's stdout and stderr stay theirs (a file descriptor, an encoding, stderr apart from
        stdout); what they print is also kept for the trace."""
        return _Tee(self.out, sys.stdout), _Tee(self.out, sys.stderr)

    # -- the seam --------------------------------------------------------------

    def _frames(self, frame: types.FrameType | None) -> list[types.FrameType]:
        """The user's frames inside the recording, innermost first (up to the frame it began in)."""
        out = []
        is_user = self.locs.is_user
        anchor = self.anchor
        while frame is not None:
            if is_user(frame.f_code.co_filename):
                out.append(frame)
            if frame is anchor:
                break
            frame = frame.f_back
        return out

    def line_at(self, frame) -> int | None:
        frames = self._frames(frame)
        if not frames:
            return self.line
        f = frames[0]
        return self.locs.of(f.f_code.co_filename, f.f_lineno)

    def names_at(self, frame) -> Names:
        namespaces: list[dict] = [self.watched]
        if self.use_locals:
            # outermost first: the training loop's `model` names a parameter, not forward's `self`
            namespaces.extend(_namespace(f) for f in reversed(self._frames(frame)))
        return scan(namespaces, self.module_index)

    def listed(self, where: set[int | None]) -> str:
        places = sorted({self.locs.places[n] for n in where if n})
        return ", ".join(f"{shown_path(f)}:{line}" for f, line in places) or "?"

    # -- line events -------------------------------------------------------------

    @_skipped_by_dynamo
    def _global_trace(self, frame: types.FrameType, event: str, arg: Any):
        if event != "call" or not self.locs.is_user(frame.f_code.co_filename):
            return None  # not the user's code: no line events for this frame at all
        hook = _set_eval_frame(None)
        try:
            self._on_enter()
        finally:
            _set_eval_frame(hook)
        return self._local_trace

    @_skipped_by_dynamo
    def _local_trace(self, frame: types.FrameType, event: str, arg: Any):
        if event == "line":
            hook = _set_eval_frame(None)
            try:
                code = frame.f_code
                line = frame.f_lineno
                self._on_line(self.locs.of(code.co_filename, line), self.locs.rebinds(code, line))
            finally:
                _set_eval_frame(hook)
        elif event == "return":
            hook = _set_eval_frame(None)
            try:
                self._on_exit()
            finally:
                _set_eval_frame(hook)
        return self._local_trace

    # -- blocks ------------------------------------------------------------------

    def start(self, anchor: types.FrameType, first_file: str | None = None) -> None:
        """Begin (or resume) recording; ``anchor``: the frame whose code is recorded from its next line;
        ``first_file``: the file the trace's ``code`` shows (default: the anchor's, if it is the user's)."""
        self.anchor = anchor
        if self.anchor_file is None:
            if first_file is None and self.locs.is_user(anchor.f_code.co_filename):
                first_file = anchor.f_code.co_filename
            self.anchor_file = first_file
        self.blocks += 1
        self.line = None
        self.callers = []
        self.seq_last = _seq_nr()
        stack = contextlib.ExitStack()
        stack.enter_context(patches.patched(self))
        self._stack = stack
        self._prev_trace = sys.gettrace()
        if self._prev_trace is not None:
            self.paused_tracer = True
        sys.settrace(self._global_trace)
        self._prev_anchor_trace = anchor.f_trace
        if self.locs.is_user(anchor.f_code.co_filename):
            anchor.f_trace = self._local_trace
            anchor.f_trace_lines = True

    def stop(self, error: BaseException | None = None) -> None:
        """End the block: its last step, then torch and the interpreter as they were."""
        sys.settrace(self._prev_trace)
        if self.anchor is not None:
            self.anchor.f_trace = self._prev_anchor_trace
        try:
            crashed = error is not None and self.error is None and not isinstance(error, GeneratorExit)
            if crashed:
                self.error = errors.exception(error, self.frames)
            self._finish()
            if crashed:
                self.crashed(error, self.error)
            self.graph.lines.mark(_seq_nr(), self.outside)
        finally:
            if self._stack is not None:
                self._stack.close()
            self._stack = None
            self.anchor = None
            self._prev_trace = self._prev_anchor_trace = None
            # Let go of every node until the next block, so untraced code keeps exactly the memory it
            # would keep: a later block finds the graphs still alive as new nodes.
            self.graph.drop_all()

    # -- the trace ---------------------------------------------------------------

    def result(self) -> dict:
        """The trace of every block so far, with lines as ``file:line`` (``Trace.files``)."""
        data = self._result("error" if self.error else "ok", self.error)
        if self.blocks == 0:
            data["notes"].append(
                "Nothing was recorded: no block of this recording ran (iteration(on) was never on)."
            )
        if self.blocks > 1:
            data["notes"].append(
                f"Recorded {self.blocks} separate blocks; code that ran between them was not recorded "
                "(graphs still alive when a block began appear as new nodes)."
            )
        if self.paused_tracer:
            data["notes"].append(
                "A debugger or coverage tool was tracing this code: it was paused while gradstep recorded "
                "(Python has one line tracer per thread)."
            )
        return _with_files(data, self.locs, self.anchor_file)

    anchor_file: str | None = None  # the file the recording was first entered from (its `code`)


def _with_files(data: dict, locs: Locations, first: str | None) -> dict:
    """Location ids -> real line numbers plus ``file``, an index into ``data["files"]``."""
    index: dict[str, int] = {}
    files: list[dict] = []

    def file_of(filename: str) -> int:
        i = index.get(filename)
        if i is None:
            i = index[filename] = len(files)
            files.append({"path": shown_path(filename), "code": source(filename)})
        return i

    if first is not None:
        file_of(first)

    def fix(rec: dict) -> dict:
        """A copy of ``rec`` with its location as line + file (the recording goes on, and may be read again)."""
        rec = dict(rec)
        loc = rec.get("line")
        if loc and locs.places[loc][0] == OUTSIDE:
            rec["line"] = None
        elif loc:
            filename, line = locs.places[loc]
            rec["line"] = line
            rec["file"] = file_of(filename)
        elif "line" in rec:
            rec["line"] = None
        return rec

    outside = sum(1 for n in data["nodes"] if n.get("line") and locs.places[n["line"]][0] == OUTSIDE)
    data["nodes"] = [_signed_seq(fix(node)) for node in data["nodes"]]
    steps = []
    for step in data["steps"]:
        step = fix(step)
        if step.get("error"):
            step["error"] = fix(step["error"])
        if step.get("warnings"):
            step["warnings"] = [fix(w) for w in step["warnings"]]
        ran = step.get("ran_lines")
        if ran:
            places = [locs.places[n] for n in ran]
            step["ran_lines"] = [line for _, line in places]
            step["ran_files"] = [file_of(f) for f, _ in places]
        steps.append(step)
    data["steps"] = steps
    data["warnings"] = [fix(w) for w in data["warnings"]]
    if data.get("error"):
        data["error"] = fix(data["error"])
    data["files"] = files
    if outside:
        data["notes"].append(
            f"{outside} node(s) were built outside the recorded code (before the recording began, between "
            "recorded blocks, or in another thread) and are drawn without a line."
        )
    data["code"] = (files[0]["code"] or "") if files else ""
    data["notes"].insert(
        0,
        "Recorded in the user's own process: lines are those of the user's files (Trace.files); calls into "
        "torch and installed packages are attributed to the user's line that made them.",
    )
    return data


def _signed_seq(node: dict) -> dict:
    """A node built before the recording began has a negative ``seq`` (the table counts from the
    recording's start, modulo 2**64 in the C reader)."""
    seq = node.get("seq")
    if seq is not None and seq >= 2**63:
        node["seq"] = seq - 2**64
    return node
