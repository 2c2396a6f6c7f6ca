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
#    Added within 4: Trace.uses (the facts Trace.notes are written from: the server writes every
#    sentence of a sandboxed run's trace, gradstep.voice).
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
        description=(
            "Recordings of the user's own code (`gradstep.record()`, see "
            "[Recordings](#recordings-of-your-own-code)): index into "
            "[`Trace.files`](#sourcefile-tracefiles) of the file `line` is in. Absent in a snippet's "
            "trace, whose lines are all in `code`."
        ),
    )


class TraceError(_Model):
    """An exception raised by the snippet, with torch's own message."""

    type: str = Field(
        description=(
            "Exception class name, e.g. `RuntimeError`; when the runner stopped the snippet, the "
            "status (`timeout`, `limit`, `crashed`)."
        )
    )
    message: str = Field(description="The exception's message, torch's own words.")
    line: int | None = Field(
        None,
        description=(
            "Snippet line the error points at: for `Trace.error` the innermost snippet frame of the "
            "traceback, for `Step.error` the line of the call."
        ),
    )
    file: int | None = _in_file()
    column: int | None = Field(None, description="Column, for syntax errors.")
    traceback: str | None = Field(
        None, description="Traceback limited to the snippet's frames (`Trace.error` only)."
    )
    reported: str | None = Field(
        None,
        description=(
            "Status `crashed` only: what the run's own process wrote about why it ended without a "
            "trace, or the message of an ending the server refused (a limit the sandbox did not see) "
            "(at most 2,000 characters). The run's words, never the server's (a snippet runs in "
            "that process and can write anything there): readers show it quoted, as reported by the "
            "code, apart from `message`, which is the server's."
        ),
    )


class SavedValue(_Model):
    """One value a node saved for its backward (``node._saved_<name>``)."""

    name: str = Field(
        description=(
            "Attribute name without the `_saved_` prefix: `self`, `other`, `result`, `exponent`…; "
            "`saved_tensors` for a custom `autograd.Function`."
        )
    )
    kind: SavedKind = Field(
        description=(
            "`tensor`: one saved tensor; `tensors`: a list of them (always for a custom Function); "
            "`value`: a non-tensor (size, exponent, flag) that stays readable after backward."
        )
    )
    shape: list[int] | None = Field(None, description="Shape of the (first) tensor.")
    dtype: str | None = Field(None, description="e.g. `float32`.")
    bytes: int | None = Field(
        None,
        description=(
            "Bytes of the storage(s) the saved tensor(s) hold (whole storages: a saved view counts "
            "its base's storage)."
        ),
    )
    value: Any = Field(
        None,
        description=(
            "For `kind=value`: the value (number, bool, string, list, or the `repr` of anything else)."
        ),
    )
    of: str | None = Field(
        None,
        description=(
            "The snippet tensor this saved tensor is (same data, shape and dtype), when it is one; "
            "single tensors only."
        ),
    )
    packed: str | None = Field(
        None,
        description=(
            "Saved under `saved_tensors_hooks` (activation checkpointing, `save_on_cpu`, the "
            "snippet's own pack/unpack): what the pack hook kept — `tensor on cpu`, a tuple holding "
            "one, or `_Holder` (a checkpoint's placeholder: the forward is recomputed in backward). "
            "`shape`/`dtype`/`bytes` then describe what was packed. The tracer never unpacks it (that "
            "would run the unpack hook); freed is read from the raw handle."
        ),
    )
    unreadable: str | None = Field(
        None,
        description=(
            "Why the tracer could not read this value: a sparse tensor has no storage whose bytes it "
            "can count; a non-tensor slot of a hooked node is not read."
        ),
    )


