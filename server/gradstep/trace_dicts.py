"""The trace as the plain dicts the tracer builds and narrate and diagnose read.

One ``TypedDict`` per model of ``gradstep.schema`` (the contract, validated on the server): the
same keys, required where the model has no default. The tracer leaves out a key whose value is
the default, so readers index the required keys and ``.get`` the rest. (No ``from __future__
import annotations`` here: a TypedDict reads ``NotRequired`` from evaluated annotations.)
``tests/trace/test_trace_dicts.py`` holds each TypedDict to its model.
"""

from typing import Any, NotRequired, TypedDict

from gradstep.schema import Api, Status, StepKind


class TraceErrorDict(TypedDict):
    type: str
    message: str
    line: NotRequired[int | None]
    file: NotRequired[int | None]
    column: NotRequired[int | None]
    traceback: NotRequired[str | None]


class SavedDict(TypedDict):
    name: str
    kind: str  # "tensor" | "tensors" | "value"
    shape: NotRequired[list[int] | None]
    dtype: NotRequired[str | None]
    bytes: NotRequired[int | None]
    value: NotRequired[Any]
    of: NotRequired[str | None]
    packed: NotRequired[str | None]
    unreadable: NotRequired[str | None]


class NodeDict(TypedDict):
    id: int
    op: str
    step: int
    seq: NotRequired[int | None]
    line: NotRequired[int | None]
    file: NotRequired[int | None]
    module: NotRequired[str | None]
    next: NotRequired[list[int]]
    saved: NotRequired[list[SavedDict]]
    tensor: NotRequired[str | None]
    grad_graph: NotRequired[bool]
    unreadable: NotRequired[str | None]


class NodeStateDict(TypedDict):
    id: int
    freed: NotRequired[bool]
    stale: NotRequired[bool]
    stale_saved: NotRequired[list[str]]
    executed: NotRequired[bool]
    failed: NotRequired[bool]
    order: NotRequired[int | None]
    dropped: NotRequired[bool]
    vars: NotRequired[list[str]]


class GradDict(TypedDict):
    shape: list[int]
    dtype: str
    has_grad_fn: bool
    norm: float | None
    values: NotRequired[Any]
    format: NotRequired[list[str]]


class TensorDict(TypedDict):
    name: str
    shape: list[int]
    dtype: str
    requires_grad: bool
    is_leaf: bool
    retains_grad: NotRequired[bool]
    node: NotRequired[int | None]
    grad: NotRequired[GradDict | None]


class WarningDict(TypedDict):
    category: str
    message: str
    line: NotRequired[int | None]
    file: NotRequired[int | None]


class LinkDict(TypedDict):
    start: int
    end: int
    node: NotRequired[int | None]
    tensor: NotRequired[str | None]


class StepDict(TypedDict):
    index: int
    kind: StepKind
    line: NotRequired[int | None]
    file: NotRequired[int | None]
    repeat: NotRequired[int]
    api: NotRequired[Api | None]
    retain_graph: NotRequired[bool | None]
    create_graph: NotRequired[bool | None]
    inputs: NotRequired[list[str] | None]
    gradient: NotRequired[bool | None]
    error: NotRequired[TraceErrorDict | None]
    ran_lines: NotRequired[list[int]]
    ran_files: NotRequired[list[int]]
    rebuilt: NotRequired[int]
    returned: NotRequired[list[GradDict | None] | None]
    nonfinite: NotRequired[list[int]]
    nodes: NotRequired[list[NodeStateDict]]
    edges: NotRequired[list[tuple[int, int]]]
    tensors: NotRequired[list[TensorDict]]
    saved_bytes: NotRequired[int]
    stdout: NotRequired[str]
    warnings: NotRequired[list[WarningDict]]
    explanation: NotRequired[str]
    links: NotRequired[list[LinkDict]]


class FixDict(TypedDict):
    title: str
    explanation: str
    code: str


class DiagnosisDict(TypedDict):
    kind: str
    severity: str  # "error" | "warning"
    message: str
    line: NotRequired[int | None]
    fixes: NotRequired[list[FixDict]]


class SourceFileDict(TypedDict):
    path: str
    code: NotRequired[str | None]


class TraceDict(TypedDict):
    status: Status
    version: NotRequired[int]
    error: NotRequired[TraceErrorDict | None]
    limit: NotRequired[str | None]
    stdout: NotRequired[str]
    code: NotRequired[str]
    files: NotRequired[list[SourceFileDict]]
    torch: NotRequired[str]
    nodes: NotRequired[list[NodeDict]]
    steps: NotRequired[list[StepDict]]
    warnings: NotRequired[list[WarningDict]]
    truncated: NotRequired[list[str]]
    notes: NotRequired[list[str]]
    diagnoses: NotRequired[list[DiagnosisDict]]
