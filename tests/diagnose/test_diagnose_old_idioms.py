"""Code written for PyTorch before 0.4 (2018), as old answers and tutorials have it: each idiom gets a
diagnosis saying what it became, and every fix offered runs cleanly under plain PyTorch and does what
the same code written the modern way by hand does (run with ``truth.run_plain``, no gradstep in it).
"""

from __future__ import annotations

import textwrap

import orjson
import torch
from gradstep import jobs
from gradstep.diagnose import diagnose
from gradstep.pipeline import run_locally
from gradstep.runs import payload_for
from gradstep.schema import Diagnosis
from gradstep.tracer import record
from testkit.truth import PlainRun, run_plain


def code_of(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def only(code: str, kind: str) -> dict:
    found = diagnose(record(code), run_locally)
    for d in found:
        Diagnosis.model_validate(d)
    assert [d["kind"] for d in found] == [kind], found
    return found[0]


def fix(diagnosis: dict, title_start: str) -> str:
    for f in diagnosis["fixes"]:
        if f["title"].startswith(title_start):
            return f["code"]
    raise AssertionError(f"no fix titled {title_start!r} in {[f['title'] for f in diagnosis['fixes']]}")


def plain_ok(code: str) -> PlainRun:
    run = run_plain(code)
    assert run.error is None, run.error
    assert all(c.error is None for c in run.calls), [c.error for c in run.calls]
    return run


def same_grads(a: PlainRun, b: PlainRun) -> bool:
    ga, gb = a.calls[-1].grads, b.calls[-1].grads
    return ga.keys() == gb.keys() and all(
        (x is None and y is None) or (x is not None and y is not None and torch.allclose(x, y))
        for x, y in ((ga[k], gb[k]) for k in ga)
    )


RETAIN_VARIABLES = code_of(
    """
    import torch
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x ** 3).sum()
    y.backward(retain_variables=True)
    y.backward()
    print(x.grad)
    """
)


def test_retain_variables_fails_as_in_torch_and_becomes_retain_graph():
    original = run_plain(RETAIN_VARIABLES)
    assert original.error["type"] == "TypeError" and "retain_variables" in original.error["message"]
    d = only(RETAIN_VARIABLES, "retain_variables_renamed")
    assert d["line"] == original.error["line"] == 4 and "retain_graph" in d["message"]
    fixed = plain_ok(fix(d, "Use retain_graph="))
    modern = plain_ok(RETAIN_VARIABLES.replace("retain_variables", "retain_graph"))
    assert fixed.stdout == modern.stdout and same_grads(fixed, modern)


LOSS_DATA_0 = code_of(
    """
    import torch
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    running_loss = 0.0
    for step in range(3):
        loss = model(torch.randn(4, 3)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        running_loss += loss.data[0]
    print(running_loss)
    """
)


def test_loss_data_0_fails_as_in_torch_and_becomes_item():
    original = run_plain(LOSS_DATA_0)
    assert original.error["type"] == "IndexError"
    d = only(LOSS_DATA_0, "index_of_0_dim_tensor")
    assert d["line"] == original.error["line"] and ".item()" in d["message"]
    fixed = plain_ok(fix(d, "Use .item()"))
    modern = plain_ok(LOSS_DATA_0.replace("loss.data[0]", "loss.item()"))
    assert fixed.stdout == modern.stdout and same_grads(fixed, modern)


VOLATILE = code_of(
    """
    import torch
    from torch.autograd import Variable
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    x = Variable(torch.randn(4, 3), volatile=True)
    out = model(x)
    print(out.requires_grad)
    """
)


def test_volatile_is_a_warning_in_torch_and_becomes_no_grad():
    original = run_plain(VOLATILE)
    assert any("volatile was removed" in message for message in original.warnings)
    assert original.stdout == "True\n"  # volatile no longer stops the graph
    d = only(VOLATILE, "volatile_removed")
    assert d["severity"] == "warning" and d["line"] == 5 and "torch.no_grad()" in d["message"]
    no_grad = plain_ok(fix(d, "Run the lines after it under torch.no_grad()"))
    modern = plain_ok(
        VOLATILE.replace("Variable(torch.randn(4, 3), volatile=True)", "torch.randn(4, 3)").replace(
            "out = model(x)\nprint(out.requires_grad)",
            "with torch.no_grad():\n    out = model(x)\n    print(out.requires_grad)",
        )
    )
    assert no_grad.stdout == modern.stdout == "False\n"
    assert plain_ok(fix(d, "Drop volatile=True")).stdout == original.stdout


DATA_WRITES = code_of(
    """
    import torch
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    x = torch.randn(5, 3)
    for step in range(3):
        loss = ((x @ w) - 1).pow(2).mean()
        loss.backward()
        w.data -= 0.1 * w.grad.data
        w.grad.data.zero_()
    print(w)
    """
)


def test_data_writes_become_in_place_writes_under_no_grad_with_the_same_result():
    original = plain_ok(DATA_WRITES)
    d = only(DATA_WRITES, "data_write")
    assert d["severity"] == "warning" and d["line"] == 8 and "torch.no_grad()" in d["message"]
    fixed = plain_ok(fix(d, "Write in place under torch.no_grad()"))
    modern = plain_ok(
        DATA_WRITES.replace(
            "        w.data -= 0.1 * w.grad.data\n        w.grad.data.zero_()",
            "        with torch.no_grad():\n            w -= 0.1 * w.grad\n            w.grad.zero_()",
        )
    )
    assert fixed.stdout == modern.stdout == original.stdout


HIDDEN_WRITE = code_of(
    """
    import torch
    w = torch.ones(3, requires_grad=True)
    y = (w * w).sum()
    w.data.mul_(2)
    y.backward()
    print(w.grad)
    """
)


def test_a_data_write_autograd_must_not_see_gets_the_diagnosis_but_no_fix():
    """The graph saved w before line 4 doubled it: through .data, backward silently uses the new w; the
    same write where autograd sees it makes backward fail, so that fix is not offered."""
    original = plain_ok(HIDDEN_WRITE)
    w = torch.ones(3)
    assert torch.equal(original.calls[-1].grads[frozenset({"w"})], 2 * (2 * w))  # the new value, silently
    d = only(HIDDEN_WRITE, "data_write")
    assert d["fixes"] == []
    visible = run_plain(HIDDEN_WRITE.replace("w.data.mul_(2)", "with torch.no_grad():\n    w.mul_(2)"))
    assert "modified by an inplace operation" in visible.calls[-1].error["message"]


OLD_TUTORIAL = code_of(
    """
    import torch
    from torch.autograd import Variable
    torch.manual_seed(0)
    w = Variable(torch.randn(3), requires_grad=True)
    x = Variable(torch.randn(5, 3))
    for step in range(3):
        loss = ((x @ w) ** 2).mean()
        loss.backward(retain_variables=True)
        w.data -= 0.1 * w.grad.data
        w.grad.data.zero_()
        print(step, loss.data[0])
    """
)


def test_old_code_with_several_idioms_gets_one_update_of_all_of_them():
    d = only(OLD_TUTORIAL, "retain_variables_renamed")
    fixed = plain_ok(fix(d, "Update every pre-0.4 idiom"))
    modern = plain_ok(
        OLD_TUTORIAL.replace("retain_variables", "retain_graph")
        .replace("loss.data[0]", "loss.item()")
        .replace(
            "        w.data -= 0.1 * w.grad.data\n        w.grad.data.zero_()",
            "        with torch.no_grad():\n            w -= 0.1 * w.grad\n            w.grad.zero_()",
        )
    )
    assert fixed.stdout == modern.stdout and same_grads(fixed, modern)


def test_the_sandboxes_trace_job_proposes_a_fix_for_data_writes_in_a_run_without_error():
    trace = orjson.loads(jobs.run(payload_for(DATA_WRITES)))
    assert trace["status"] == "ok"
    assert [d["kind"] for d in trace["diagnoses"]] == ["data_write"]


def test_modern_code_gets_none_of_these():
    modern = RETAIN_VARIABLES.replace("retain_variables", "retain_graph")
    assert diagnose(record(modern), run_locally) == []
