"""What the sandboxed child computes for the server (server/gradstep/jobs.py), run here in-process:
a trace job proposes fixes, a check job verifies them, and together they give what diagnosing in
one process gives; the child's own work after the snippet is bounded."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from gradstep import jobs
from gradstep.columns import pack
from gradstep.diagnose import diagnose, facts
from gradstep.diagnose import non_leaf_grad as non_leaf
from gradstep.diagnose.source import Source
from gradstep.pipeline import run_locally
from gradstep.runs import payload_for, served_fields
from gradstep.runspec import job_payload
from gradstep.settings import Settings
from gradstep.tracer import record

SNIPPETS = Path(__file__).resolve().parents[2] / "snippets"


def served(code: str) -> dict:
    """A trace job's trace as the server reads it: with the fields it writes in (gradstep.runs)."""
    return {**orjson.loads(jobs.run(payload_for(code))), **served_fields(code)}


def check_payload(trace: dict, fixes: dict[str, dict]) -> str:
    return job_payload(Settings().run_spec(), check={"trace": trace, "fixes": list(fixes.items())})


@pytest.mark.parametrize(
    "name", ["shared_trunk_partial_grads", "non_scalar_backward_fails", "stale_graph_training_loop_fails"]
)
def test_a_trace_job_proposes_and_a_check_job_verifies_what_one_process_would(name):
    code = (SNIPPETS / f"{name}.py").read_text()
    trace = served(code)
    proposed = [f["code"] for d in trace["diagnoses"] for f in d["fixes"]]
    assert proposed  # unverified: the server runs these...
    fixes = {c: served(c) for c in proposed}
    trace["diagnoses"] = []
    checked = orjson.loads(jobs.run(check_payload(trace, fixes)))  # ...and a check job decides
    assert checked == diagnose(record(code), run_locally) != []


def test_a_check_job_measures_what_each_fixed_run_computes():
    # the outcome quotes the fix runs the server made (and their sibling's): computed in the sandbox
    code = (SNIPPETS / "stale_graph_training_loop_fails.py").read_text()
    trace = served(code)
    fixes = {f["code"]: served(f["code"]) for d in trace["diagnoses"] for f in d["fixes"]}
    trace["diagnoses"] = []
    (checked,) = orjson.loads(jobs.run(check_payload(trace, fixes)))
    moved, retained = checked["fixes"]
    assert "\nWith retain_graph=True: norm" in moved["outcome"]
    assert "the same every iteration" in retained["outcome"]
    only_moved = {moved["code"]: fixes[moved["code"]]}
    (alone,) = orjson.loads(jobs.run(check_payload(trace, only_moved)))
    assert [f["title"] for f in alone["fixes"]] == [moved["title"]]
    assert "retain_graph" not in alone["fixes"][0]["outcome"]


def test_a_check_job_offers_no_fix_whose_run_it_was_not_given():
    code = (SNIPPETS / "shared_trunk_partial_grads.py").read_text()
    trace = pack(record(code))  # as the server sends it: as the wire has it
    checked = orjson.loads(jobs.run(check_payload(trace, {})))
    assert [d["kind"] for d in checked] == ["backward_through_freed_graph"]
    assert checked[0]["fixes"] == []


def test_a_fine_snippet_gets_no_proposal():
    code = "import torch\nx = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()\n"
    assert orjson.loads(jobs.run(payload_for(code))).get("diagnoses", []) == []


def test_work_past_its_cpu_budget_is_dropped_even_if_it_catches_exceptions():
    def stubborn():  # like the rule loop, which keeps going past a rule's Exception
        while True:
            try:
                sum(range(10_000))
            except Exception:
                pass

    assert jobs.within_cpu(0.2, stubborn) is None
    assert jobs.within_cpu(0.2, lambda: 42) == 42


def test_the_non_leaf_rule_walks_the_tree_once_however_many_warnings(monkeypatch):
    # one walk per warning cost the server 48 s for 2,000 forged warnings over 8,500 lines
    code = "import torch\nx = torch.ones(2, requires_grad=True)\ny = x * 2\n" + "print(y.grad)\n" * 8500
    src = Source(code)
    walks = []
    real_walk = Source.walk
    monkeypatch.setattr(Source, "walk", lambda self: walks.append(1) or real_walk(self))
    for n in (1, 2000):
        walks.clear()
        warnings = [
            {"category": "UserWarning", "message": facts.NON_LEAF_MARK, "line": 4 + i} for i in range(n)
        ]
        found = non_leaf.find({"status": "ok", "code": code, "warnings": warnings}, src)
        assert len(walks) == 1
        assert len(found) == 1 and found[0].fixes  # one tensor: one diagnosis, with its fix


def test_the_non_leaf_rule_finds_the_assignment_before_each_read():
    code = "import torch\nx = torch.ones(2, requires_grad=True)\nh = x * 2\nprint(h.grad)\nh = x * 3\nprint(h.grad)\n"
    trace = {"status": "ok", "code": code, "warnings": [{"message": facts.NON_LEAF_MARK, "line": 6}]}
    (found,) = non_leaf.find(trace, Source(code))
    fixed = ast.parse(found.fixes[0].code).body
    assert ast.unparse(fixed[4]) == "h = x * 3" and ast.unparse(fixed[5]) == "h.retain_grad()"


GLOBAL_SETTINGS = """
import torch
print([torch.get_default_dtype(), torch.is_grad_enabled(), torch.is_anomaly_enabled(),
       torch.are_deterministic_algorithms_enabled(), torch.get_num_threads(), torch.initial_seed()])
"""


def test_the_zygotes_warm_up_warns_about_nothing_and_changes_no_setting():
    # The zygote runs WARMUP once, before it forks: a warning torch gives once per process would
    # never reach a snippet, and a setting it changed would be every snippet's. A fresh process,
    # so that no warning was given before it.
    script = f"""
import orjson, sys, torch
torch.set_num_threads(1)
from gradstep import jobs
from gradstep.runs import PREWARM, WARMUP, payload_for
def settings():
    exec({GLOBAL_SETTINGS!r}, {{}})
settings()
for code in (WARMUP, PREWARM):
    trace = orjson.loads(jobs.run(payload_for(code)))
    assert trace["status"] == "ok", trace["error"]
    assert trace["warnings"] == [] and not [s["warnings"] for s in trace["steps"] if s.get("warnings")], trace["warnings"]
settings()
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    before, after = out.stdout.splitlines()
    assert before == after
