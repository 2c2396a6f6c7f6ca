"""CUDA code where there is no GPU: the devices a snippet asks for become the CPU (the sandbox only).

Autograd builds the same graph and computes the same gradients on the CPU, so code pasted from a
GPU project runs as the same code with its devices set to the CPU would: ``.cuda()`` is ``.cpu()``,
``.to("cuda")`` / ``.to(device)`` and ``device="cuda"`` in a factory (an ``nn.Linear``'s parameters
included) make CPU tensors, ``torch.Generator("cuda")`` is a CPU generator, ``with
torch.device("cuda")`` / ``torch.set_default_device("cuda")`` make factories allocate on the CPU.
``torch.device("cuda")`` itself stays what the code asked for, and ``torch.cuda.is_available()``
stays False: the tensors are CPU tensors and say so (``x.device``), and a note names the lines that
asked for CUDA. ``torch.cuda.synchronize()`` has nothing to wait for; the memory counters say 0
(a note says why). What only a GPU can do (streams, events, device properties, kernels) still
raises, and the note names the call.

The rewriting happens where devices are named: torch's factories (``torch.utils._device``'s list,
the ``*_like`` ones, ``torch.normal``), the Tensor methods that take a device (``to``, ``cuda``,
``type``, ``new_*``; ``nn.Module.to``/``.cuda`` go through them), ``torch.Generator`` and the
``DeviceContext`` behind ``torch.device`` as a context and ``set_default_device``. A
``TorchFunctionMode`` would see all of them in one place, but it costs every torch call a Python hop
(a transformer's forward and backward ran 1.3x slower): these wrappers cost only the calls that name
a device. They are installed only for snippets whose text mentions CUDA.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
import torch.utils._device as _device

from gradstep.note_text import use
from gradstep.tracer.names import SNIPPET_FILENAME

_CPU = torch.device("cpu")
# torch.cuda functions that measure a GPU: with none they report 0 (said in a note)
_MEMORY_COUNTERS = (
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
)
_NO_GPU_MARKS = (
    "not compiled with CUDA",
    "no NVIDIA driver",
    "CUDA is not available",
    "CUDA driver",
    "requires CUDA support",
    "without ATen_cuda",
    "dummy base class",
    "Cannot access accelerator device",
    "CUDA build",
    "_cuda_",  # torch._C has no attribute '_cuda_setDevice'
)


_ASKS_FOR_A_GPU = re.compile(r"cuda|pin_memory|\.to\(\s*\d")  # "cuda", pinned memory, .to(0)


def mentions_cuda(code: str) -> bool:
    """Whether a snippet may ask for a GPU at all (its text names CUDA, pinned memory, or a device
    index): only then is the mode on."""
    return _ASKS_FOR_A_GPU.search(code) is not None


def is_cuda(device: object) -> bool:
    """``"cuda"``, ``"cuda:1"``, ``torch.device("cuda")``, or an accelerator index (``.to(0)``)."""
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.split(":", 1)[0].strip() == "cuda"
    return isinstance(device, int) and not isinstance(device, bool)


def is_no_gpu_error(e: BaseException | None) -> bool:
    return e is not None and any(mark in str(e) for mark in _NO_GPU_MARKS)


def gpu_call(e: BaseException) -> str | None:
    """The torch function a no-GPU error came from: the first frame past the snippet's own."""
    tb = e.__traceback__
    name = None
    past_snippet = False
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename == SNIPPET_FILENAME:
            past_snippet, name = True, None
        elif past_snippet and name is None:
            module = tb.tb_frame.f_globals.get("__name__", "")
            if module.startswith("torch"):
                qualname = code.co_qualname.removesuffix(".__init__").removesuffix(".__new__")
                name = f"{_public(module)}.{qualname}"
        tb = tb.tb_next
    return name