class NodeInfo(_Model):
    """What never changes about a graph node."""

    id: int = Field(
        description=(
            "Small integer handed out on first sight, never reused: the node's position in the table, "
            "so not written."
        )
    )
    op: str = Field(description="Node type, e.g. `PowBackward0`, `AccumulateGrad`.")
    seq: int | None = Field(
        None,
        description=(
            "Autograd sequence number relative to the run's start (creation order); `null` for "
            "`AccumulateGrad`."
        ),
    )
    line: int | None = Field(
        None,
        description=(
            "Snippet line that created the node (statements inside the snippet's functions count as "
            "their own lines); for nodes a `create_graph=True` call built, the call's line. For "
            "`AccumulateGrad`: the line running when the node was first found, usually the line of "
            "the step that first shows it."
        ),
    )
    file: int | None = _in_file()
    module: str | None = Field(
        None,
        description=(
            "When created inside an `nn.Module` call: that module's path as the snippet names it "
            "(`model`, `model.0`, `model.layers.3.self_attn`), or its class name when no snippet name "
            "reaches it."
        ),
    )
    next: list[int] = Field(
        default_factory=list,
        description=(
            "Ids of the nodes this node passes gradient to: its `next_functions`, without the empty "
            "slots of inputs that need no gradient. An id appears twice when an op used a tensor "
            "twice (`c * c`)."
        ),
    )
    saved: list[SavedValue] = Field(default_factory=list, description="What the node saved for its backward.")
    tensor: str | None = Field(
        None,
        description="`AccumulateGrad` only: the leaf it accumulates into (its first name; `null` if unnamed).",
    )
    grad_graph: bool = Field(
        False, description="Built by a `create_graph=True` call: part of a gradient's own graph."
    )
    step: int = Field(description="Index of the first step that shows this node.")
    iteration: int | None = Field(
        None,
        description=(
            "The iteration, counted from 1, of the snippet's outermost loop (`Step.iteration`) "
            "running when the node was created, also inside a folded step that stands for many "
            "iterations; `null` outside loops, for `AccumulateGrad` and in recordings of the user's "
            "own code. Added within version 4."
        ),
    )
    unreadable: str | None = Field(
        None,
        description=(
            "Why the tracer could not read this node's details (an op torch cannot describe); the "
            "node stays in the graph, its edges and states are recorded as for any other."
        ),
    )
    saved_bytes: int | None = Field(
        None,
        description=(
            "Bytes of the storages its saved tensors hold, each storage counted once: `x * x` saves "
            "`x` as `self` and `other`, one storage; a saved view counts its base's storage once. The "
            "narration and the inspector read this, never a sum of `SavedValue.bytes`. Absent when it "
            "holds no readable saved tensor (added within version 4)."
        ),
    )


class NodeState(_Model):
    """A node's state at one step. Join with ``Trace.nodes`` by ``id``."""

    id: int = Field(description="Joins with `Trace.nodes[id]`.")
    freed: bool = Field(False, description="A backward released its saved tensors; reading one now raises.")
    stale: bool = Field(
        False, description="A saved tensor was modified in place after it was saved (memory still held)."
    )
    stale_saved: list[str] = Field(
        default_factory=list, description="Names (`SavedValue.name`) of the stale saved tensors."
    )
    executed: bool = Field(False, description="Ran in this step's backward/grad call.")
    failed: bool = Field(False, description="The call failed at this node: it was reached but could not run.")
    order: int | None = Field(None, description="Position in this call's engine execution order (0 = first).")
    dropped: bool = Field(
        False,
        description=(
            "No tensor the snippet names reaches it any more, so the tracer let go of it (torch frees "
            "it, unless something the name scan does not see holds it: a closure, a container nested "
            "deeper than 3 levels); shown once, then gone."
        ),
    )
    vars: list[str] = Field(
        default_factory=list,
        description=(
            "Snippet variables whose `grad_fn` this node is. For `AccumulateGrad`: the leaf's names, "
            "given only when they differ from the node's `tensor` (the leaf has aliases or was "
            "renamed); absent means the leaf is named `tensor`, or no name reaches it any more."
        ),
    )


class Grad(_Model):
    """A gradient tensor: `.grad` of a tensor, or a value `autograd.grad` returned."""

    shape: list[int]
    dtype: str
    values: Any = Field(
        None,
        description=(
            "Nested lists of the values (a bare value for shape `[]`), each a number rounded to "
            'exactly the digits torch prints (see below), or the string `"nan"`, `"inf"` or `"-inf"`; '
            "for a complex dtype each value is a pair `[re, im]`. `null`/absent when the tensor has "
            "more than 64 elements, is on the meta device, or is not a dense (strided) float16, "
            "bfloat16, float32, float64, complex64 or complex128 tensor."
        ),
    )
    format: list[PrintMode] = Field(
        default_factory=list,
        description=(
            "How torch prints `values`: one mode, or two for a complex dtype (real parts, imaginary "
            "parts). Given with `values`."
        ),
    )
    has_grad_fn: bool = Field(description="The grad itself has a `grad_fn` (`create_graph=True`).")
    norm: float | None = Field(
        description=(
            "L2 norm, for every size (of the float32 upcast for float16 and bfloat16; a real number "
            "for a complex tensor); `null` when not finite, on the meta device (no data), or not one "
            "of the dense dtypes above."
        )
    )


