"""Diagnoses through the server: POST /api/trace verifies fixes in the sandbox; fine snippets pay nothing."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from fastapi.testclient import TestClient
from gradstep.app import create_app
from gradstep.diagnose.service import may_need_diagnosis, with_diagnoses
from gradstep.schema import Trace
from gradstep.settings import Settings
from gradstep.tracer import record
from truth import run_plain

SNIPPETS = Path(__file__).resolve().parent.parent / "snippets"
FINE = "import torch\nx = torch.ones(3, requires_grad=True)\n(x * 2).sum().backward()\nprint(x.grad)\n"


@pytest.fixture(scope="module")
def client():
    settings = Settings(workers=2, queue=4, rate=0, wall_seconds=20, cpu_seconds=10)
    with TestClient(create_app(settings)) as c:
        yield c


def _body(code: str) -> bytes:
    return orjson.dumps(record(code))


def test_a_fine_snippet_skips_diagnosis_without_parsing():
    assert not may_need_diagnosis(_body(FINE))


def test_a_fine_snippet_body_comes_back_untouched():
    body = _body(FINE)

    def must_not_run(codes):
        raise AssertionError("ran fixes for a fine snippet")

    assert with_diagnoses(body, must_not_run) is body


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


def test_api_narrates_every_step(client):
    r = client.post("/api/trace", json={"code": (SNIPPETS / "backward_twice_fails.py").read_text()})
    trace = Trace.model_validate_json(r.content)
    assert trace.version == 2 and all(step.explanation for step in trace.steps)


def test_api_gives_a_fine_snippet_no_diagnosis(client):
    r = client.post("/api/trace", json={"code": FINE})
    assert Trace.model_validate_json(r.content).diagnoses == []


def test_api_serves_the_diagnosed_trace_from_its_cache(client):
    code = (SNIPPETS / "non_scalar_backward_fails.py").read_text()
    first = client.post("/api/trace", json={"code": code})
    again = client.post("/api/trace", json={"code": code})
    assert again.headers["x-gradstep-cache"] == "hit"
    assert orjson.loads(again.content)["diagnoses"] == orjson.loads(first.content)["diagnoses"] != []
