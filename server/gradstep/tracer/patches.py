"""What the recorder changes in torch while a snippet runs, all restored after it.

* ``torch.autograd.backward`` / ``grad``: the call wrappers of calls.py (every backward entry
  point goes through them, ``Tensor.backward`` included);
* ``nn.Module._call_impl``: module calls bracketed, so nodes get their module path;
* the module mutators: any change to a module's attributes invalidates the cached walks;
* ``saved_tensors_hooks.__enter__/__exit__``: nodes built under pack hooks are marked, and
  their saved values are never unpacked by the tracer;
* ``forward_ad.dual_level.__enter__``: where forward-mode AD is used (not drawn: a note says so);
* the optimizer calls (``zero_grad``, an optimizer's ``step`` through torch's global step hooks,
  ``clip_grad_norm_``/``clip_grad_value_``, a scheduler's ``step``): update steps (updates.py);
* ``Tensor.retain_grad``: it builds no node, yet changes what the next backward keeps, so its
  line gets a step;
* ``torch.compile``, where ``Limits.inductor`` is off: inductor becomes aot_eager (a note says so);
* where ``Limits.cuda_on_cpu`` is on and the snippet names CUDA: the devices it asks for become the
  CPU (torch's factories, the Tensor methods that take a device, ``torch.Generator``, torch.device
  contexts, a few ``torch.cuda`` functions: devices.py);
* where ``Limits.offline`` is on: ``input()``, ``torch.hub``'s downloads, ``DataLoader``'s worker
  processes, and stand-ins for missing ``tqdm``/``matplotlib`` on ``sys.meta_path`` (offline.py);
* ``sys.stdout`` / ``sys.stderr``: the snippet's output is captured (a live recording's still
  reaches the user's own streams: ``Recorder.streams``).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from typing import TYPE_CHECKING

import torch

from gradstep.tracer import devices, offline, updates
from gradstep.tracer.graph import SeqRanges
from gradstep.tracer.names import ModuleIndex

if TYPE_CHECKING:
    from gradstep.tracer.recorder import Recorder

_seq_nr = torch._C._autograd._get_sequence_nr

_MODULE_MUTATORS = ("register_parameter", "register_buffer", "register_module", "add_module")
# Setting these two on nn.Module makes CPython re-slot every Module subclass (~1 ms per run,
# twice): they are wrapped once per process instead and tell the running recorder, if any.
_MODULE_SLOT_MUTATORS = ("__setattr__", "__delattr__")


def _touching(method, index: ModuleIndex):
    @functools.wraps(method)
    def touching(*args, **kwargs):
        index.generation += 1
        return method(*args, **kwargs)

    return touching


class _SlotWatch:
    """The process-wide wrappers of nn.Module's __setattr__/__delattr__ (see _MODULE_SLOT_MUTATORS)."""

    index: ModuleIndex | None = None  # the running recorder's, None when nothing is traced
    installed = False

    @classmethod
    def install(cls) -> None:
        if cls.installed:
            return
        for name in _MODULE_SLOT_MUTATORS:
            setattr(torch.nn.Module, name, cls._touching(getattr(torch.nn.Module, name)))
        cls.installed = True

    @classmethod
    def _touching(cls, method):
        @functools.wraps(method)
        def touching(*args, **kwargs):
            index = cls.index
            if index is not None:
                index.generation += 1
            return method(*args, **kwargs)

        return touching