class TensorState(_Model):
    name: str = Field(
        description=(
            "The tensor's first name: a snippet variable, `module.param` (`model.0.weight`) or "
            "`list[i]` (see [Tensors and names](#tensors-and-names))."
        )
    )
    shape: list[int]
    dtype: str = Field(description="e.g. `float32`.")
    requires_grad: bool
    is_leaf: bool
    retains_grad: bool = Field(False, description="`retain_grad()` was called on it.")
    node: int | None = Field(
        None,
        description=(
            "Id of its `grad_fn`, or of its `AccumulateGrad` node for a leaf (`null` while no graph "
            "uses the leaf)."
        ),
    )
    grad: Grad | None = Field(None, description="Its `.grad`.")
    unnamed: bool = Field(
        False,
        description=(
            "No name of the snippet reaches it now, yet it can hold a `.grad` and is alive: a live "
            "graph's `AccumulateGrad` node or an optimizer's `param_groups` hold it (`w = w - 0.1 * "
            "w.grad` leaves the old leaf `w` in the new graph, and the next backward accumulates into "
            "it). `name` is then a label kept for this tensor for the rest of the run and unique in "
            "it: the name and line that bound it, `w (line 2)`, with the iteration when that line "
            "bound several (`w (line 7, iteration 2)`); else its earlier name with ` (earlier)`, its "
            "optimizer path (`opt.param_groups[0]['params'][1]`) or `leaf (line N)`. Added within "
            "version 4."
        ),
    )
    was: str | None = Field(
        None,
        description=(
            "For an `unnamed` tensor: the name it had before, when it had one (added within version 4)."
        ),
    )


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

    category: str = Field(description="Warning class name, e.g. `UserWarning`.")
    message: str = Field(
        description=(
            "The warning's text. A stack it quotes (anomaly mode's \"Traceback of forward call that "
            "caused the error\") lists the user's frames only, written as "
            "[`TraceError.traceback`](#traceerror) writes them."
        )
    )
    line: int | None = Field(
        None,
        description=(
            "The warning's own line when it points into the snippet, else the snippet line running "
            "when it was raised."
        ),
    )
    file: int | None = _in_file()


# What a note speaks of (gradstep.note_text writes one sentence per kind; its WRITERS are these)
UseKind = Literal[
    "no_gpu", "ipython", "transformed", "forward_ad", "compiled", "cuda_on_cpu", "cuda_leaf_copy",
    "cuda_memory_counter", "gpu_only", "missing_module", "missing_file", "network", "keyboard", "arguments",
    "processes", "workers", "standin", "tracer_failed",
]  # fmt: skip


class Use(_Model):
    """A fact a note is written from (``Trace.notes``): what the code used that a run drew or ran otherwise."""

    kind: UseKind = Field(
        description=(
            "What it is: `cuda_on_cpu` (CUDA code ran on the CPU), `cuda_leaf_copy`, `cuda_memory_counter`, "
            "`gpu_only` (a call only a GPU can make), `no_gpu`, `ipython` (IPython's own lines skipped), "
            "`transformed` (a `torch.func` transform), `forward_ad`, `compiled` (`torch.compile` with "
            "`aot_eager`), `missing_module`, `missing_file`, `network`, `keyboard` (`input()`), "
            "`arguments` (argparse), `processes`, `workers` (a `DataLoader`'s worker processes), "
            "`standin` (`tqdm`/`matplotlib` stand-ins), `tracer_failed` (a failure of the tracer's own)."
        )
    )
    lines: list[int] = Field(
        default_factory=list, description="The lines it happened at, as steps count them."
    )
    name: str | None = Field(
        None,
        description=(
            "What it names: a module, a file, a function (`cuda_memory_counter`, `gpu_only`), a package "
            "(`standin`), the tracer's part that failed (`tracer_failed`)."
        ),
    )
    step: int | None = Field(None, description="`tracer_failed`: the step (1-based) it failed at.")
    detail: str | None = Field(
        None, description="`tracer_failed`: the exception, as Python words it (a quote, never the server's)."
    )


