"""The trace: the one format every gradstep front end reads.

These pydantic models are its single definition. The JSON Schema shipped in
``gradstep/trace.schema.json`` is generated from them (``make schema``) and
``docs/trace-format.md`` explains them. The tracer builds plain dicts with the
same shape (fast); ``Trace.model_validate`` turns them into these models.

Layout: ``Trace.nodes`` is a table of what never changes about a graph node
(op, line, module, saved shapes, edges). Each ``Step.nodes`` lists the state
of every node alive at that step (freed, stale, executed, order), joined with
the table by ``id``. So any step can be drawn without replaying earlier ones.
Each table is written as columns (``columns_of``): one list per field of its row
model (``NodeInfo``, ``NodeState``, ``TensorState``); ``gradstep.columns`` turns
rows into columns and back.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

# 2: Step.explanation, Step.links, Trace.diagnoses (additive: v1 readers ignore them).
# 3: Grad.values rounded to the digits torch prints (per value, no longer relative to the largest),
#    with Grad.format (torch's print mode); non-finite values as "nan"/"inf"/"-inf"; complex
#    gradients carry [re, im] pairs and a norm; norms keep 9 significant digits.
#    Added within 3 (fields are only added within a version): Step.nonfinite; Trace.files with `file`
#    on NodeInfo, Step, TraceError and Warning, and Step.ran_files (gradstep.record(): the user's
#    own code across files; absent in snippet traces, whose lines are all in `code`).
# 4: the tables as columns: Trace.nodes (a node's id is its position), Step.nodes and Step.tensors are
#    objects with one list per field of NodeInfo / NodeState / TensorState; Step.edges is left out (the
#    edges a step added are the `next` of the nodes whose `step` it is). The same facts, a quarter
#    smaller compressed (gradstep.columns).
#    Added within 4: Step.kind "update" with Step.update (the optimizer calls), Step.iteration.
#    Added within 4: the step kind "error" (the code raised outside a backward/grad call).
VERSION = 4
# Written by the server into every trace it serves, never taken from the sandboxed child's bytes.
SERVER_FIELDS = ("code", "version", "torch", "reaches")

Status = Literal["ok", "error", "timeout", "limit", "crashed"]
StepKind = Literal["forward", "backward", "grad", "update", "error"]
CALL_KINDS = ("backward", "grad")  # the steps that are engine calls (frontend/model.js isCall says the same)
Api = Literal["Tensor.backward", "torch.autograd.backward", "torch.autograd.grad"]
SavedKind = Literal["tensor", "tensors", "value"]
PrintMode = Literal["int", "fixed", "sci"]
Severity = Literal["error", "warning"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _in_file() -> Any:
    return Field(
        None,
        description="Recordings of the user's own code (gradstep.record()): index into Trace.files of the file "
        "`line` is in. Absent in a snippet's trace (the line is in `code`).",
    )


class TraceError(_Model):
    """An exception raised by the snippet, with torch's own message."""

    type: str = Field(
        description="Exception class name, e.g. RuntimeError; when the runner stopped the snippet, the status "
        "(timeout, limit, crashed)."
    )
    message: str
    line: int | None = Field(None, description="Snippet line (1-based) the error points at.")
    file: int | None = _in_file()
    column: int | None = Field(None, description="Column (1-based), for syntax errors.")
    traceback: str | None = Field(None, description="Traceback limited to the snippet's frames.")
    reported: str | None = Field(
        None,
        description="What the run's own process wrote about why it ended without a trace (status crashed): "
        "the run's words, never the server's; shown quoted, as reported by the code.",
    )


class SavedValue(_Model):
    """One value a node saved for its backward (``node._saved_<name>``)."""

    name: str = Field(
        description="Attribute name without the `_saved_` prefix: self, other, result, exponent…"
    )
    kind: SavedKind = Field(
        description="tensor: one saved tensor; tensors: a list of them; value: a non-tensor "
        "(size, exponent, flag) that stays readable after backward."
    )
    shape: list[int] | None = None
    dtype: str | None = None
    bytes: int | None = Field(None, description="Bytes of the storage(s) the saved tensor(s) hold.")
    value: Any = Field(None, description="For kind=value: the value (numbers, lists, or its repr).")
    of: str | None = Field(None, description="Snippet tensor this saved tensor is, when it is one.")
    packed: str | None = Field(
        None,
        description="Saved under saved_tensors_hooks (checkpointing, save_on_cpu, the snippet's own pack/unpack): "
        "what the pack hook kept, e.g. 'tensor on cpu' or '_Holder' (a checkpoint's placeholder: recomputed in "
        "backward). shape/dtype/bytes then describe what was packed. Never unpacked by the tracer.",
    )
    unreadable: str | None = Field(
        None,
        description="Why the tracer could not read this value (e.g. a sparse tensor has no storage to count).",
    )


