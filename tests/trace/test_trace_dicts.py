"""The TypedDicts that tracer, narrate and diagnose share (rows) and the server validates (the wire's
columns) describe the schema's models exactly, and a recorded trace's dicts have every required key
(what readers index) and no other."""

from __future__ import annotations

import functools
import operator
import random
import types
import typing

import orjson
import pytest
from gradstep import schema, trace_dicts
from gradstep.columns import pack
from gradstep.tracer import record

PAIRS = {
    trace_dicts.TraceErrorDict: schema.TraceError,
    trace_dicts.SavedDict: schema.SavedValue,
    trace_dicts.NodeDict: schema.NodeInfo,
    trace_dicts.NodeStateDict: schema.NodeState,
    trace_dicts.GradDict: schema.Grad,
    trace_dicts.TensorDict: schema.TensorState,
    trace_dicts.ParamUpdateDict: schema.ParamUpdate,
    trace_dicts.UpdateDict: schema.Update,
    trace_dicts.WarningDict: schema.Warning_,
    trace_dicts.ReachDict: schema.Reach,
    trace_dicts.UseDict: schema.Use,
    trace_dicts.LinkDict: schema.Link,
    trace_dicts.FixDict: schema.Fix,
    trace_dicts.DiagnosisDict: schema.Diagnosis,
    trace_dicts.SourceFileDict: schema.SourceFile,
    # the wire's: tables as columns (a column table is a TypedDict with a length check)
    typing.get_args(trace_dicts.NodeTableDict)[0]: schema.NodeTable,
    typing.get_args(trace_dicts.NodeStateTableDict)[0]: schema.NodeStateTable,
    typing.get_args(trace_dicts.TensorTableDict)[0]: schema.TensorTable,
    trace_dicts.WireStepDict: schema.Step,
    trace_dicts.WireTraceDict: schema.Trace,
}
ROWS = (schema.NodeInfo, schema.NodeState, schema.TensorState)  # the wire has them as columns only


@pytest.mark.parametrize("typed, model", PAIRS.items(), ids=lambda x: x.__name__)
def test_each_typed_dict_has_its_models_keys_required_where_the_model_has_no_default(typed, model):
    fields = model.model_fields
    assert set(typing.get_type_hints(typed)) == set(fields)
    assert typed.__required_keys__ == {name for name, f in fields.items() if f.is_required()}


def test_every_model_of_the_trace_has_its_typed_dict():
    def inner(annotation):  # every type an annotation names, however deep
        yield annotation
        for arg in typing.get_args(annotation):
            yield from inner(arg)

    def models(m, seen):
        for f in m.model_fields.values():
            for t in inner(f.annotation):
                if isinstance(t, type) and issubclass(t, schema.BaseModel) and t not in seen:
                    seen.add(t)
                    models(t, seen)
        return seen

    assert models(schema.Trace, {schema.Trace}) == set(PAIRS.values()) - set(ROWS)


@pytest.mark.parametrize(
    "rows, wire",
    [(trace_dicts.StepDict, trace_dicts.WireStepDict), (trace_dicts.TraceDict, trace_dicts.WireTraceDict)],
    ids=["step", "trace"],
)
def test_the_row_dicts_have_the_wires_keys_and_a_steps_edges(rows, wire):
    extra = {"edges"} if rows is trace_dicts.StepDict else set()
    assert set(typing.get_type_hints(rows)) == set(typing.get_type_hints(wire)) | extra
    assert rows.__required_keys__ == wire.__required_keys__


@pytest.mark.parametrize(
    "columns, row",
    [
        (schema.NodeTable, schema.NodeInfo),
        (schema.NodeStateTable, schema.NodeState),
        (schema.TensorTable, schema.TensorState),
    ],
    ids=lambda m: m.__name__,
)
def test_each_column_table_has_a_column_per_row_field(columns, row):
    fields = row.model_fields
    assert set(columns.model_fields) == set(fields) - ({"id"} if row is schema.NodeInfo else set())
    for name, f in columns.model_fields.items():
        assert f.is_required() == fields[name].is_required(), name


CODE = """
import torch
w = torch.randn(3, requires_grad=True)
h = (w * 2).tanh()
h.retain_grad()
loss = h.pow(2).sum()
loss.backward(retain_graph=True)
g, = torch.autograd.grad(loss, w, create_graph=True)
loss.backward()
print(w.grad)
loss.backward()
"""


def _live() -> dict:
    import gradstep
    import torch

    w = torch.randn(3, requires_grad=True)
    with gradstep.record() as rec:
        loss = (w * 2).tanh().pow(2).sum()
        loss.backward(retain_graph=True)
        loss.backward()
    assert rec.data["files"] and w.grad is not None
    return rec.data


@pytest.mark.parametrize("recorded", [lambda: record(CODE), _live], ids=["snippet", "own_code"])
def test_a_recorded_traces_dicts_have_the_required_keys_and_no_others(recorded):
    trace = recorded()
    assert trace["status"] in ("ok", "error") and trace["steps"]

    def check(value, typed):
        keys = typing.get_type_hints(typed)
        assert typed.__required_keys__ <= value.keys() <= set(keys), typed.__name__
        return keys

    check(trace, trace_dicts.TraceDict)
    for f in trace.get("files", ()):
        check(f, trace_dicts.SourceFileDict)
    for node in trace["nodes"]:
        check(node, trace_dicts.NodeDict)
        for saved in node.get("saved", ()):
            check(saved, trace_dicts.SavedDict)
    for step in trace["steps"]:
        check(step, trace_dicts.StepDict)
        for state in step.get("nodes", ()):
            check(state, trace_dicts.NodeStateDict)
        for t in step.get("tensors", ()):
            check(t, trace_dicts.TensorDict)
            if t.get("grad"):
                check(t["grad"], trace_dicts.GradDict)
        for g in step.get("returned") or ():
            if g is not None:
                check(g, trace_dicts.GradDict)
        for link in step.get("links", ()):
            check(link, trace_dicts.LinkDict)
        if step.get("error"):
            check(step["error"], trace_dicts.TraceErrorDict)