class Reach(_Model):
    """A place where the snippet's code reaches beyond PyTorch's public API and plain Python (gradstep.reach)."""

    line: int = Field(description="Snippet line (1-based).")
    what: str = Field(
        description=(
            "What the code uses there, e.g. `os.write`, `getattr`, `import ctypes`, `.__subclasses__`."
        )
    )


class Link(_Model):
    """A span of ``Step.explanation`` that talks about a node or a tensor (for linking/highlighting)."""

    start: int = Field(
        description=(
            "Offset of the span's first character in `explanation` (0-based, in Unicode code points, "
            "as JavaScript strings index the BMP)."
        )
    )
    end: int = Field(description="Offset just past the span.")
    node: int | None = Field(None, description="The `NodeInfo.id` the span talks about.")
    tensor: str | None = Field(None, description="The `TensorState.name` the span talks about.")


UpdateOp = Literal["zero_grad", "step", "clip_grad_norm", "clip_grad_value", "lr_step"]
GradChange = Literal["set_to_none", "zeroed", "clipped"]


class ParamUpdate(_Model):
    """What an update call did to one parameter."""

    name: str = Field(
        description=(
            "The parameter as the step's `tensors` name it (`model.weight`); `?` when no name reaches it."
        )
    )
    grad: GradChange | None = Field(
        None,
        description=(
            "What the call did to its `.grad`; `null`: left it as it was (also a `zero_grad` of a "
            "parameter that had no `.grad`)."
        ),
    )
    updated: bool = Field(False, description="`step`: its values changed.")
    delta_norm: float | None = Field(
        None,
        description=(
            "`step`: the L2 norm of the change of its values, ‖after − before‖, computed in its dtype "
            "(9 significant digits)."
        ),
    )
    grad_norm_before: float | None = Field(
        None, description="Clipping: the L2 norm of its `.grad` before the call."
    )
    grad_norm_after: float | None = Field(
        None, description="Clipping: the L2 norm of its `.grad` after the call."
    )


class Update(_Model):
    """An optimizer call: what it did to .grad, to the parameters and to the learning rate."""

    op: UpdateOp = Field(
        description=(
            "`zero_grad`: an optimizer's or a module's `zero_grad()`. `step`: an optimizer's "
            "`step()`. `clip_grad_norm` / `clip_grad_value`: `torch.nn.utils.clip_grad_norm_` / "
            "`clip_grad_value_`. `lr_step`: a learning-rate scheduler's `step()`."
        )
    )
    of_class: str | None = Field(
        None,
        description=(
            "Class of the object called: the optimizer (`SGD`, `Adam`), the module, or the scheduler "
            "(`StepLR`)."
        ),
    )
    params: list[ParamUpdate] = Field(
        default_factory=list, description="The parameters the call covers, in its order (none for `lr_step`)."
    )
    set_to_none: bool | None = Field(None, description="`zero_grad`: its `set_to_none` argument.")
    max_norm: float | None = Field(None, description="`clip_grad_norm`: its `max_norm`.")
    norm_type: float | None = Field(None, description="`clip_grad_norm`: its `norm_type`.")
    total_norm_before: float | None = Field(
        None,
        description=(
            "`clip_grad_norm`: the total norm of the gradients before clipping (what the call returned)."
        ),
    )
    total_norm_after: float | None = Field(
        None, description="`clip_grad_norm`: their total norm after clipping."
    )
    clip_value: float | None = Field(None, description="`clip_grad_value`: its `clip_value`.")
    lr_before: list[float | None] | None = Field(
        None, description="`step`, `lr_step`: the learning rate of each param group before the call."
    )
    lr_after: list[float | None] | None = Field(
        None, description="`step`, `lr_step`: the learning rate of each param group after the call."
    )


