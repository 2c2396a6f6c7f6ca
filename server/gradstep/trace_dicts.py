"""The trace as plain dicts: the rows the tracer builds and narrate and diagnose read, and the
columns the wire carries (version 4), which the server validates.

One ``TypedDict`` per model of ``gradstep.schema``: the same keys, required where the model has no
default. The tracer leaves out a key whose value is the default, so readers index the required keys
and ``.get`` the rest. In memory a trace's tables are rows (``TraceDict``: a ``NodeDict`` per node, a
``StepDict`` with its ``edges``); on the wire they are columns (``WireTraceDict``, made from the row
dicts by ``_columns``; ``gradstep.columns`` converts). (No ``from __future__ import annotations``
here: a TypedDict reads ``NotRequired`` from evaluated annotations.)
The TypedDicts are written from the models by ``make schema`` (tests/trace/trace_copies.py), between
the markers below; the rest of this module is written by hand. ``tests/trace/test_trace_dicts.py``
holds each TypedDict to its model, type for type.

The wire dicts are also how the server validates a child's trace (``TRACE``): as complete as
validating the models (the same keys and types, no extra key, columns of one length), without
building a model object per dict (a third of the time on a 1 MB trace).
"""

import contextlib
import gc
import threading
from typing import Annotated, Any, NotRequired, get_type_hints

from pydantic import AfterValidator, ConfigDict, TypeAdapter, with_config
from typing_extensions import TypedDict  # pydantic validates this one on Python 3.11, not typing's

from gradstep import schema
from gradstep.columns import pack
from gradstep.schema import Trace, one_length

_strict_keys = with_config(ConfigDict(extra="forbid"))  # as the models: an unknown key is an error


# ---- generated from gradstep.schema by `make schema` (tests/trace/trace_copies.py): do not edit ----


@_strict_keys
class TraceErrorDict(TypedDict):
    type: str
    message: str
    line: NotRequired[int | None]
    file: NotRequired[int | None]
    column: NotRequired[int | None]
    traceback: NotRequired[str | None]
    reported: NotRequired[str | None]


@_strict_keys
class SavedDict(TypedDict):
    name: str
    kind: schema.SavedKind
    shape: NotRequired[list[int] | None]
    dtype: NotRequired[str | None]
    bytes: NotRequired[int | None]
    value: NotRequired[Any]
    of: NotRequired[str | None]
    packed: NotRequired[str | None]
    unreadable: NotRequired[str | None]


@_strict_keys
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
    iteration: NotRequired[int | None]
    unreadable: NotRequired[str | None]
    saved_bytes: NotRequired[int | None]


@_strict_keys
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


@_strict_keys
class GradDict(TypedDict):
    shape: list[int]
    dtype: str
    has_grad_fn: bool
    norm: float | None
    values: NotRequired[Any]
    format: NotRequired[list[schema.PrintMode]]


@_strict_keys
class TensorDict(TypedDict):
    name: str
    shape: list[int]
    dtype: str
    requires_grad: bool
    is_leaf: bool
    retains_grad: NotRequired[bool]
    node: NotRequired[int | None]
    grad: NotRequired[GradDict | None]
    unnamed: NotRequired[bool]
    was: NotRequired[str | None]


@_strict_keys
class WarningDict(TypedDict):
    category: str
    message: str
    line: NotRequired[int | None]
    file: NotRequired[int | None]


@_strict_keys
class ReachDict(TypedDict):
    line: int
    what: str


@_strict_keys
class UseDict(TypedDict):
    kind: schema.UseKind
    lines: NotRequired[list[int]]
    name: NotRequired[str | None]
    step: NotRequired[int | None]
    detail: NotRequired[str | None]


@_strict_keys
class LinkDict(TypedDict):
    start: int
    end: int
    node: NotRequired[int | None]
    tensor: NotRequired[str | None]


@_strict_keys
class ParamUpdateDict(TypedDict):
    name: str
    grad: NotRequired[schema.GradChange | None]
    updated: NotRequired[bool]
    delta_norm: NotRequired[float | None]
    grad_norm_before: NotRequired[float | None]
    grad_norm_after: NotRequired[float | None]


@_strict_keys
class UpdateDict(TypedDict):
    op: schema.UpdateOp
    of_class: NotRequired[str | None]
    params: NotRequired[list[ParamUpdateDict]]
    set_to_none: NotRequired[bool | None]
    max_norm: NotRequired[float | None]
    norm_type: NotRequired[float | None]
    total_norm_before: NotRequired[float | None]
    total_norm_after: NotRequired[float | None]
    clip_value: NotRequired[float | None]
    lr_before: NotRequired[list[float | None] | None]
    lr_after: NotRequired[list[float | None] | None]


