"""Narration: every step's ``explanation`` states the trace's own facts.

The assertions read the facts from the trace (node counts, op names, freed
flags, saved bytes) or from plain PyTorch run on the same snippet (gradient
values, the error's line), never from frozen sentences.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gradstep.narrate import fmt_grad, narrate
from gradstep.pipeline import explained
from gradstep.printing import fmt_bytes
from gradstep.trace_dicts import typed
from gradstep.tracer import Limits
from gradstep.tracer.grads import GradRecords
from testkit.torch_print import printed_number, torch_elements
from testkit.truth import run_plain

ROOT = Path(__file__).resolve().parents[2]
SNIPPETS = sorted((ROOT / "snippets").glob("*.py"))


def _trace(code: str) -> dict:
    return explained(code)


def _calls(trace: dict) -> list[dict]:
    return [s for s in trace["steps"] if s["kind"] != "forward"]


def _label(trace: dict, nid: int, step: dict | None = None) -> str:
    """A node's label; an AccumulateGrad's names its leaf as ``step`` lists it (a rebound name's
    old leaf under its label, its state's ``vars``), else by the node's ``tensor``."""
    info = trace["nodes"][nid]
    state = next((s for s in (step or {}).get("nodes") or () if s["id"] == nid), {})
    tensor = (state.get("vars") or [None])[0] or info.get("tensor")
    return f"AccumulateGrad ({tensor})" if info["op"] == "AccumulateGrad" and tensor else info["op"]


@pytest.fixture(scope="module")
def snippet_traces() -> dict[str, dict]:
    return {p.stem: _trace(p.read_text()) for p in SNIPPETS}


def test_every_step_of_every_snippet_is_narrated(snippet_traces):
    for name, trace in snippet_traces.items():
        for step in trace["steps"]:
            assert step["explanation"].strip(), f"{name} step {step['index']} has no explanation"


def test_narrated_traces_fit_the_schema(snippet_traces):
    for trace in snippet_traces.values():
        typed(trace)


def test_node_links_cover_the_label_of_their_node(snippet_traces):
    for trace in snippet_traces.values():
        for step in trace["steps"]:
            for link in step["links"]:
                if link["node"] is not None:
                    span = step["explanation"][link["start"] : link["end"]]
                    assert span == _label(trace, link["node"], step)


def test_tensor_links_name_a_tensor_the_step_lists(snippet_traces):
    for trace in snippet_traces.values():
        for step in trace["steps"]:
            names = {t["name"] for t in step["tensors"]}
            for link in step["links"]:
                if link["tensor"] is not None:
                    assert link["tensor"] in names


def test_grad_values_link_to_their_tensor():
    code = (ROOT / "snippets" / "retain_graph_accumulates.py").read_text()
    plain = run_plain(code)
    step = _calls(_trace(code))[1]
    spans = {
        step["explanation"][link["start"] : link["end"]] for link in step["links"] if link["tensor"] == "x"
    }
    for call in plain.calls:
        assert printed_number(call.grads[frozenset({"x"})]) in spans


def test_forward_step_names_each_node_its_line_built():
    code = "import torch\nx = torch.ones(3, requires_grad=True)\ny = (x.sin() * 2).sum()\n"
    trace = _trace(code)
    step = trace["steps"][0]
    new = [n for n in trace["nodes"] if n["step"] == step["index"]]
    assert f"built {len(new)} nodes" in step["explanation"]
    linked = {link["node"] for link in step["links"] if link["node"] is not None}
    assert linked == {n["id"] for n in new}


def test_forward_step_of_a_large_graph_counts_ops_instead_of_listing_them():
    code = "import torch\nx = torch.ones(3, requires_grad=True)\ny = x\nfor _ in range(1):\n    y = " + (
        " + ".join(["x.sin()"] * 10) + "\n"
    )
    trace = _trace(code)
    step = trace["steps"][0]
    sins = sum(1 for n in trace["nodes"] if n["op"] == "SinBackward0")
    assert f"{sins} × SinBackward0" in step["explanation"]


def test_call_counts_the_nodes_that_ran_and_links_them_in_engine_order():
    trace = _trace((ROOT / "snippets" / "retain_graph_accumulates.py").read_text())
    for step in _calls(trace):
        ran = sorted((s["order"], s["id"]) for s in step["nodes"] if s.get("executed"))
        text = step["explanation"]
        assert f"It ran {len(ran)} nodes" in text
        order_at = text.index("It ran")  # after what changed in .grad and what was freed
        linked = [
            link["node"] for link in step["links"] if link["node"] is not None and link["start"] > order_at
        ]
        assert linked[: len(ran)] == [nid for _, nid in ran]
        assert text.index(".grad") < order_at


def test_call_states_its_effective_retain_graph():
    trace = _trace((ROOT / "snippets" / "retain_graph_accumulates.py").read_text())
    for step in _calls(trace):
        assert f"retain_graph={step['retain_graph']}" in step["explanation"]


def test_accumulation_gives_old_and_new_grad_as_plain_torch_computes_them():
    code = (ROOT / "snippets" / "retain_graph_accumulates.py").read_text()
    plain = run_plain(code)
    first, second = (c.grads[frozenset({"x"})] for c in plain.calls)
    step = _calls(_trace(code))[1]
    assert f"x.grad went from {printed_number(first)} to {printed_number(second)}" in step["explanation"]
    assert "accumulates" in step["explanation"]


def test_first_grad_is_said_to_be_written_with_its_plain_torch_value():
    code = (ROOT / "snippets" / "backward_twice_fails.py").read_text()
    plain = run_plain(code)
    value = plain.calls[0].grads[frozenset({"x"})]
    said = f"x.grad was None; the call wrote {printed_number(value)} into it."
    assert said in _calls(_trace(code))[0]["explanation"]


def test_release_names_the_nodes_freed_by_the_call_and_the_bytes_before_and_after():
    trace = _trace((ROOT / "snippets" / "shared_trunk_partial_grads.py").read_text())
    steps = trace["steps"]
    call = _calls(trace)[0]
    before = {s["id"]: s for s in steps[call["index"] - 1]["nodes"]}
    freed_now = {
        s["id"] for s in call["nodes"] if s.get("freed") and not before.get(s["id"], {}).get("freed")
    }
    text = call["explanation"]
    released = text[text.index("released") :]
    for nid in freed_now:
        assert trace["nodes"][nid]["op"] in released
    held = f"{fmt_bytes(steps[call['index'] - 1]['saved_bytes'])} → {fmt_bytes(call['saved_bytes'])}"
    assert held in text


def test_a_call_that_frees_nothing_because_its_nodes_saved_nothing_says_so():
    trace = _trace("import torch\nx = torch.ones(3, requires_grad=True)\ny = (x + 1).sum()\ny.backward()\n")
    call = _calls(trace)[0]
    ran = [n for n in trace["nodes"] if n["op"] in ("SumBackward0", "AddBackward0")]
    assert ran and not any(s["kind"] in ("tensor", "tensors") for n in ran for s in n.get("saved") or ())
    assert "SumBackward0 and AddBackward0 saved no tensors" in call["explanation"]
    assert "released" not in call["explanation"]
    # beside a release, the nodes that saved nothing are not listed: the release is the news
    trace = _trace("import torch\nx = torch.ones(3, requires_grad=True)\ny = (x * x).sum()\ny.backward()\n")
    call = _calls(trace)[0]
    assert "released the saved tensors of MulBackward0" in call["explanation"]
    assert "saved no tensors" not in call["explanation"]


def test_retained_call_says_the_saved_tensors_were_kept():
    trace = _trace((ROOT / "snippets" / "retain_graph_accumulates.py").read_text())
    first = _calls(trace)[0]
    assert first["retain_graph"] is True
    assert "kept the saved tensors" in first["explanation"]
    assert "released" not in first["explanation"]


def test_failed_second_backward_names_the_freed_node_and_the_line_that_freed_it():
    code = (ROOT / "snippets" / "backward_twice_fails.py").read_text()
    plain = run_plain(code)
    trace = _trace(code)
    failing = _calls(trace)[1]
    failed = next(s["id"] for s in failing["nodes"] if s.get("failed"))
    assert failing["error"]["line"] == plain.calls[1].line
    text = failing["explanation"]
    assert f"It failed at {trace['nodes'][failed]['op']}" in text
    assert f"freed by the backward call at line {plain.calls[0].line}" in text


def test_a_call_that_failed_for_another_reason_is_not_said_to_have_met_freed_tensors():
    # Anomaly mode stops backward at a NaN; the failing call itself releases the buffers, which
    # is not why it failed: the narration gives plain torch's reason, not "already freed".
    code = (ROOT / "tests" / "cases" / "anomaly_nan_fails.py").read_text()
    plain = run_plain(code)
    (failing,) = _calls(_trace(code))
    text = failing["explanation"]
    assert plain.error is not None and plain.error["message"].split(". ")[0] in text
    assert "freed" not in text.split("It failed at ")[1].split(".")[0]


def test_failed_call_after_an_in_place_change_names_the_in_place_line():
    code = (ROOT / "snippets" / "inplace_modified_saved_tensor_fails.py").read_text()
    trace = _trace(code)
    inplace_line = next(i for i, line in enumerate(code.splitlines(), 1) if line.startswith("y.mul_(2)"))
    failing = _calls(trace)[0]
    assert f"modified in place at line {inplace_line}" in failing["explanation"]
    stale_step = next(s for s in trace["steps"] if s["line"] == inplace_line)
    assert "stale" in stale_step["explanation"]


def test_non_scalar_backward_says_no_node_ran():
    code = (ROOT / "snippets" / "non_scalar_backward_fails.py").read_text()
    plain = run_plain(code)
    step = _calls(_trace(code))[0]
    assert plain.calls[0].order == []
    assert "no node ran" in step["explanation"]


def test_autograd_grad_reports_what_it_returned_as_plain_torch_does():
    code = "import torch\nx = torch.tensor(3.0, requires_grad=True)\n(g,) = torch.autograd.grad(x**2, x)\n"
    plain = run_plain(code)
    step = _calls(_trace(code))[0]
    assert f"returned {printed_number(plain.calls[0].returned[0])} for x" in step["explanation"]


def test_grad_formatting_shows_values_of_small_grads_as_torch_prints_them_and_the_norm_of_large_ones():
    small, large = torch.tensor([1.0, 2.5]), torch.ones(10) * 1.5
    records = GradRecords(Limits().max_values).records([small, large])
    assert fmt_grad(records[0]) == "[" + ", ".join(torch_elements(small)) + "]"
    assert f"norm {printed_number(large.norm())}" in fmt_grad(records[1]) and "10" in fmt_grad(records[1])


def test_narration_failure_keeps_the_trace_and_says_why():
    trace = {
        "nodes": [],
        "steps": [{"index": 0, "kind": "backward", "nodes": [{"id": 7, "order": 0, "executed": True}]}],
    }
    narrate(trace)
    assert trace["steps"][0]["explanation"] == ""
    assert trace["notes"] and "narration" in trace["notes"][0].lower()


def test_in_process_trace_carries_the_narration():
    import gradstep

    trace = gradstep.trace("import torch\nx = torch.ones(2, requires_grad=True)\n(x * 3).sum().backward()\n")
    assert all(step.explanation for step in trace.steps)


def test_forward_step_states_the_saved_bytes_the_trace_measured():
    trace = _trace((ROOT / "snippets" / "shared_trunk_partial_grads.py").read_text())
    steps = trace["steps"]
    for prev, step in zip(steps, steps[1:], strict=False):
        if step["kind"] == "forward" and step["saved_bytes"] != prev["saved_bytes"]:
            grown = step["saved_bytes"] - prev["saved_bytes"]
            assert f"now hold {fmt_bytes(step['saved_bytes'])} (+{fmt_bytes(grown)})" in step["explanation"]


FOLDED = "import torch\nx = torch.tensor(1.0, requires_grad=True)\ny = x\nfor i in range(6):\n    y = y * 2\n    z = y.sin()\n"


def test_folded_step_says_how_many_line_executions_it_holds():
    trace = _trace(FOLDED)
    folded = [s for s in trace["steps"] if s.get("repeat", 1) > 1]
    assert folded
    for step in folded:
        assert f"{step['repeat']} line executions folded" in step["explanation"]


def test_dropped_nodes_are_counted():
    trace = _trace(FOLDED)
    with_drops = [s for s in trace["steps"] if any(st.get("dropped") for st in s["nodes"])]
    assert with_drops
    for step in with_drops:
        count = sum(1 for st in step["nodes"] if st.get("dropped"))
        assert (
            f"{count} node{'s' if count > 1 else ''} that no variable reaches any more" in step["explanation"]
        )


DEEP_MLP = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(*[m for _ in range(12) for m in (nn.Linear(32, 32), nn.ReLU())], nn.Linear(32, 1))
loss = model(torch.randn(16, 32)).pow(2).mean()
loss.backward()
"""


def test_a_real_models_backward_is_summarised_by_module_with_the_largest_grads_torch_computes():
    trace = _trace(DEEP_MLP)
    (call,) = _calls(trace)
    text = call["explanation"]
    scope: dict = {}
    exec(compile(DEEP_MLP, "<plain>", "exec"), scope)
    norms = {f"model.{name}": p.grad.norm().item() for name, p in scope["model"].named_parameters()}
    largest = max(norms, key=norms.get)
    assert len(text) <= 800  # read in the narration's box, not scrolled through
    assert f"wrote the .grad of {len(norms)} tensors in {len(norms) // 2} modules" in text
    assert f"Largest .grad norms: {largest} ‖" in text  # the tensor torch gives the largest gradient
    ran = text.split("It ran ", 1)[1]
    assert "to the leaves" in ran and " → " not in ran  # the order of its nodes counted, not listed