class NodeInfo(_Model):
    """What never changes about a graph node."""

    id: int = Field(description="Small integer handed out on first sight, never reused.")
    op: str = Field(description="Node type, e.g. PowBackward0, AccumulateGrad.")
    seq: int | None = Field(
        None,
        description="Autograd sequence number relative to the run's start (creation order); null for AccumulateGrad.",
    )
    line: int | None = Field(None, description="Snippet line that created the node.")
    file: int | None = _in_file()
    module: str | None = Field(
        None, description="Module path when created inside an nn.Module call, e.g. model.layers.3.self_attn."
    )
    next: list[int] = Field(
        default_factory=list,
        description="Ids of the nodes this node passes gradient to (its next_functions).",
    )
    saved: list[SavedValue] = Field(default_factory=list)
    tensor: str | None = Field(None, description="AccumulateGrad only: the leaf it accumulates into.")
    grad_graph: bool = Field(
        False, description="Built by a create_graph=True call: part of a gradient's own graph."
    )
    step: int = Field(description="Index of the first step that shows this node.")
    unreadable: str | None = Field(
        None, description="Why the tracer could not read this node's details; it is still part of the graph."
    )
    saved_bytes: int | None = Field(
        None,
        description="Bytes of the storages its saved tensors hold, each storage counted once (`x * x` saves "
        "x twice: one storage). Absent when it holds no readable saved tensor.",
    )


class NodeState(_Model):
    """A node's state at one step. Join with ``Trace.nodes`` by ``id``."""

    id: int
    freed: bool = Field(False, description="A backward released its saved tensors; reading one now raises.")
    stale: bool = Field(
        False, description="A saved tensor was modified in place after it was saved (memory still held)."
    )
    stale_saved: list[str] = Field(default_factory=list, description="Names of the stale saved tensors.")
    executed: bool = Field(False, description="Ran in this step's backward/grad call.")
    failed: bool = Field(
        False, description="The call failed at this node (it was reached but could not run)."
    )
    order: int | None = Field(None, description="Position in this call's engine execution order (0 = first).")
    dropped: bool = Field(
        False,
        description="No snippet name reaches it any more, so the tracer let go of it (torch frees it, unless "
        "something the name scan does not see holds it: a closure, a container nested deeper than 3 levels); "
        "shown once, then gone.",
    )
    vars: list[str] = Field(
        default_factory=list,
        description="Snippet variables whose grad_fn this node is. For AccumulateGrad: the leaf's names, "
        "given only when they differ from the node's `tensor` in Trace.nodes.",
    )


class Grad(_Model):
    """A gradient tensor: `.grad` of a tensor, or a value `autograd.grad` returned."""

    shape: list[int]
    dtype: str
    values: Any = Field(
        None,
        description="Nested lists of the values (a bare value for shape []), each rounded to exactly the digits "
        "torch prints it with in the mode of `format` (sci: 5 significant digits; int: as it is; fixed: 4 "
        "decimals, more below 0.1 to keep 4 significant digits of its own); non-finite values are the strings "
        '"nan", "inf", "-inf". A complex value is a pair [re, im]. Absent when the tensor has more than 64 '
        "elements or is not a dense float or complex tensor.",
    )
    format: list[PrintMode] = Field(
        default_factory=list,
        description="How torch prints `values`, decided over the whole tensor as torch._tensor_str does: one "
        "mode, or two for a complex dtype (real parts, imaginary parts). Given with `values`.",
    )
    has_grad_fn: bool = Field(description="The grad itself has a grad_fn (create_graph=True).")
    norm: float | None = Field(
        description="L2 norm, to 9 significant digits (and at least 4 decimals), or whole where that rounding "
        "would print unlike torch; null when not finite or not a dense float or complex tensor."
    )


