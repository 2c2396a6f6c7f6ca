"""The notes a trace ends with: what the code used that is not drawn, or that ran otherwise here."""

from __future__ import annotations

import re
from collections.abc import Callable

from gradstep.tracer.devices import CudaUse
from gradstep.tracer.limits import Limits
from gradstep.tracer.offline import OfflineUse

_NO_CUDA = re.compile(r"not compiled with CUDA|no NVIDIA driver|CUDA is not available|CUDA driver", re.I)


class Uses:
    """What the code used that a note speaks of (the recorder and patches.py fill it in)."""

    def __init__(self) -> None:
        self.ipython: list[int] = []  # lines skipped as IPython's own (magics, shell commands)
        self.transformed: set[int | None] = set()  # lines that ran inside a torch.func transform
        self.forward_ad: set[int | None] = set()  # lines that entered forward_ad.dual_level
        self.compiled: set[int | None] = set()  # lines whose torch.compile ran with aot_eager
        self.cuda = CudaUse()  # what the code asked of CUDA (Limits.cuda_on_cpu)
        self.offline = OfflineUse()  # what it reached for that a sandboxed run lacks (Limits.offline)

    def failed(self, e: BaseException) -> None:
        """The code failed with ``e``: what it asked for may be why."""
        self.cuda.failed(e)
        self.offline.failed(e)

    def notes(
        self, limits: Limits, error: dict | None, listed: Callable[[set[int | None]], str]
    ) -> list[str]:
        """The notes, in order; ``listed`` says lines as the recorder counts them."""
        notes = self.cuda.notes() if limits.cuda_on_cpu else []
        if not limits.cuda_on_cpu and error and _NO_CUDA.search(error["message"]):
            notes.append(
                "This machine has no GPU, so CUDA code cannot run here. Run the snippet on the CPU "
                "(drop .cuda() and device='cuda'): autograd behaves the same."
            )
        if self.ipython:
            notes.append(
                f"Line(s) {listed(set(self.ipython))} are IPython's own (a notebook's %magics and !shell "
                "commands), which Python cannot run, so the run skipped them. torch and numpy are installed "
                "here already, and plots show nothing."
            )
        if self.transformed:
            where = listed(self.transformed)
            notes.append(
                f"Line(s) {where} ran inside a torch.func transform (grad, vjp, jacrev, vmap…): functorch "
                "differentiates there with its own wrapped tensors, so those inner steps are not drawn; "
                "what the transform returned is."
            )
        if self.forward_ad:
            where = listed(self.forward_ad)
            notes.append(
                f"Line(s) {where} use forward-mode AD (torch.autograd.forward_ad): dual tensors carry their "
                "tangents forward with the values and build no backward graph. gradstep draws reverse mode, so "
                "the dual computation is not drawn; its prints are in the output."
            )
        if self.compiled:
            where = listed(self.compiled)
            notes.append(
                f"torch.compile at line(s) {where} ran with its aot_eager backend: this sandbox has no C++ "
                "compiler for inductor, the default. Autograd sees the same graph either way (one "
                "CompiledFunctionBackward node for the compiled region); only the generated kernels differ."
            )
        if limits.offline:
            notes.extend(self.offline.notes())
        return notes
