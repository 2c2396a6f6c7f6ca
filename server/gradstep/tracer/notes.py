"""What the code used that is not drawn, or that ran otherwise here: the facts a trace's notes are
written from (``Trace.uses``; the sentences are gradstep.note_text's)."""

from __future__ import annotations

import re

from gradstep.note_text import use
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

    def facts(self, limits: Limits, error: dict | None) -> list[dict]:
        """The facts the trace's notes are written from (``Trace.uses``: gradstep.note_text), in order."""
        uses = self.cuda.facts() if limits.cuda_on_cpu else []
        if not limits.cuda_on_cpu and error and _NO_CUDA.search(error["message"]):
            uses.append({"kind": "no_gpu"})
        for kind, lines in (
            ("ipython", set(self.ipython)),
            ("transformed", self.transformed),
            ("forward_ad", self.forward_ad),
            ("compiled", self.compiled),
        ):
            if lines:
                uses.append(use(kind, lines))
        if limits.offline:
            uses.extend(self.offline.facts())
        return uses