class TensorState(_Model):
    name: str = Field(description="Snippet variable, `module.param` (e.g. model.0.weight), or `list[i]`.")
    shape: list[int]
    dtype: str
    requires_grad: bool
    is_leaf: bool
    retains_grad: bool = False
    node: int | None = Field(None, description="Id of its grad_fn, or of its AccumulateGrad node for a leaf.")
    grad: Grad | None = None
    unnamed: bool = Field(
        False,
        description="No name of the snippet reaches it now: a live graph's AccumulateGrad node or an optimizer "
        "holds it. `name` is then a label kept for it for the rest of the run, e.g. `w (line 2)`: the name "
        "and line that bound it (with the iteration when that line bound several).",
    )
    was: str | None = Field(None, description="For an unnamed tensor: the name it had before, if it had one.")


def one_length(columns: Any) -> None:
    """A column table's rule: its columns (``None``: absent) have one length, a row's entries."""
    lengths = {len(column) for column in columns if column is not None}
    if len(lengths) > 1:
        raise ValueError(f"columns of different lengths: {sorted(lengths)}")


class _Columns(_Model):
    """A table as columns: one list per field of its row model, entry i for row i."""

    row_model: ClassVar[type[_Model]]
    implicit: ClassVar[str | None] = None

    def rows(self) -> list[Any]:
        """The table's rows, each a ``row_model`` (absent columns at their default)."""
        columns = {name: values for name, values in self.__dict__.items() if values is not None}
        count = len(next(iter(columns.values()))) if columns else 0
        rows = []
        for i in range(count):
            fields = {name: values[i] for name, values in columns.items()}
            if self.implicit:
                fields[self.implicit] = i
            rows.append(self.row_model.model_construct(**fields))
        return rows

    @model_validator(mode="after")
    def _one_entry_per_row(self) -> _Columns:
        one_length(self.__dict__.values())
        return self


def columns_of(row: type[_Model], implicit: str | None = None) -> type[_Columns]:
    """The column table of ``row`` (a model): its required fields are columns every table has;
    any other column may be absent (or null), and then each row has the field's default.
    ``implicit``: a field that is each row's position, not written."""
    fields: dict[str, Any] = {}
    for name, f in row.model_fields.items():
        if name == implicit:
            continue
        described = f"`{name}` of each {row.__name__}" + (f": {f.description}" if f.description else ".")
        if f.is_required():
            fields[name] = (list[f.annotation], Field(description=described))  # type: ignore[name-defined]
        else:
            default = f.get_default(call_default_factory=True)
            described += f" Absent or null: every row's is the default, {json.dumps(default)}."
            fields[name] = (list[f.annotation] | None, Field(None, description=described))  # type: ignore[name-defined]
    doc = f"{row.__name__} as columns" + (f"; a row's `{implicit}` is its position." if implicit else ".")
    table = create_model(f"{row.__name__}Columns", __base__=_Columns, __doc__=doc, **fields)
    table.row_model, table.implicit = row, implicit
    return table


NodeTable = columns_of(NodeInfo, implicit="id")
NodeStateTable = columns_of(NodeState)
TensorTable = columns_of(TensorState)


class Warning_(_Model):
    model_config = ConfigDict(extra="forbid", title="Warning")

    category: str
    message: str
    line: int | None = None
    file: int | None = _in_file()


class Reach(_Model):
    """A place where the snippet's code reaches beyond PyTorch's public API and plain Python (gradstep.reach)."""

    line: int = Field(description="Snippet line (1-based).")
    what: str = Field(description="What it uses there, e.g. `os.write`, `getattr`, `import ctypes`.")


class Link(_Model):
    """A span of ``Step.explanation`` that talks about a node or a tensor (for linking/highlighting)."""

    start: int = Field(description="Character offset of the span in the explanation (0-based, inclusive).")
    end: int = Field(description="Character offset just past the span (exclusive).")
    node: int | None = Field(None, description="NodeInfo.id the span refers to.")
    tensor: str | None = Field(None, description="TensorState.name the span refers to.")


UpdateOp = Literal["zero_grad", "step", "clip_grad_norm", "clip_grad_value", "lr_step"]
GradChange = Literal["set_to_none", "zeroed", "clipped"]


class ParamUpdate(_Model):
    """What an update call did to one parameter."""

    name: str = Field(
        description="The parameter as the step's tensors name it (e.g. model.weight); ? if no name."
    )
    grad: GradChange | None = Field(
        None,
        description="What the call did to its .grad: set_to_none, zeroed, clipped; null: left it as it was.",
    )
    updated: bool = Field(False, description="op=step: its values changed.")
    delta_norm: float | None = Field(
        None,
        description="op=step: the L2 norm of the change of its values, ‖after − before‖ (9 significant digits).",
    )
    grad_norm_before: float | None = Field(
        None, description="Clipping: the L2 norm of its .grad before the call."
    )
    grad_norm_after: float | None = Field(
        None, description="Clipping: the L2 norm of its .grad after the call."
    )