def _as_typed(annotation):
    """A model field's annotation with each model replaced by its TypedDict."""
    typed = {model: typed for typed, model in PAIRS.items()}
    if annotation in typed:
        return typed[annotation]
    args = typing.get_args(annotation)
    if not args:
        return annotation
    mapped = tuple(_as_typed(a) for a in args)
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return functools.reduce(operator.or_, mapped)
    if typing.get_origin(annotation) is typing.Literal:
        return annotation
    return typing.get_origin(annotation)[mapped]


@pytest.mark.parametrize("typed, model", PAIRS.items(), ids=lambda x: x.__name__)
def test_each_typed_dict_key_has_its_model_fields_type(typed, model):
    hints = typing.get_type_hints(typed)
    for name, field in model.model_fields.items():
        assert hints[name] == _as_typed(field.annotation), f"{typed.__name__}.{name}"


def _mutations(trace: dict, rng: random.Random, count: int):
    """Copies of ``trace`` with one thing wrong (or, rarely, still right) somewhere in it."""
    spots: list[tuple[list, dict]] = []

    def walk(value, path):
        if isinstance(value, dict):
            spots.append((path, value))
            for k, v in value.items():
                walk(v, [*path, k])
        elif isinstance(value, list):
            for i, v in enumerate(value[:3]):
                walk(v, [*path, i])

    walk(trace, [])
    wrong = ["3", 3, 2.5, None, True, [], {}, [1, "a"], "nope", -1]
    for _ in range(count):
        path, _spot = rng.choice(spots)
        copy = orjson.loads(orjson.dumps(trace))
        target = copy
        for k in path:
            target = target[k]
        action = rng.choice(("drop", "extra", "retype"))
        key = rng.choice(list(target)) if target else None
        if action == "drop" and key is not None:
            del target[key]
        elif action == "extra":
            target[rng.choice(("bogus", "__class__", "Status"))] = rng.choice(wrong)
        elif key is not None:
            target[key] = rng.choice(wrong)
        yield f"{action} {'/'.join(map(str, path))}:{key}", copy


def test_the_adapter_that_validates_childrens_traces_accepts_and_refuses_exactly_what_the_models_do():
    from gradstep.schema import Trace
    from gradstep.trace_dicts import validate
    from pydantic import ValidationError

    trace = orjson.loads(orjson.dumps(pack(record(CODE))))
    trace["diagnoses"] = [
        {
            "kind": "x",
            "severity": "warning",
            "message": "m",
            "line": 2,
            "fixes": [{"title": "t", "explanation": "e", "code": "c"}],
        }
    ]
    Trace.model_validate(trace)
    validate(trace)
    refused = 0
    for what, bad in _mutations(trace, random.Random(0), 600):
        try:
            Trace.model_validate(bad)
            model_ok = True
        except ValidationError:
            model_ok = False
        try:
            validate(bad)  # as the server does: the steps a slice at a time
            typed_ok = True
        except ValidationError:
            typed_ok = False
        assert model_ok == typed_ok, what
        refused += not model_ok
    assert refused > 300  # most mutations are errors: the comparison tested refusals, not only passes


def test_a_wrong_node_or_step_past_the_first_slices_is_refused():
    """The server validates a big trace's steps a slice at a time: the last ones count, and so does
    the last entry of a node column."""
    from gradstep.trace_dicts import validate
    from pydantic import ValidationError

    code = "import torch\nx = torch.ones(2, requires_grad=True)\nfor i in range(300):\n    x = x * 1.5\nx.sum().backward()\n"
    trace = orjson.loads(orjson.dumps(pack(record(code))))
    assert len(trace["nodes"]["op"]) > 300 and len(trace["steps"]) > 2
    validate(trace)
    for wrong in (
        lambda t: t["nodes"]["op"].__setitem__(-1, 3),
        lambda t: t["steps"][-1].__setitem__("kind", "up"),
    ):
        bad = orjson.loads(orjson.dumps(trace))
        wrong(bad)
        with pytest.raises(ValidationError):
            validate(bad)
    for key in ("nodes", "steps"):
        bad = orjson.loads(orjson.dumps(trace))
        bad[key] = [trace[key]] if key == "nodes" else {"0": trace[key][0]}  # not what it should be at all
        with pytest.raises(ValidationError):
            validate(bad)


@pytest.mark.parametrize("where", ["nodes", "step nodes", "step tensors"])
def test_a_table_whose_columns_differ_in_length_is_refused_by_the_models_and_the_server(where):
    from gradstep.schema import Trace
    from gradstep.trace_dicts import validate
    from pydantic import ValidationError

    trace = orjson.loads(orjson.dumps(pack(record(CODE))))
    table = {"nodes": trace["nodes"], "step nodes": trace["steps"][-1]["nodes"]}.get(where)
    table = table if table is not None else trace["steps"][-1]["tensors"]
    column = next(name for name, values in table.items() if values and name != "op")
    table[column] = table[column][:-1]
    with pytest.raises(ValidationError, match="different lengths"):
        Trace.model_validate(trace)
    with pytest.raises(ValidationError, match="different lengths"):
        validate(trace)