class Step(_Model):
    index: int = Field(description="Position in `steps`.")
    kind: StepKind = Field(
        description=(
            "`forward`: a line built nodes. `backward`: `Tensor.backward` or "
            "`torch.autograd.backward`. `grad`: `torch.autograd.grad`. `update`: an optimizer call "
            "(see [Update steps](#update-steps); added within version 4: an older reader shows it as "
            "a call it does not know). `error`: the code raised outside a backward/grad call (a "
            "`TypeError`, a shape mismatch, a `NameError`…), which ended the run: the last step, at "
            "the line that raised, with the graph and the tensors as the raising frame and its "
            "callers named them. A failed call that ends the run is not repeated as an `error` step "
            "(its step has the `error`); a forward step the failing line left that shows nothing new "
            "gives way to it (its output and warnings are the `error` step's). There is none once the "
            "step cap was reached, nor in a run that raised before it had any step, node or tensor to "
            "show."
        )
    )
    line: int | None = Field(
        None, description="Snippet line of the step: the line that built the nodes, or the line of the call."
    )
    file: int | None = _in_file()
    repeat: int = Field(
        1,
        description="Forward steps: how many line executions are folded into this step (see [Loops](#loops)).",
    )
    iteration: int | None = Field(
        None,
        description=(
            "The iteration, counted from 1, of the snippet's outermost loop running when the step was "
            "taken (a `for` or `while` not inside another; loops inside generators, and loops run "
            "inside an `nn.Module` call, such as a model's loop over its layers, are not counted); "
            "`null` outside loops and in recordings of the user's own code. Added within version 4."
        ),
    )
    update: Update | None = Field(
        None,
        description=(
            "`update` steps: what the optimizer call did (see [Update](#update-stepupdate)). Past "
            "`Limits.line_repeats` executions of its line such a call gets a step once per backward "
            "call (a training loop's zero_grad and step show in every iteration); the others (a "
            "line of optimizer calls with no backward between them) get none, their effect showing "
            "in the next step's tensors. Added within version 4."
        ),
    )
    api: Api | None = Field(None, description="Call steps: the function that made the call.")
    retain_graph: bool | None = Field(
        None,
        description=(
            "Call steps: the **effective** value. When the call does not pass `retain_graph`, it "
            "takes `create_graph`'s value, as in torch."
        ),
    )
    create_graph: bool | None = Field(
        None, description="Call steps: `create_graph` as passed (`false` when not)."
    )
    inputs: list[str] | None = Field(
        None, description="Names of the call's `inputs` tensors, when given (`?` for an unnamed one)."
    )
    gradient: bool | None = Field(
        None,
        description=(
            "Call steps: `gradient=` / `grad_tensors=` (backward) or `grad_outputs=` (grad) was given."
        ),
    )
    error: TraceError | None = Field(
        None,
        description=(
            "The call raised (`type`, `message`, `line`). The step is recorded either way; the error "
            "also ends the run unless the snippet catches it. For `kind` `error`: the exception that "
            "ended the run (`Trace.error` without its traceback)."
        ),
    )
    ran_lines: list[int] = Field(
        default_factory=list,
        description=(
            "Calls: snippet lines the engine ran while the call ran (the snippet's hooks, a custom "
            "Function's backward, a checkpointed function recomputing its forward)."
        ),
    )
    ran_files: list[int] = Field(
        default_factory=list,
        description=(
            "Recordings of the user's own code (`gradstep.record()`, see "
            "[Recordings](#recordings-of-your-own-code)): for each of `ran_lines`, the index into "
            "`Trace.files` of its file."
        ),
    )
    rebuilt: int = Field(
        0,
        description=(
            "Calls without `create_graph`: autograd nodes built while the call ran — a checkpoint "
            "recomputing the forward whose saved tensors it did not keep (those nodes are not drawn)."
        ),
    )
    returned: list[Grad | None] | None = Field(
        None,
        description=(
            "`grad` steps that succeeded: the gradients `autograd.grad` returned, in order (`null` "
            "for an unused input with `allow_unused=True`)."
        ),
    )
    nonfinite: list[int] = Field(
        default_factory=list,
        description=(
            "Calls: ids of the nodes whose output gradient held a nan or an inf while the gradient "
            "they received was finite — where a non-finite gradient first appeared — in the order "
            "they ran. Checked when the call hooked every node (graphs up to 256 nodes, anomaly mode, "
            "or where a node may raise); empty otherwise."
        ),
    )
    nodes: NodeStateTable = Field(  # type: ignore[valid-type]
        default_factory=lambda: NodeStateTable(id=[]),
        description=(
            "Every node alive at this step, by increasing id, then the nodes dropped at this step "
            "([as columns](#tables-as-columns)). The step's graph is the `next` of these nodes in "
            "`Trace.nodes` (see [Edges](#edges)); gradient flowed along the edges between nodes with "
            "`executed` (or `failed`) set, in `order`."
        ),
    )
    tensors: TensorTable = Field(  # type: ignore[valid-type]
        default_factory=lambda: TensorTable(name=[], shape=[], dtype=[], requires_grad=[], is_leaf=[]),
        description=(
            "The snippet's named tensors that can hold a `.grad` (see [Tensors and "
            "names](#tensors-and-names))."
        ),
    )
    saved_bytes: int = Field(
        0, description="Bytes held by the saved tensors of alive, not freed nodes, each storage counted once."
    )
    stdout: str = Field(
        "", description="What the snippet printed since the previous step (so before this step's call)."
    )
    warnings: list[Warning_] = Field(
        default_factory=list, description="Warnings raised since the previous step."
    )
    explanation: str = Field(
        "",
        description=(
            "Plain-language narration of what the step changed, derived from the trace alone (see "
            "[Narration](#narration)); written by the server for a sandboxed run, never taken from it."
        ),
    )
    links: list[Link] = Field(
        default_factory=list, description="Spans of `explanation` that name a node or a tensor."
    )