class Update(_Model):
    """An optimizer call: what it did to .grad, to the parameters and to the learning rate."""

    op: UpdateOp = Field(
        description="zero_grad: an optimizer's or a module's zero_grad(); step: an optimizer's step(); "
        "clip_grad_norm / clip_grad_value: torch.nn.utils.clip_grad_norm_ / clip_grad_value_; lr_step: a "
        "learning-rate scheduler's step()."
    )
    of_class: str | None = Field(
        None,
        description="Class of the object called: the optimizer (SGD, Adam), module or scheduler (StepLR).",
    )
    params: list[ParamUpdate] = Field(
        default_factory=list, description="The parameters the call covers, in its order (none for lr_step)."
    )
    set_to_none: bool | None = Field(None, description="zero_grad: its set_to_none argument.")
    max_norm: float | None = Field(None, description="clip_grad_norm: its max_norm.")
    norm_type: float | None = Field(None, description="clip_grad_norm: its norm_type.")
    total_norm_before: float | None = Field(
        None,
        description="clip_grad_norm: the total norm of the gradients before clipping (what it returned).",
    )
    total_norm_after: float | None = Field(None, description="clip_grad_norm: the total norm after clipping.")
    clip_value: float | None = Field(None, description="clip_grad_value: its clip_value.")
    lr_before: list[float | None] | None = Field(
        None, description="step, lr_step: the learning rate of each param group before the call."
    )
    lr_after: list[float | None] | None = Field(
        None, description="step, lr_step: the learning rate of each param group after the call."
    )


class Step(_Model):
    index: int
    kind: StepKind
    line: int | None = Field(
        None, description="Snippet line of the step (the call, or the line that built nodes)."
    )
    file: int | None = _in_file()
    repeat: int = Field(
        1, description="Forward steps: how many line executions are folded into this step (loops)."
    )
    iteration: int | None = Field(
        None,
        description="The iteration (from 1) of the outermost loop of the snippet running when the step was taken; "
        "null outside loops (and in recordings of the user's own code).",
    )
    update: Update | None = Field(
        None,
        description="kind=update: the optimizer call (zero_grad, an optimizer's step, gradient clipping, a "
        "scheduler's step). Past Limits.line_repeats executions of its line such a call gets no step of its own "
        "(as a loop's forward lines are folded); its effect shows in the next step's tensors.",
    )
    api: Api | None = None
    retain_graph: bool | None = Field(
        None, description="Effective value: when not given it takes create_graph's value."
    )
    create_graph: bool | None = None
    inputs: list[str] | None = Field(None, description="Names of `inputs=` tensors, when given.")
    gradient: bool | None = Field(None, description="`gradient=` / `grad_outputs=` was given.")
    error: TraceError | None = Field(
        None,
        description="Calls: the call raised. kind=error: the exception that ended the run, raised outside a "
        "backward/grad call (Trace.error without its traceback); the step shows the graph as it stood then.",
    )
    ran_lines: list[int] = Field(
        default_factory=list,
        description="Calls: snippet lines the engine ran while the call ran (the snippet's hooks, its custom "
        "Functions' backward, a checkpointed function recomputing its forward).",
    )
    ran_files: list[int] = Field(
        default_factory=list,
        description="Recordings of the user's own code: for each of `ran_lines`, the index into Trace.files of "
        "its file.",
    )
    rebuilt: int = Field(
        0,
        description="Calls without create_graph: autograd nodes built while the call ran, i.e. a checkpoint "
        "recomputing the forward whose saved tensors it did not keep (those nodes are not drawn).",
    )
    returned: list[Grad | None] | None = Field(
        None, description="torch.autograd.grad: the gradients it returned."
    )
    nonfinite: list[int] = Field(
        default_factory=list,
        description="Calls: ids of the nodes whose output gradient held a nan or an inf while the gradient they "
        "received was finite (where a non-finite gradient first appeared), in the order they ran. Checked when "
        "the call hooked every node (graphs up to 256 nodes, anomaly mode, or a node that may raise); empty "
        "otherwise.",
    )
    nodes: NodeStateTable = Field(  # type: ignore[valid-type]
        default_factory=lambda: NodeStateTable(id=[]),
        description="The state of every node alive at this step. The whole graph of a step is the `next` of "
        "its nodes in Trace.nodes (the edges this step added: the `next` of the nodes whose `step` is this "
        "one); gradient flowed along the edges between nodes with `executed` (or `failed`) set, in `order`.",
    )
    tensors: TensorTable = Field(  # type: ignore[valid-type]
        default_factory=lambda: TensorTable(name=[], shape=[], dtype=[], requires_grad=[], is_leaf=[])
    )
    saved_bytes: int = Field(0, description="Bytes held by live saved tensors, each storage counted once.")
    stdout: str = ""
    warnings: list[Warning_] = Field(default_factory=list)
    explanation: str = Field(
        "", description="Plain-language narration of what this step changed, derived from the trace alone."
    )
    links: list[Link] = Field(
        default_factory=list, description="Spans of `explanation` naming a node or a tensor."
    )


