"""Run a snippet and record its autograd graph step by step: the parts, composed.

The recorder owns the run's state that every part shares (the graph, the steps, the
line now running) and passes events between the parts:

* snippet.py runs the code; its line markers (lines.py) call ``_on_line``, ``_on_enter``
  and ``_on_exit`` here (live.py: the caller's own code, reporting through settrace);
* a line whose execution moved autograd's sequence counter built nodes: at the next
  statement boundary it gets a forward step (snapshots.py), or its step is folded into
  a loop's (loops.py);
* calls.py makes a step of each backward/grad call, and asks the recorder where the
  code is and what it can name: ``line_at``, ``names_at`` (the seam live.py overrides);
* patches.py changes torch for the run, notes.py says what the code used that is not
  drawn, guard.py keeps the tracer's own failures out of the snippet.
"""

from __future__ import annotations

import gc
import sys

import torch

from gradstep import limit_advice, note_text
from gradstep.schema import VERSION
from gradstep.trace_dicts import TraceDict
from gradstep.tracer import crash, errors, lines, offline, passes, patches
from gradstep.tracer.calls import Calls
from gradstep.tracer.capture import Output, Warnings
from gradstep.tracer.graph import Graph
from gradstep.tracer.guard import Guard, guarded
from gradstep.tracer.leaves import Leaves
from gradstep.tracer.limits import Limits, LimitWatch, StoppedAtLimit
from gradstep.tracer.loops import Loops
from gradstep.tracer.names import SNIPPET_FILENAME, ModuleIndex, Names, frame_namespaces, scan, snippet_frames
from gradstep.tracer.notes import Uses
from gradstep.tracer.snapshots import Snapshots
from gradstep.tracer.snippet import Snippet
from gradstep.tracer.updates import Updates

_seq_nr = torch._C._autograd._get_sequence_nr
_transform_level = torch._C._functorch.maybe_current_level  # not None inside a torch.func transform


