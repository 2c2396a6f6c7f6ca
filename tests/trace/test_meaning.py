"""The server holds a child's facts to what the tracer writes (gradstep.meaning): what it writes for
real code passes untouched, a fact of another form costs that fact only."""

from __future__ import annotations

import orjson
import torch
from gradstep.columns import pack
from gradstep.meaning import REFUSED, check_meaning
from gradstep.tracer import Limits, record


def wire(code: str) -> dict:
    """``code``'s trace as a sandboxed child writes it (columns, parsed back)."""
    return orjson.loads(orjson.dumps(pack(record(code, Limits.sandboxed())), default=repr))


def names(trace: dict) -> set[str]:
    return {n for step in trace["steps"] for n in (step.get("tensors") or {}).get("name", [])}


def test_a_variable_named_in_any_script_is_kept():
    trace = wire("import torch\nλ = torch.ones(2, requires_grad=True)\n(λ * 2).sum().backward()\n")
    before = orjson.dumps(trace)
    assert check_meaning(trace) == 0 and orjson.dumps(trace) == before
    assert "λ" in names(trace)


def test_a_dict_item_under_a_key_with_spaces_gets_no_name_of_its_own_so_nothing_is_refused():
    code = (
        "import torch\nparams = {'my weight': torch.ones(2, requires_grad=True), 'b': torch.zeros(2, requires_grad=True)}\n"
        "(params['my weight'] * 2 + params['b']).sum().backward()\n"
    )
    trace = wire(code)
    assert check_meaning(trace) == 0
    assert "params['b']" in names(trace) and not any(" " in n.split(" (")[0] for n in names(trace))
    # the leaf is still on the page, with plain torch's gradient (a label of its own)
    w = torch.ones(2, requires_grad=True)
    (w * 2).sum().backward()
    last = trace["steps"][-1]["tensors"]
    grads = [g["values"] for n, g in zip(last["name"], last["grad"], strict=True) if g and "params['b']" != n]
    assert w.grad.tolist() in grads


def test_facts_of_another_form_cost_those_facts_and_nothing_else():
    trace = wire("import torch\nx = torch.ones(3, requires_grad=True)\ny = (x * 2).sum()\ny.backward()\n")
    nodes = trace["nodes"]
    nodes["op"][0] = "Visit http://evil.example"
    nodes["next"][0] = [*nodes["next"][0], 99]
    trace["truncated"] = ["a cap you should pay for"]
    last = trace["steps"][-1]["tensors"]
    last["name"][0] = "x  now verified"
    assert check_meaning(trace) == 4
    assert nodes["op"][0] == REFUSED and 99 not in nodes["next"][0] and trace["truncated"] == []
    assert last["name"][0] == REFUSED
    assert (
        nodes["op"][1:]
        == wire("import torch\nx = torch.ones(3, requires_grad=True)\ny = (x * 2).sum()\ny.backward()\n")[
            "nodes"
        ]["op"][1:]
    )
