"""Diagnoses through the server: the sandboxed run proposes, the server runs the fixes, a sandboxed check
decides; fine snippets pay nothing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from fastapi.testclient import TestClient
from gradstep.app import create_app
from gradstep.diagnose.service import may_need_diagnosis
from gradstep.schema import VERSION, Trace
from gradstep.settings import Settings
from gradstep.tracer import record
from testkit import truth
from testkit.sandbox_guard import uid_base
from testkit.server_timing import server_timing
from testkit.truth import run_plain

SNIPPETS = Path(__file__).resolve().parents[2] / "snippets"
FINE = "import torch\nx = torch.ones(3, requires_grad=True)\n(x * 2).sum().backward()\nprint(x.grad)\n"


@pytest.fixture(scope="module")
def client():
    settings = Settings(workers=2, queue=4, rate=0, wall_seconds=20, cpu_seconds=10, uid_base=uid_base())
    with TestClient(create_app(settings)) as c:
        yield c


def _body(code: str) -> dict:
    """The trace as the child has it when it decides (JSON data, as record() returns it)."""
    return orjson.loads(orjson.dumps(record(code)))


def test_a_fine_snippet_skips_diagnosis_without_parsing():
    assert not may_need_diagnosis(_body(FINE))


@pytest.mark.parametrize(
    "name",
    [
        "training_loop_no_zero_grad",
        "backward_twice_fails",
        "non_scalar_backward_fails",
        "rnn_hidden_not_detached_fails",
        "sgd_update_outside_no_grad_fails",
        "forward_under_no_grad_fails",
        "item_cuts_the_graph",
        "running_loss_keeps_graphs",
        "sqrt_at_zero_nan_grad",
        "zero_grad_before_step",
        "retain_graph_in_loop_not_needed",
        "stale_graph_training_loop_fails",
        "no_grad_forward_then_loss_fails",
    ],
)
def test_the_pre_check_lets_through_every_trace_a_rule_may_fire_on(name: str):
    # a rule fires on an error, torch's non-leaf warning, a nan/inf gradient, a call line that ran twice,
    # a leaf left without .grad after a call, or a loop that only builds graphs
    assert may_need_diagnosis(_body((SNIPPETS / f"{name}.py").read_text()))


def test_the_pre_check_lets_through_a_read_of_a_non_leaf_grad():
    code = (
        "import torch\nx = torch.ones(2, requires_grad=True)\nh = x * 2\nh.sum().backward()\nprint(h.grad)\n"
    )
    assert may_need_diagnosis(_body(code))


def test_the_pre_check_lets_through_a_backward_repeated_in_a_loop():
    code = "import torch\nw = torch.ones(2, requires_grad=True)\nfor _ in range(2):\n    (w * w).sum().backward()\n"
    assert may_need_diagnosis(_body(code))


def test_the_pre_check_lets_through_a_leaf_the_backward_did_not_reach():
    code = (
        "import torch\nw1 = torch.ones(2, requires_grad=True)\nw2 = torch.ones(2, requires_grad=True)\n"
        "(w2 * (w1 * 2).detach()).sum().backward()\n"
    )
    assert may_need_diagnosis(_body(code))


def test_the_pre_check_lets_through_a_loop_that_only_builds_graphs():
    code = (
        "import torch\nw = torch.ones(2, requires_grad=True)\ntotal = 0.0\n"
        "for _ in range(3):\n    total = total + (w * 2).sum()\n"
    )
    assert may_need_diagnosis(_body(code))


def test_the_pre_check_lets_through_a_gradient_that_went_nan():
    assert may_need_diagnosis(_body((SNIPPETS / "sqrt_at_zero_nan_grad.py").read_text()))


def test_the_pre_check_skips_two_different_calls_that_ran_once_each():
    code = "import torch\nx = torch.ones(2, requires_grad=True)\ny = (x * x).sum()\ny.backward(retain_graph=True)\ny.backward()\n"
    assert not may_need_diagnosis(_body(code))


def test_api_returns_the_diagnosis_with_fixes_verified_in_the_sandbox(client):
    code = (SNIPPETS / "shared_trunk_partial_grads.py").read_text()
    r = client.post("/api/trace", json={"code": code})
    assert r.status_code == 200
    trace = Trace.model_validate_json(r.content)
    assert [d.kind for d in trace.diagnoses] == ["backward_through_freed_graph"]
    fixes = trace.diagnoses[0].fixes
    assert len(fixes) == 2
    for fix in fixes:
        plain = run_plain(fix.code)
        assert plain.error is None and all(c.error is None for c in plain.calls)


@pytest.mark.parametrize(
    ("name", "kind"),
    [("item_cuts_the_graph", "graph_cut"), ("sqrt_at_zero_nan_grad", "nonfinite_grad")],
)
def test_api_diagnoses_a_silent_mistake_with_fixes_verified_in_the_sandbox(client, name: str, kind: str):
    code = (SNIPPETS / f"{name}.py").read_text()
    trace = Trace.model_validate_json(client.post("/api/trace", json={"code": code}).content)
    assert [d.kind for d in trace.diagnoses] == [kind] and trace.diagnoses[0].fixes
    for fix in trace.diagnoses[0].fixes:
        plain = run_plain(fix.code)
        assert plain.error is None and all(c.error is None for c in plain.calls)


def test_api_narrates_every_step(client):
    r = client.post("/api/trace", json={"code": (SNIPPETS / "backward_twice_fails.py").read_text()})
    trace = Trace.model_validate_json(r.content)
    assert trace.version == VERSION and all(step.explanation for step in trace.steps)


def test_api_gives_a_fine_snippet_no_diagnosis(client):
    r = client.post("/api/trace", json={"code": FINE})
    assert Trace.model_validate_json(r.content).diagnoses == []


def test_api_serves_the_diagnosed_trace_from_its_cache(client):
    code = (SNIPPETS / "non_scalar_backward_fails.py").read_text()
    first = client.post("/api/trace", json={"code": code})
    again = client.post("/api/trace", json={"code": code})
    assert again.headers["x-gradstep-cache"] == "hit"
    assert orjson.loads(again.content)["diagnoses"] == orjson.loads(first.content)["diagnoses"] != []


@contextlib.contextmanager
def sandbox_runs(client) -> Iterator[list[str]]:
    """The codes the server runs in its sandbox while the block runs (not its check or propose jobs)."""
    sandbox = client.app.state.runner.sandbox
    ran: list[str] = []
    run = sandbox.running  # run() goes through it too

    def counting(payload: str, **kw):
        job = orjson.loads(payload)
        if "code" in job:
            ran.append(job["code"])
        return run(payload, **kw)

    sandbox.running = counting
    try:
        yield ran
    finally:
        del sandbox.running


def test_apply_fix_gets_the_run_that_verified_the_fix_and_it_agrees_with_torch(client):
    # a comment line of its own: the code is new to the server's trace cache
    code = (SNIPPETS / "backward_twice_fails.py").read_text() + "# apply-fix test\n"
    with sandbox_runs(client) as ran:
        trace = Trace.model_validate_json(client.post("/api/trace", json={"code": code}).content)
        fix = trace.diagnoses[0].fixes[0]
        assert fix.code in ran  # verified in the sandbox...
        ran.clear()
        applied = client.post("/api/trace", json={"code": fix.code})  # ...what Apply fix sends
        assert ran == []  # ...and not run there a second time
    assert applied.headers["x-gradstep-cache"] == "verified"
    # not run: the rules proposed nothing more for it (in a job of their own), and it was encoded again
    assert list(server_timing(applied.headers)) == ["propose", "encode"]
    fixed, plain = orjson.loads(applied.content), truth.run_plain(fix.code)
    assert fixed["status"] == "ok" and plain.error is None
    assert truth.mismatches(fixed, plain) == []


def test_a_fix_run_with_other_options_is_not_served_for_the_default_ones(client):
    code = (SNIPPETS / "backward_twice_fails.py").read_text() + "# options test\n"
    options = {"max_steps": 7, "line_repeats": 2}
    trace = Trace.model_validate_json(
        client.post("/api/trace", json={"code": code, "options": options}).content
    )
    fix = trace.diagnoses[0].fixes[0]
    with sandbox_runs(client) as ran:
        client.post("/api/trace", json={"code": fix.code})
    assert ran == [fix.code]  # run anew: a trace with other options may show other steps


def test_cli_trace_prints_the_verified_diagnoses():
    import subprocess
    import sys

    gradstep = Path(sys.executable).with_name("gradstep")
    out = subprocess.run(
        [str(gradstep), "trace", str(SNIPPETS / "non_scalar_backward_fails.py")],
        capture_output=True,
        text=True,
        timeout=120,  # a safety net for a hung child, not an assert on speed
    )
    trace = Trace.model_validate_json(out.stdout)
    assert [d.kind for d in trace.diagnoses] == ["non_scalar_backward"]
    for fix in trace.diagnoses[0].fixes:
        plain = run_plain(fix.code)
        assert plain.error is None and all(c.error is None for c in plain.calls)