class Fix(_Model):
    """A corrected snippet that was run and checked before it was offered."""

    title: str = Field(description="Short imperative, e.g. 'Keep the graph with retain_graph=True'.")
    explanation: str = Field(description="What the change does and what it costs.")
    code: str = Field(description="The whole corrected snippet.")
    source_lines: list[int | None] | None = Field(
        None,
        description="For each line of `code`, the line of the run's snippet it comes from (1-based; "
        "null: the fix added it). Null in traces from before it was added.",
    )
    outcome: str | None = Field(
        None,
        description="What the fixed run computes, measured on it (and on the other fixes' runs, to compare): "
        "each iteration's .grad, the final .grad. Null when the fix does not change what is computed.",
    )


class Diagnosis(_Model):
    """A known autograd mistake found in the run, with fixes that were verified by running them."""

    # the kinds are the rules' (gradstep.diagnose.registry.KINDS), listed in docs/trace-format.md
    kind: str = Field(
        description="What went wrong, e.g. backward_through_freed_graph: one of the kinds listed in "
        "docs/trace-format.md. A reader shows a kind it does not know by its message."
    )
    severity: Severity = Field(
        description="error: the run failed because of it; warning: it ran, but likely not as meant."
    )
    line: int | None = Field(None, description="Snippet line the diagnosis points at.")
    message: str = Field(description="Why it happened, in plain language, with the facts the run showed.")
    fixes: list[Fix] = Field(
        default_factory=list,
        description="Only fixes whose corrected snippet ran cleanly (and gave the "
        "intended gradients, where the intent is clear).",
    )


class SourceFile(_Model):
    """A file of the user's own code that a recording (gradstep.record()) ran."""

    path: str = Field(description="As the user knows it: relative to the working directory when under it.")
    code: str | None = Field(
        None,
        description="Its source when the recording was read (null: not readable, or over 200,000 characters).",
    )


class Trace(_Model):
    version: int = VERSION
    status: Status
    error: TraceError | None = None
    limit: str | None = Field(
        None, description="status=limit: which limit stopped the run (memory, cpu, wall, output)."
    )
    stdout: str = ""
    code: str = Field(
        "",
        description="The snippet's source, so a trace replays on its own. A recording of the user's own code: "
        "the source of files[0], the file it was entered from.",
    )
    files: list[SourceFile] = Field(
        default_factory=list,
        description="Recordings of the user's own code (gradstep.record()): the files whose lines the steps, "
        "nodes, errors and warnings name (their `file`). Empty for a snippet.",
    )
    torch: str = Field("", description="torch version that produced the trace.")
    nodes: NodeTable = Field(default_factory=lambda: NodeTable(op=[], step=[]))  # type: ignore[valid-type]
    steps: list[Step] = Field(default_factory=list)
    warnings: list[Warning_] = Field(default_factory=list)
    truncated: list[str] = Field(
        default_factory=list, description="Caps that were hit: nodes, steps, stdout."
    )
    notes: list[str] = Field(
        default_factory=list, description="Things the viewer should say, e.g. that tracing stopped early."
    )
    diagnoses: list[Diagnosis] = Field(
        default_factory=list, description="Known autograd mistakes the run shows, each with verified fixes."
    )
    reaches: list[Reach] = Field(
        default_factory=list,
        description="Written by the server from the code: where it reaches beyond PyTorch's public API and plain "
        "Python (at most 8). Not empty: the run could write what it pleased into this trace, so a viewer shows it "
        "as reported by the code, and no fixes are checked or offered.",
    )


def json_schema() -> dict[str, Any]:
    schema = Trace.model_json_schema()
    schema["title"] = f"gradstep trace v{VERSION}"
    return schema