def _public(module: str) -> str:
    """``torch.cuda.memory`` -> ``torch.cuda``: the name a snippet calls it by."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[:2] == ["torch", "cuda"] else module


@dataclass
class CudaUse:
    """What the snippet asked of CUDA, by line, for the trace's notes."""

    lines: set[int | None] = field(default_factory=set)  # lines that asked for a CUDA device
    leaf_copies: set[int | None] = field(default_factory=set)  # .cuda() of a leaf that requires grad
    counters: dict[str, set[int | None]] = field(default_factory=dict)  # memory counter -> lines
    gpu_only: str | None = None  # the snippet failed for want of a GPU: in this call ("" if unknown)

    def failed(self, e: BaseException) -> None:
        if is_no_gpu_error(e):
            self.gpu_only = gpu_call(e) or ""

    def facts(self) -> list[dict]:
        """The facts of the notes (``Trace.uses``)."""
        out = []
        if self.lines:
            out.append(use("cuda_on_cpu", self.lines))
        if self.leaf_copies:
            out.append(use("cuda_leaf_copy", self.leaf_copies))
        for name, lines in sorted(self.counters.items()):
            out.append(use("cuda_memory_counter", lines, name=name))
        if self.gpu_only is not None:
            out.append(use("gpu_only", name=self.gpu_only or None))
        return out


# the legacy CUDA tensor types, as constructors: torch.cuda.FloatTensor(3) is torch.FloatTensor(3)
_CUDA_TYPES = (
    "FloatTensor",
    "DoubleTensor",
    "HalfTensor",
    "BFloat16Tensor",
    "LongTensor",
    "IntTensor",
    "ShortTensor",
    "CharTensor",
    "ByteTensor",
    "BoolTensor",
)
_TENSOR_METHODS = ("new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full", "new_tensor")


@functools.cache
def _factories() -> tuple[str, ...]:
    """The torch functions that make a tensor on a ``device=`` (those torch.device contexts rewrite, and more)."""
    names = {
        f.__name__
        for f in _device._device_constructors()
        if getattr(torch, getattr(f, "__name__", ""), None) is f
    }
    names |= {n for n in dir(torch) if n.endswith("_like") and callable(getattr(torch, n))}
    return tuple(sorted(names | {"normal"}))