@_strict_keys
class StepDict(TypedDict):
    index: int
    kind: schema.StepKind
    line: NotRequired[int | None]
    file: NotRequired[int | None]
    repeat: NotRequired[int]
    iteration: NotRequired[int | None]
    update: NotRequired[UpdateDict | None]
    api: NotRequired[schema.Api | None]
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


@_strict_keys
class FixDict(TypedDict):
    title: str
    explanation: str
    code: str
    source_lines: NotRequired[list[int | None] | None]
    outcome: NotRequired[str | None]


@_strict_keys
class DiagnosisDict(TypedDict):
    kind: str
    severity: schema.Severity
    message: str
    line: NotRequired[int | None]
    fixes: NotRequired[list[FixDict]]


@_strict_keys
class SourceFileDict(TypedDict):
    path: str
    code: NotRequired[str | None]


@_strict_keys
class TraceDict(TypedDict):
    status: schema.Status
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
    uses: NotRequired[list[UseDict]]
    notes: NotRequired[list[str]]
    diagnoses: NotRequired[list[DiagnosisDict]]
    reaches: NotRequired[list[ReachDict]]


# ---- end of the generated TypedDicts ----


def _one_entry_per_row(table: dict) -> dict:
    one_length(table.values())
    return table


def _columns(row: Any, name: str, implicit: str | None = None) -> Any:
    """The wire's column table of the row dict ``row`` (``schema.columns_of``): a list per key,
    required where the row requires the key, else absent or null; all of one length."""
    hints = get_type_hints(row)
    columns = {
        key: list[hint] if key in row.__required_keys__ else NotRequired[list[hint] | None]
        for key, hint in hints.items()
        if key != implicit
    }
    return Annotated[_strict_keys(TypedDict(name, columns)), AfterValidator(_one_entry_per_row)]


def _wire(row: Any, name: str, columns: dict[str, Any], drop: tuple[str, ...] = ()) -> Any:
    """``row`` (a dict with tables as lists of rows) as the wire has it: ``columns`` for those
    tables, without ``drop``."""
    hints = get_type_hints(row)
    fields = {
        key: columns.get(key, hint) if key in row.__required_keys__ else NotRequired[columns.get(key, hint)]
        for key, hint in hints.items()
        if key not in drop
    }
    return _strict_keys(TypedDict(name, fields))


NodeTableDict = _columns(NodeDict, "NodeTableDict", implicit="id")
NodeStateTableDict = _columns(NodeStateDict, "NodeStateTableDict")
TensorTableDict = _columns(TensorDict, "TensorTableDict")
WireStepDict = _wire(
    StepDict, "WireStepDict", {"nodes": NodeStateTableDict, "tensors": TensorTableDict}, ("edges",)
)
WireTraceDict = _wire(TraceDict, "WireTraceDict", {"nodes": NodeTableDict, "steps": list[WireStepDict]})

TRACE = TypeAdapter(WireTraceDict)  # validates a child's trace (plain data) against the contract
# A big trace's steps are validated one at a time: one call over a 1 MB trace holds the GIL for
# 15-60 ms, and the server's event loop waits that long for it.
_STEPS = TypeAdapter(list[WireStepDict])


def validate(trace: Any) -> None:
    """Raises ``pydantic.ValidationError`` unless ``trace`` (parsed JSON) is a trace."""
    with collector_paused():
        if not isinstance(trace, dict) or not isinstance(trace.get("steps"), list):
            TRACE.validate_python(trace)
            return
        TRACE.validate_python({**trace, "steps": []})  # the rest, as a whole
        steps = trace["steps"]
        for start in range(len(steps)):
            _STEPS.validate_python(steps[start : start + 1])


def typed(trace: TraceDict) -> Trace:
    """The typed ``Trace`` of a trace's dicts (rows, as the tracer builds them). With the collector
    paused: building ~10^4 models set off full collections that walk everything torch has made
    (~160 ms instead of ~50 for the 24-layer trace)."""
    with collector_paused():
        return Trace.model_validate(pack(trace))


_paused = 0  # validations under way with the collector paused (threads of one process share it)
_paused_lock = threading.Lock()


@contextlib.contextmanager
def collector_paused():
    """No garbage collection while a trace is validated: validating a 1 MB trace makes ~10^5
    objects, and a full collection falling inside it took it from ~25 ms to ~125 ms. (They are
    freed by reference counting when the validated copy is dropped; the collector runs again once
    the last validation under way is done.)"""
    global _paused
    with _paused_lock:
        _paused += 1
        gc.disable()
    try:
        yield
    finally:
        with _paused_lock:
            _paused -= 1
            if _paused == 0:
                gc.enable()