@contextlib.contextmanager
def patched(rec: Recorder):
    orig_backward, orig_grad = torch.autograd.backward, torch.autograd.grad
    orig_out, orig_err = sys.stdout, sys.stderr
    module_cls = torch.nn.Module
    saved = {m: getattr(module_cls, m) for m in (*_MODULE_MUTATORS, "_call_impl")}
    for m in _MODULE_MUTATORS:
        setattr(module_cls, m, _touching(saved[m], rec.module_index))
    module_cls._call_impl = _module_call(saved["_call_impl"], rec.graph.modules)
    _SlotWatch.install()
    watching, _SlotWatch.index = _SlotWatch.index, rec.module_index
    torch.autograd.backward = rec.calls.wrap(orig_backward, "backward", rec)
    torch.autograd.grad = rec.calls.wrap(orig_grad, "grad", rec)
    hooks_cls = torch.autograd.graph.saved_tensors_hooks
    hooks_enter, hooks_exit = hooks_cls.__enter__, hooks_cls.__exit__
    hooks_cls.__enter__, hooks_cls.__exit__ = _hooks_bracketed(hooks_enter, hooks_exit, rec.graph.hooks)
    dual_cls = torch.autograd.forward_ad.dual_level
    dual_enter = dual_cls.__enter__
    dual_cls.__enter__ = _noting(dual_enter, rec.uses.forward_ad, rec.current_line)
    retain_grad = torch.Tensor.retain_grad
    torch.Tensor.retain_grad = _telling(retain_grad, rec.retained)
    orig_compile = torch.compile
    if not rec.limits.inductor:
        torch.compile = _without_inductor(orig_compile, rec.uses.compiled, rec.current_line)
    on_cpu = rec.limits.cuda_on_cpu and devices.mentions_cuda(rec.code)
    sys.stdout, sys.stderr = rec.streams()
    try:
        with (
            rec.warnings,
            updates.installed(rec),
            devices.on_cpu(rec.uses.cuda, rec.current_line) if on_cpu else contextlib.nullcontext(),
            offline.offline(rec.uses.offline, rec.current_line)
            if rec.limits.offline
            else contextlib.nullcontext(),
        ):
            yield
    finally:
        sys.stdout, sys.stderr = orig_out, orig_err
        hooks_cls.__enter__, hooks_cls.__exit__ = hooks_enter, hooks_exit
        dual_cls.__enter__ = dual_enter
        torch.compile = orig_compile
        torch.Tensor.retain_grad = retain_grad
        torch.autograd.backward, torch.autograd.grad = orig_backward, orig_grad
        for m, orig in saved.items():
            setattr(module_cls, m, orig)
        _SlotWatch.index = watching


def _telling(method, tell):
    """``method``, then ``tell(self)`` once it returned (not when it raised)."""

    @functools.wraps(method)
    def told(self, *args, **kwargs):
        out = method(self, *args, **kwargs)
        tell(self)
        return out

    return told


def _module_call(call_impl, modules: SeqRanges):
    """Module calls, bracketed (global module hooks would do, but they send every module
    call of the snippet down torch's slow path: ~3 ms on a 24-layer model).

    Marks which module was running when each sequence number was handed out; the
    module's dotted name is resolved when its nodes are discovered. (List appends and
    a comparison: nothing here can fail, so no guard on this hot path.)
    """
    stack: list[tuple[int, str]] = []  # (id, class name) of the modules running, innermost last
    mark = modules.mark
    compiling = torch.compiler.is_compiling

    @functools.wraps(call_impl)
    def traced_call(module, *args, **kwargs):
        # dynamo tracing a module call inlines this wrapper (when it was imported before the patch,
        # as in a live recording): it must see torch's own, or the sequence counter breaks its graph
        if compiling():
            return call_impl(module, *args, **kwargs)
        entry = (id(module), type(module).__name__)
        stack.append(entry)
        mark(_seq_nr(), entry)
        try:
            return call_impl(module, *args, **kwargs)
        finally:
            stack.pop()
            mark(_seq_nr(), stack[-1] if stack else None)

    return traced_call


def _hooks_bracketed(enter, exit_, hooks: SeqRanges):
    """saved_tensors_hooks (and checkpointing, save_on_cpu), bracketed: nodes built inside
    have their saved values packed, and the graph must not unpack them (Graph.hooks)."""
    depth = [0]
    mark = hooks.mark

    @functools.wraps(enter)
    def entered(ctx, *args, **kwargs):
        depth[0] += 1
        mark(_seq_nr(), True)
        return enter(ctx, *args, **kwargs)

    @functools.wraps(exit_)
    def exited(ctx, *args, **kwargs):
        depth[0] -= 1
        mark(_seq_nr(), depth[0] > 0)
        return exit_(ctx, *args, **kwargs)

    return entered, exited


def _noting(method, lines: set, line_now):
    """``method``, adding the snippet line that called it to ``lines``."""

    @functools.wraps(method)
    def noted(*args, **kwargs):
        lines.add(line_now())
        return method(*args, **kwargs)

    return noted


def _without_inductor(compile_, lines: set, line_now):
    """``torch.compile`` with inductor (and its inductor-only ``mode``/``options``) replaced by
    aot_eager: the same AOTAutograd graph and CompiledFunctionBackward node, run by eager kernels."""

    @functools.wraps(compile_)
    def compiled(model=None, *args, backend="inductor", mode=None, options=None, **kwargs):
        if backend == "inductor":
            lines.add(line_now())
            backend, mode, options = "aot_eager", None, None
        return compile_(model, *args, backend=backend, mode=mode, options=options, **kwargs)

    return compiled