class CpuForCuda:
    """The wrappers that make a CUDA device the CPU, noting the snippet lines that asked for one."""

    def __init__(self, use: CudaUse, line_now: Callable[[], int | None]):
        self.use = use
        self.line_now = line_now

    def asked(self) -> None:
        self.use.lines.add(self.line_now())

    def device_kwarg(self, kwargs: dict) -> None:
        if is_cuda(kwargs.get("device")):
            self.asked()
            kwargs["device"] = _CPU

    def factory(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def on_cpu(*args, **kwargs):
            self.device_kwarg(kwargs)
            return fn(*args, **kwargs)

        return on_cpu

    def cuda(self, fn: Callable) -> Callable:
        """``Tensor.cuda()`` is ``.cpu()``: the tensor itself, as on a CPU."""

        @functools.wraps(fn)
        def cuda(t, *args, **kwargs):
            self.asked()
            self._leaf_copy(t, sys._getframe(1))
            return t.cpu()

        return cuda

    def to(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def to(t, *args, **kwargs):
            if args and not isinstance(args[0], torch.Tensor | torch.dtype) and is_cuda(args[0]):
                self.asked()
                self._leaf_copy(t, sys._getframe(1))
                args = (_CPU, *args[1:])
            elif is_cuda(kwargs.get("device")):
                self._leaf_copy(t, sys._getframe(1))
                self.device_kwarg(kwargs)
            return fn(t, *args, **kwargs)

        return to

    def type(self, fn: Callable) -> Callable:
        """``x.type(torch.cuda.FloatTensor)`` / ``.type("torch.cuda.FloatTensor")``: the CPU type."""

        @functools.wraps(fn)
        def type_(t, *args, **kwargs):
            if args:
                dtype = args[0]
                name = (
                    dtype
                    if isinstance(dtype, str)
                    else f"{getattr(dtype, '__module__', '')}.{getattr(dtype, '__name__', '')}"
                )
                if name.startswith("torch.cuda."):
                    self.asked()
                    args = ("torch." + name.removeprefix("torch.cuda."), *args[1:])
            return fn(t, *args, **kwargs)

        return type_

    def method(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def on_cpu(t, *args, **kwargs):
            self.device_kwarg(kwargs)
            return fn(t, *args, **kwargs)

        return on_cpu

    def pin_memory(self, fn: Callable) -> Callable:
        """``x.pin_memory()``: page-locked memory speeds copies to a GPU; without one, the tensor itself."""

        @functools.wraps(fn)
        def pinned(t, *args, **kwargs):
            self.asked()
            return t

        return pinned

    def cuda_type(self, cls: type) -> Callable:
        """``torch.cuda.FloatTensor(...)``: the CPU type's constructor (named as the CUDA one, so
        ``x.type(torch.cuda.FloatTensor)`` still finds it by name)."""
        cpu_type = getattr(torch, cls.__name__)

        @functools.wraps(cls)
        def construct(*args, **kwargs):
            self.asked()
            return cpu_type(*args, **kwargs)

        return construct

    def _leaf_copy(self, t: object, caller) -> None:
        """A leaf that requires grad, moved by the snippet's own line (``Module.cuda`` moves its
        parameters in place: they stay leaves on a GPU too)."""
        if caller.f_code.co_filename != SNIPPET_FILENAME:
            return
        if isinstance(t, torch.Tensor) and t.is_leaf and t.requires_grad:
            self.use.leaf_copies.add(self.line_now())


class _CpuGenerator(torch.Generator):
    """``torch.Generator("cuda")`` as a CPU generator (an instance of torch.Generator all the same)."""

    use: CudaUse | None = None
    line_now: Callable[[], int | None] | None = None

    def __new__(cls, device: object = "cpu"):
        if is_cuda(device):
            if cls.use is not None and cls.line_now is not None:
                cls.use.lines.add(cls.line_now())
            device = _CPU
        return super().__new__(cls, device)

    def __init__(self, device: object = "cpu"):
        super().__init__()


def _counting(fn: Callable, name: str, use: CudaUse, line_now: Callable[[], int | None]) -> Callable:
    @functools.wraps(fn)
    def counted(*args, **kwargs):
        use.counters.setdefault(name, set()).add(line_now())
        return fn(*args, **kwargs)

    return counted


def _no_wait(device: object = None) -> None:
    """``torch.cuda.synchronize()``: CPU ops are done when they return; nothing to wait for."""


@contextlib.contextmanager
def on_cpu(use: CudaUse, line_now: Callable[[], int | None]) -> Iterator[None]:
    """Run the body with CUDA devices made the CPU; everything changed is restored after."""
    cpu = CpuForCuda(use, line_now)
    patched: list[tuple[object, str, object, bool]] = []  # (owner, name, original, owner had it itself)

    def patch(owner: object, name: str, wrapper: Callable) -> None:
        original = getattr(owner, name)
        patched.append((owner, name, original, name in vars(owner)))
        setattr(owner, name, wrapper(original))

    cuda = torch.cuda
    for name in _MEMORY_COUNTERS:
        patch(cuda, name, lambda fn, name=name: _counting(fn, name, use, line_now))
    patch(cuda, "synchronize", lambda fn: _no_wait)
    for name in _factories():
        patch(torch, name, cpu.factory)
    tensor = torch.Tensor
    patch(tensor, "cuda", cpu.cuda)
    patch(tensor, "to", cpu.to)
    patch(tensor, "type", cpu.type)
    patch(tensor, "pin_memory", cpu.pin_memory)
    for name in _CUDA_TYPES:
        if hasattr(cuda, name):
            patch(cuda, name, cpu.cuda_type)
    for name in _TENSOR_METHODS:
        patch(tensor, name, cpu.method)
    patch(_device.DeviceContext, "__init__", lambda init: _cpu_context(init, cpu))
    patch(torch, "Generator", lambda generator: _CpuGenerator)
    _CpuGenerator.use, _CpuGenerator.line_now = use, line_now
    default = getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)
    try:
        yield
    finally:
        if getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None) is not default:
            torch.set_default_device(None if default is None else default.device)  # the snippet set one
        _CpuGenerator.use = _CpuGenerator.line_now = None
        for owner, name, original, own in reversed(patched):
            if own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)  # inherited (Tensor.to is TensorBase's): inherited again


def _cpu_context(init: Callable, cpu: CpuForCuda) -> Callable:
    """``with torch.device("cuda")`` and ``set_default_device("cuda")`` make a DeviceContext: the CPU's."""

    @functools.wraps(init)
    def cpu_context(ctx, device):
        if is_cuda(device):
            cpu.asked()
            device = _CPU
        init(ctx, device)

    return cpu_context
