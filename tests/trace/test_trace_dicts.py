"""The TypedDicts that tracer, narrate and diagnose share describe the schema's models exactly,
and a recorded trace's dicts have every required key (what readers index) and no other."""

from __future__ import annotations

import typing

import pytest
from gradstep import schema, trace_dicts
from gradstep.tracer import record

PAIRS = {
    trace_dicts.TraceErrorDict: schema.TraceError,
    trace_dicts.SavedDict: schema.SavedValue,
    trace_dicts.NodeDict: schema.NodeInfo,
    trace_dicts.NodeStateDict: schema.NodeState,
    trace_dicts.GradDict: schema.Grad,
    trace_dicts.TensorDict: schema.TensorState,
    trace_dicts.WarningDict: schema.Warning_,
    trace_dicts.LinkDict: schema.Link,
    trace_dicts.StepDict: schema.Step,
    trace_dicts.FixDict: schema.Fix,
    trace_dicts.DiagnosisDict: schema.Diagnosis,
    trace_dicts.SourceFileDict: schema.SourceFile,
    trace_dicts.TraceDict: schema.Trace,
}


@pytest.mark.parametrize("typed, model", PAIRS.items(), ids=lambda x: x.__name__)
def test_each_typed_dict_has_its_models_keys_required_where_the_model_has_no_default(typed, model):
    fields = model.model_fields
    assert set(typing.get_type_hints(typed)) == set(fields)
    assert typed.__required_keys__ == {name for name, f in fields.items() if f.is_required()}


def test_every_model_of_the_trace_has_its_typed_dict():
    def models(m, seen):
        for f in m.model_fields.values():
            for arg in typing.get_args(f.annotation) or (f.annotation,):
                for inner in typing.get_args(arg) or (arg,):
                    if isinstance(inner, type) and issubclass(inner, schema.BaseModel) and inner not in seen:
                        seen.add(inner)
                        models(inner, seen)
        return seen

    assert models(schema.Trace, {schema.Trace}) == set(PAIRS.values())


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