class Recorder:
    """One recording: of a snippet (``run``), or the base of a live one (live.py)."""

    # what the code's warnings go to (a live recording's also show where the user looks)
    warnings_type: type[Warnings] = Warnings

    def __init__(self, code: str, limits: Limits):
        self.code = code
        self.limits = limits
        self.snippet = Snippet(code)
        if limits.offline:  # the sandbox runs it as ``python snippet.py`` would (sys.argv too: offline.py)
            self.snippet.globals["__file__"] = offline.SCRIPT
        self.steps: list[dict] = []
        self.guard = Guard(self.steps)
        self.out = Output(limits.max_stdout)
        self.frames = errors.snippet_frames(code)  # which frames of a traceback the trace shows
        self.warnings = self.warnings_type(self.current_line, self.own_stack)
        self.seq_base = _seq_nr()
        self.seq_last = self.seq_base
        self.graph = Graph(self.seq_base, limits.max_nodes, passes.chosen())
        self.module_index = ModuleIndex()
        self.leaves = Leaves(self.module_index)
        self.snapshots = Snapshots(
            self.steps, self.graph, self.guard, self.out, self.warnings, limits.max_steps, limits.max_values,
            self.leaves,
        )  # fmt: skip
        self.line: int | None = None  # snippet line executing now
        self.loops = Loops(limits.line_repeats)
        self.calls = Calls(self.graph, self.snapshots, self.guard)
        self.updates = Updates(self)  # optimizer calls
        # loops running now, innermost last (lines.py's loop markers): True for the one counted
        self.loop_stack: list[bool] = []
        self.uses = Uses()  # what the code used that a note speaks of
        self.built = False  # nodes were built since the last step...
        self.built_line: int | None = None  # ...by this line
        self.check_release = False
        self.callers: list[int | None] = []  # lines that called the snippet's functions
        self.raised: BaseException | None = None  # what ended the code, while its step is taken
        self.stopped_by_memory = False  # an allocation the run's memory limit refused ended the code
        self.stopped_at: StoppedAtLimit | None = None  # the run stopped itself short of a limit
        # the sandbox's CPU and wall-clock limits, watched at each statement
        self.watch = LimitWatch(limits.wall_seconds) if limits.offline else None

    def own_stack(self, message: str) -> str:
        return errors.own_stack(message, self.frames)

    # -- running -------------------------------------------------------------

    def run(self) -> dict:
        try:
            compiled = self.snippet.compile()
        except SyntaxError as e:
            self.uses.ipython = self.snippet.ipython_lines
            return self._result("error", errors.syntax_error(e))
        self.uses.ipython = self.snippet.ipython_lines
        with patches.patched(self):
            error = self.snippet.run(
                compiled, self._on_line, self._on_enter, self._on_exit, self._failed, self._on_loop
            )
            self._finish()
            # a stop short of a limit is not the code's failure: no step of its own (Trace.error says it)
            if error is not None and self.raised is not None and self.stopped_at is None:
                self.crashed(self.raised, error)
        self.raised = None  # its traceback holds the code's frames: they go as a plain run's do
        try:
            return self._result("error" if error else "ok", error)
        finally:
            self._let_go()

    def _failed(self, e: BaseException) -> None:
        self.raised = e
        if isinstance(e, StoppedAtLimit):
            self.stopped_at = e
        self.uses.failed(e)

    @guarded
    def crashed(self, e: BaseException, error: dict) -> None:
        """The code raised ``e`` (``error``, as the trace reports it): a step at its line with the
        graph as the raising frame could name it, unless a call's step already carries it."""
        step = crash.crash_step(error, self.steps)
        if step is None or self.snapshots.full():
            return
        prior = self.steps[-1] if self.steps else None
        if prior is not None and crash.shows_nothing(prior, step["line"], self.graph.table):
            self.steps.pop()  # its output and warnings are the error step's
        else:
            prior = None
        frame = crash.raising_frame(e, self.frames)
        names_at = self.names_at if frame is None else lambda _here: self.names_at(frame)
        self.snapshots.take(step, names_at)
        if self.steps and self.steps[-1] is step and not crash.shows_something(step, self.steps[:-1]):
            self.steps.pop()
            return
        if prior is not None:
            step["stdout"] = prior.get("stdout", "") + step.get("stdout", "")
            step["warnings"] = (prior.get("warnings") or []) + (step.get("warnings") or [])

    def _let_go(self) -> None:
        """Free the snippet's objects now, as a plain run does when its globals go.

        The markers in the snippet's globals point back at this recorder (and it at
        them): left alone, that cycle would keep the model and its graph alive until
        the next full garbage collection.
        """
        self.snippet.let_go()
        self.graph.objs.clear()
        self.graph.ids.clear()
        self.module_index.clear()
        self.leaves.clear()
        self.warnings.close()
        if self.stopped_by_memory:
            # the failed allocation's traceback keeps the code's frames, and so its model, in a cycle:
            # freed now, the run has room again to write its trace (else that can fail too)
            gc.collect()

    @guarded
    def _finish(self) -> None:
        self.leaves.settle()
        if not self.snapshots.full():
            self.flush(self.line)
            self.emit_folded()

    def _result(self, status: str, error: dict | None) -> dict:
        capped = (("steps", self.snapshots.capped), ("stdout", self.out.dropped), ("nodes", self.graph.full))
        limit = None
        # facts only: the server says what a limit means (NOTE [the server's voice] in gradstep.voice)
        if error is not None and self.stopped_at is not None:
            status, limit = "limit", self.stopped_at.limit
            error = {**error, "type": type(self.stopped_at).__name__}
        elif error is not None and self.limits.memory_mb and limit_advice.out_of_memory(error):
            # the sandbox's data limit sits below its memory cgroup's (sandbox/config.py), so a run
            # too big for it gets here, with what it recorded, instead of being killed with nothing
            status, limit = "limit", "memory"
            self.stopped_by_memory = True
        uses = self.uses.facts(self.limits, error) + self.guard.failures
        return {
            "version": VERSION,
            "status": status,
            "limit": limit,
            "error": error,
            "stdout": self.out.text(),
            "code": self.code,
            "torch": torch.__version__,
            "nodes": self.graph.table,
            "steps": self.steps,
            "warnings": self.warnings.items,
            "truncated": [what for what, hit in capped if hit],
            "uses": uses,
            "notes": note_text.notes_of(
                uses, self.listed
            ),  # a sandboxed run's are the server's: gradstep.voice
        }

    # -- line tracing --------------------------------------------------------

    @guarded
    def _on_line(self, line: int, rebinds: bool = False, bound: tuple[str, ...] = ()) -> None:
        """Called by the snippet before each of its statements (see lines.py).

        ``rebinds``: the statement assigns or deletes names, so it may have let
        go of a graph without building anything; checked after it ran. ``bound``: the
        plain names it assigns, whose tensors are noted after it ran (tracer/leaves.py).
        """
        if self.watch is not None:
            self.watch.check()  # raises into the code: the guard lets a BaseException through
        if self.calls.running:  # the snippet's code run by the engine: a hook, a checkpoint's recomputation
            self.calls.lines.add(line)
            return
        if _transform_level() is not None:  # inside torch.func: wrapped tensors, functorch's own autograd
            self.uses.transformed.add(self.line)
            return
        self.leaves.settle()
        if bound:
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename != SNIPPET_FILENAME:
                frame = frame.f_back
            if frame is not None:
                self.leaves.binding(frame, bound, line)
        stepped = self.flush(self.line)
        if self.check_release and not stepped and self.loops.shown(self.line):
            self.snapshots.release(self.names_at, self.line)
        self.check_release = rebinds
        self.line = line
        if self.loops.ran(line):
            self.emit_folded()  # the loop is over: show where it left the graph

    def _on_loop(self, event: int) -> None:
        """A loop starts, starts an iteration or ends (lines.py): steps carry the iteration of the
        outermost loop running (``Step.iteration``), counted from 1."""
        # A loop run inside a module's forward (a transformer's `for block in self.h`) repeats
        # the model's structure, not the snippet's work: the module tree shows it; it is not counted.
        loops = self.loop_stack
        if event == lines.LOOP_START:
            modules = self.graph.modules.values
            loops.append(not (modules and modules[-1] is not None) and not any(loops))
        counted = bool(loops) and loops[-1]
        if event == lines.LOOP_END and loops:
            loops.pop()
        if not counted:
            return
        # what the last statement built belongs to the iteration it ran in
        self._flush_iteration()
        if event == lines.LOOP_START:
            self.snapshots.iteration = 0
        elif event == lines.LOOP_NEXT and self.snapshots.iteration is not None:
            self.snapshots.iteration += 1
        elif event == lines.LOOP_END:
            self.snapshots.iteration = None
        self.graph.iterations.mark(_seq_nr(), self.snapshots.iteration or None)

    @guarded
    def _flush_iteration(self) -> None:
        if not self.calls.running and _transform_level() is None:
            self.flush(self.line)

    @guarded
    def _on_enter(self) -> None:
        if not self.calls.running:
            self._attribute(self.line)  # what the calling line built before this call
            self.callers.append(self.line)

    @guarded
    def _on_exit(self) -> None:
        # No step here: the return value is not bound to a name yet. The caller's
        # next statement shows what this function built.
        if not self.calls.running:
            self._attribute(self.line)
            if self.callers:
                self.line = self.callers.pop()

    @guarded
    def retained(self, tensor: torch.Tensor) -> None:
        """``tensor.retain_grad()`` ran: it builds no node, yet the next backward keeps the
        tensor's .grad because of it, so its line gets a step (a leaf's is a no-op: none)."""
        if not self.calls.running and not tensor.is_leaf and not torch.compiler.is_compiling():
            self.built = True
            self.built_line = self.line

    def streams(self) -> tuple:
        """What ``sys.stdout`` and ``sys.stderr`` are while the code runs: both captured, as one
        output (live.py keeps the user's own streams)."""
        return self.out, self.out

    def current_line(self) -> int | None:
        return self.line_at(sys._getframe(1))

    # The seam between the code and the recorder: where it is running, and what it can name.
    # (live.py records code already running in the caller's process through the same seam.)

    def line_at(self, frame) -> int | None:
        """The code's line at ``frame`` (its innermost frame on the stack from there)."""
        frames = snippet_frames(frame)
        return frames[0].f_lineno if frames else self.line

    def names_at(self, frame) -> Names:
        """The tensors the code can name from ``frame`` up: the roots of the graph walk, the labels."""
        return scan(frame_namespaces(snippet_frames(frame), self.snippet.globals), self.module_index)

    def listed(self, where: set[int | None]) -> str:
        """Lines as a note lists them."""
        return lines.listed(where)

    def _attribute(self, line: int | None) -> None:
        """Credit the nodes built since the last check to ``line``."""
        seq = _seq_nr()
        if seq != self.seq_last:
            self.graph.lines.mark(self.seq_last, line)
            self.seq_last = seq
            self.built = True
            self.built_line = line

    def flush(self, line: int | None, extra_roots=()) -> bool:
        """At a statement boundary: record a forward step if nodes were built since the last one."""
        self._attribute(line)
        if not self.built:
            return False
        self.built = False
        line = self.built_line
        if self.snapshots.full():
            return False
        if not self.loops.shown(line):
            self.loops.fold(line)
            return False
        self.emit_folded()
        self.snapshots.take({"kind": "forward", "line": line}, self.names_at, extra_roots)
        return True

    def emit_folded(self) -> None:
        folded = self.loops.take()
        if folded is not None and not self.snapshots.full():
            self.snapshots.take(folded, self.names_at)


def record(code: str, limits: Limits | None = None) -> TraceDict:
    """Run ``code`` here, in this process, and return its trace as plain JSON-able data: the
    recording alone (``gradstep.pipeline`` narrates and diagnoses it)."""
    return Recorder(code, limits or Limits()).run()