class Fix(_Model):
    """A corrected snippet that was run and checked before it was offered."""

    title: str = Field(
        description="What to change, in a few words, e.g. `Keep the graph with retain_graph=True`."
    )
    explanation: str = Field(description="What the change does, what it means and what it costs.")
    code: str = Field(
        description="The whole corrected snippet (only the lines the fix changes differ from `code`)."
    )
    source_lines: list[int | None] | None = Field(
        None,
        description=(
            "For each line of the fix's `code`, the line of the run's `code` it comes from (1-based); "
            "`null` where the fix added the line. A line rewritten into as many lines comes from the "
            "line it replaces; one rewritten into more or fewer lines counts as removed and added. "
            "Lines compare with their ends' whitespace ignored. This is the one line map between a "
            "snippet and its fix: the server computes it (it also finds the fixed line of a diagnosis "
            "with it), and the page's side-by-side view and change marks read it. `null` in traces "
            "from before it was added."
        ),
    )
    outcome: str | None = Field(
        None,
        description=(
            "What the fixed run computes, measured on its trace and set beside the other fixes' runs "
            "(or the run as written, when it ran): each iteration's `.grad` (its norm) after the "
            "loop's backward, and the final `.grad`. Given where fixes compute different things (a "
            "loop trained on a graph built before it, against the same loop with "
            "`retain_graph=True`); `null` otherwise. The check job computes it, in the sandbox, from "
            "the fix runs the server made."
        ),
    )


class Diagnosis(_Model):
    """A known autograd mistake found in the run, with fixes that were verified by running them."""

    # the kinds are the rules' (gradstep.diagnose.registry.KINDS), listed in docs/trace-format.md
    kind: str = Field(
        description=(
            "One of the rules' kinds, listed below the table (`gradstep.diagnose.registry.KINDS`; "
            "`make schema` writes the list from it). A reader shows an unknown kind by its `message`."
        )
    )
    severity: Severity = Field(
        description=(
            "`error`: the run failed because of it. `warning`: it ran, but not as the code likely meant."
        )
    )
    line: int | None = Field(
        None,
        description=(
            "Snippet line it points at (the failing call, the in-place line, the backward in the loop…)."
        ),
    )
    message: str = Field(description="Why, in plain language, with the facts of this run.")
    fixes: list[Fix] = Field(
        default_factory=list,
        description=(
            "Corrected snippets, each verified by running it: it ran cleanly and, where the intent is "
            "clear, gave the intended gradients."
        ),
    )


class SourceFile(_Model):
    """A file of the user's own code that a recording (gradstep.record()) ran."""

    path: str = Field(
        description=(
            "The file as the user knows it: relative to the working directory when under it, else "
            "absolute; a notebook cell's file as Python names it."
        )
    )
    code: str | None = Field(
        None,
        description=(
            "Its source when the recording was read (`null` when Python cannot read it, or over "
            "200,000 characters)."
        ),
    )


class Trace(_Model):
    version: int = Field(VERSION, description="Format version (see above).")
    status: Status = Field(description="How the run ended (see [Status](#status)).")
    error: TraceError | None = Field(
        None, description="The exception that ended the run, for `status` other than `ok`."
    )
    limit: str | None = Field(
        None, description="`status=limit`: which limit stopped the run (`memory`, `cpu`, `wall`, `output`)."
    )
    stdout: str = Field(
        "", description="Everything the snippet printed (stdout and stderr together), up to the cap."
    )
    code: str = Field(
        "",
        description=(
            "The snippet's source, so a trace replays on its own. A recording of the user's own code: "
            "the source of `files[0]`."
        ),
    )
    files: list[SourceFile] = Field(
        default_factory=list,
        description=(
            "Recordings of the user's own code (`gradstep.record()`, see "
            "[Recordings](#recordings-of-your-own-code)): the files whose lines steps, nodes, errors "
            "and warnings name (their `file`); `code` is `files[0].code`, the file the recording was "
            "entered from. Empty for a snippet."
        ),
    )
    torch: str = Field("", description="torch version that produced the trace, e.g. `2.13.0+cpu`.")
    nodes: NodeTable = Field(
        default_factory=lambda: NodeTable(op=[], step=[]),
        description="The node table ([as columns](#tables-as-columns)); node `i` is entry `i` of each column.",
    )  # type: ignore[valid-type]
    steps: list[Step] = Field(default_factory=list, description="The steps, `steps[i].index == i`.")
    warnings: list[Warning_] = Field(
        default_factory=list, description="All warnings the snippet raised (first 200)."
    )
    truncated: list[str] = Field(
        default_factory=list,
        description="Caps that were hit: `nodes`, `steps`, `stdout` (see [Caps](#caps)).",
    )
    uses: list[Use] = Field(
        default_factory=list,
        description=(
            "The facts the notes are written from: what the code used that the run drew or ran "
            "otherwise (added within version 4)."
        ),
    )
    notes: list[str] = Field(
        default_factory=list,
        description=(
            "Sentences a viewer should show as they are, written from `uses` (by the server for a "
            "sandboxed run, never taken from the run) and by the server about the run itself (facts it "
            "refused, fixes not checked): what the run did differently from the code "
            "or could not draw (IPython's own lines skipped, a `torch.func` transform, forward-mode "
            "AD, `torch.compile` run with `aot_eager`), and, in the sandbox, CUDA code run on the CPU "
            "(`Ran on the CPU: this server has no GPU. Line(s) … asked for CUDA …`; the tensors "
            "themselves are CPU tensors), a call that needs a GPU, and what a snippet reached for "
            "that a run here lacks (a library, a file, the network, a keyboard; `tqdm`/`matplotlib` "
            "stand-ins; a `DataLoader`'s worker processes, loaded in the run's own process); and a "
            "failure of the tracer's own (`gradstep could not record everything at step N …`)."
        ),
    )
    diagnoses: list[Diagnosis] = Field(
        default_factory=list,
        description=(
            "Known autograd mistakes the run shows, each with fixes that were run and checked (see "
            "[Diagnoses](#diagnoses)). Empty when nothing is wrong."
        ),
    )
    reaches: list[Reach] = Field(
        default_factory=list,
        description=(
            "Written by the server from the code it was given, never by the run "
            "(`gradstep/reach.py`): where the code leaves the subset the server vouches for, an "
            "allow-list — an import outside a fixed list, a private, dunder, frame or code attribute "
            "named anywhere, a call that finds attributes or code from strings or unpickles, a string "
            "annotation, a class that runs inside the tracer's calls, a write to what the tracer reads "
            "through (at most 8, by line). Such code can write what facts it pleases into its own trace "
            "(see [Who says what](#who-says-what)): a viewer shows the run as reported by the code, and "
            "the server checks and offers no fixes for it."
        ),
    )


def json_schema() -> dict[str, Any]:
    schema = Trace.model_json_schema()
    schema["title"] = f"gradstep trace v{VERSION}"
    return schema
