"""The web API against the real app and the real sandboxed runner.

Expected traces come from the tracer run in this process on the same code (the
tracer itself is checked against plain PyTorch in test_tracer_truth.py).
"""

from __future__ import annotations

import gc
import gzip
import threading
import time

import brotli
import httpx
import orjson
import pytest
import torch
from fastapi.testclient import TestClient
from gradstep import snippets
from gradstep.app import create_app
from gradstep.cache import cache_key
from gradstep.columns import rows_of
from gradstep.encoding import Encoded
from gradstep.routes.trace import TraceOptions
from gradstep.runs import TraceRunner, sandbox_config
from gradstep.sandbox import Sandbox
from gradstep.schema import Trace, json_schema
from gradstep.settings import Settings
from gradstep.trace_dicts import collector_paused
from gradstep.tracer import record
from gradstep.traces import TraceService
from testkit.sandbox_guard import uid_base
from testkit.server_timing import server_timing

SMALL = (
    "import torch\nx = torch.ones(3, requires_grad=True)\ny = (x * 2).sum()\ny.backward()\nprint(x.grad)\n"
)


@pytest.fixture(scope="module")
def client():
    settings = Settings(workers=2, queue=4, rate=0, wall_seconds=20, cpu_seconds=10, uid_base=uid_base())
    # from a loopback address, as an operator on the host: /healthz gives it the detail
    with TestClient(create_app(settings), client=("127.0.0.1", 50000)) as c:
        yield c


def post(client, code: str, **extra) -> httpx.Response:
    return client.post("/api/trace", json={"code": code, **extra})


def test_trace_returns_the_trace_of_the_snippet(client):
    r = post(client, SMALL)
    assert r.status_code == 200
    trace = Trace.model_validate_json(r.content)
    local = record(SMALL)
    assert trace.status == "ok"
    assert trace.stdout == local["stdout"]
    assert [(s.kind, s.line) for s in trace.steps] == [(s["kind"], s["line"]) for s in local["steps"]]
    grads = {t.name: t.grad.values for t in trace.steps[-1].tensors.rows() if t.grad}
    assert grads == {t["name"]: t["grad"]["values"] for t in local["steps"][-1]["tensors"] if t["grad"]}


def test_a_failing_snippet_is_a_trace_with_its_error_not_an_http_error(client):
    code = "import torch\nx = torch.ones(2, requires_grad=True)\ny = x * x\ny.sum().backward()\ny.sum().backward()\n"
    r = post(client, code)
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "error"
    assert body["error"] == record(code)["error"]


def test_syntax_error_points_at_line_and_column(client):
    code = "import torch\nx = (1,\n"
    with pytest.raises(SyntaxError) as e:
        compile(code, "<snippet>", "exec")
    err = post(client, code).json()["error"]
    assert (err["type"], err["line"], err["column"]) == ("SyntaxError", e.value.lineno, e.value.offset)


def test_cpu_limit_is_a_limit_result_naming_cpu(client):
    body = post(client, "while True:\n    pass\n").json()
    assert body["status"] in ("limit", "timeout")
    assert body["limit"] in ("cpu", "wall")
    assert body["error"]["message"]


def test_identical_requests_are_served_from_the_cache(client):
    code = SMALL + "# cache probe\n"
    first = post(client, code)
    second = post(client, code)
    assert first.headers["x-gradstep-cache"] == "miss"
    assert second.headers["x-gradstep-cache"] == "hit"
    assert first.content == second.content


def test_options_reach_the_tracer(client):
    code = "import torch\nx = torch.ones(1, requires_grad=True)\nfor i in range(10):\n    x = x * 2\n"
    body = post(client, code, options={"max_steps": 2}).json()
    assert len(body["steps"]) == 2
    assert "steps" in body["truncated"]


def test_missing_code_is_a_readable_422(client):
    r = client.post("/api/trace", json={"source": "x"})
    assert r.status_code == 422
    assert "code" in r.json()["error"]


def test_invalid_json_is_a_readable_422(client):
    r = client.post("/api/trace", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["error"].startswith("Invalid request")


def test_non_utf8_body_is_a_400_with_a_message(client):
    r = client.post(
        "/api/trace", content=b'{"code": "\xff\xfe"}', headers={"content-type": "application/json"}
    )
    assert r.status_code == 400
    assert "UTF-8" in r.json()["error"]


def test_nul_in_code_is_a_422(client):
    r = post(client, "x = 1\x00")
    assert r.status_code == 422
    assert "NUL" in r.json()["error"]


def test_oversized_body_is_413(client):
    r = post(client, "#" * (70 * 1024))
    assert r.status_code == 413
    assert "larger than" in r.json()["error"]


def test_unknown_option_is_a_422(client):
    assert post(client, SMALL, options={"max_steps": 0}).status_code == 422
    assert post(client, SMALL, options={"bogus": 1}).status_code == 422


def test_snippets_list_every_curated_snippet_with_its_header(client):
    listed = client.get("/api/snippets").json()
    assert {s["name"] for s in listed} == set(snippets.load_all())
    for s in listed:
        assert s["title"] and s["watch"] and "code" not in s


def test_one_snippet_has_its_code(client):
    name = next(iter(snippets.load_all()))
    body = client.get(f"/api/snippets/{name}").json()
    assert body["code"] == snippets.load_all()[name].code


def test_unknown_snippet_is_404_with_a_message(client):
    r = client.get("/api/snippets/no_such_thing")
    assert r.status_code == 404
    assert "no_such_thing" in r.json()["error"]


def test_schema_endpoint_serves_the_trace_schema(client):
    assert client.get("/api/schema").json() == json_schema()


def test_healthz_lists_the_sandbox_layers(client):
    body = client.get("/healthz").json()
    assert body["status"] == "ok"
    assert body["sandbox"]["layers"]
    assert all(isinstance(v, str) for v in body["sandbox"]["layers"].values())


def test_healthz_gives_counts_of_sandbox_processes_never_their_ids(client):
    sandbox = client.get("/healthz").json()["sandbox"]
    internal = client.app.state.runner.health()
    # spares come and go between two looks (one is made after each run): their count, not its value
    assert 0 <= sandbox["spares"] <= sandbox["slots"] and sandbox["zygote"] is True
    ids = {str(internal["zygote_pid"]), *map(str, internal["spare_pids"])}
    assert not any("pid" in key for key in sandbox)
    # everything else the sandbox reports is there (a new field must be declared public: SandboxHealth)
    assert set(sandbox) == set(internal) - {"zygote_pid", "spare_pids"}
    ids |= {str(p.proc.pid) for p in client.app.state.runner.checker._idle.queue if p is not None}
    text = client.get("/healthz").text
    assert not any(f":{pid}" in text or f"[{pid}" in text or f",{pid}" in text for pid in ids)
    assert client.get("/healthz").json()["checkers"] == {"processes": 2, "died": 0}


def test_healthz_counts_runs_at_once_apart_from_the_sandbox_slots(client):
    settings = client.app.state.settings
    body = client.get("/healthz").json()
    sandbox = body["sandbox"]
    assert body["workers"] == sandbox["workers"] == settings.workers == 2  # runs at once: admission's
    assert sandbox["slots"] == settings.workers + settings.extra_slots  # each with a uid and a spare
    assert 0 <= sandbox["busy"] <= sandbox["workers"] and sandbox["spares"] <= sandbox["slots"]


def test_extra_slots_come_from_the_environment_and_reach_the_sandbox(monkeypatch):
    monkeypatch.setenv("GRADSTEP_WORKERS", "3")
    monkeypatch.setenv("GRADSTEP_EXTRA_SLOTS", "5")
    settings = Settings.from_env()
    config = sandbox_config(settings)
    assert (config.workers, config.extra_slots, config.slots) == (3, 5, 8)
    # admission (running or queued) counts runs, not slots
    service = TraceService(settings, TraceRunner(settings, sandbox=Sandbox(config)), None)
    assert service.admission.capacity == settings.workers + settings.queue == 3 + 32


def test_openapi_schema_is_served_and_swagger_ui_is_off_by_default(client):
    assert client.get("/openapi.json").json()["paths"]["/api/trace"]
    # Swagger UI loads its code from a CDN: a page of ours never does unless asked to
    assert client.get("/docs").status_code == 404
    assert client.get("/redoc").status_code == 404
    assert 'href="/openapi.json"' in client.get("/").text


def test_swagger_ui_when_enabled_allows_only_its_cdn_and_its_own_inline_script():
    app = create_app(Settings(api_docs=True))
    r = TestClient(app).get("/docs")  # no lifespan: no sandbox needed
    assert r.status_code == 200
    policy = dict(p.strip().split(" ", 1) for p in r.headers["content-security-policy"].split(";"))
    script = policy["script-src"].split()
    assert script[0] == "https://cdn.jsdelivr.net" and all(s.startswith("'sha256-") for s in script[1:])
    assert "'unsafe-inline'" not in script and "'unsafe-eval'" not in script
    assert policy["frame-ancestors"] == "'self'"


def test_responses_are_gzipped_when_asked(client):
    r = client.get("/api/schema", headers={"accept-encoding": "gzip"})
    assert r.headers["content-encoding"] == "gzip"
    raw = client.get("/api/schema", headers={"accept-encoding": "identity"})
    assert "content-encoding" not in raw.headers
    assert orjson.loads(raw.content) == json_schema()
    assert len(gzip.compress(raw.content)) < len(raw.content)


def test_rate_limit_answers_429_with_retry_after():
    settings = Settings(workers=1, queue=2, rate=0.01, burst=1, uid_base=uid_base())
    with TestClient(create_app(settings)) as c:
        first = post(c, SMALL + "# rate 1\n")
        second = post(c, SMALL + "# rate 2\n")
    assert first.status_code == 200
    assert second.status_code == 429
    assert int(second.headers["retry-after"]) >= 1


def test_full_queue_answers_503_with_retry_after():
    settings = Settings(workers=1, queue=0, rate=0, uid_base=uid_base())
    app = create_app(settings)
    with TestClient(app) as c:
        app.state.admission.inside = app.state.admission.capacity  # every place taken
        r = post(c, SMALL + "# full\n")
        app.state.admission.inside = 0
        ok = post(c, SMALL + "# full\n")
    assert r.status_code == 503
    assert r.headers["retry-after"]
    assert ok.status_code == 200


def test_every_run_shows_torchs_once_per_process_warnings(client):
    # torch warns about backward(create_graph=True) once per process: each run is a fresh child
    code = "import torch\nx = torch.tensor(2.0, requires_grad=True)\n(x**3).backward(create_graph=True)\n"
    for n in range(2):
        body = post(client, code + f"# run {n}\n").json()
        assert any("create_graph=True" in w["message"] for w in body["warnings"]), body["warnings"]


def test_the_collector_is_paused_while_a_trace_is_validated_and_resumes_after():
    """Validation of the child's trace runs with the garbage collector off, and a failing or a
    concurrent validation leaves it on again once the last one is done."""
    assert gc.isenabled()
    inner_started, release = threading.Event(), threading.Event()

    def other():
        with collector_paused():
            inner_started.set()
            release.wait(5)

    t = threading.Thread(target=other)
    t.start()
    inner_started.wait(5)
    with pytest.raises(ValueError), collector_paused():
        assert not gc.isenabled()
        raise ValueError("a trace that is not one")
    assert not gc.isenabled()  # the other validation is still under way
    release.set()
    t.join(5)
    assert gc.isenabled()


def test_a_trace_is_served_compressed_once_in_the_encoding_each_client_takes(client):
    """The cache holds brotli, and gzip once a client needed it; each client gets one it offered,
    or the JSON inflated."""
    code = "import torch\nx = torch.ones(200, requires_grad=True)\n(x * x).sum().backward()\n"
    zipped = client.post("/api/trace", json={"code": code}, headers={"accept-encoding": "gzip"})
    assert zipped.headers["content-encoding"] == "gzip"
    assert "accept-encoding" in zipped.headers["vary"].lower()
    offers = {"br": "br", "gzip, deflate, br, zstd": "br", "br;q=0, gzip": "gzip", "identity": None}
    for offered, expected in {**offers, "gzip;q=0": None}.items():
        served = client.post("/api/trace", json={"code": code}, headers={"accept-encoding": offered})
        assert served.headers["x-gradstep-cache"] == "hit"
        assert served.headers.get("content-encoding") == expected, offered
        assert served.json() == zipped.json()  # the client (httpx, with brotli) decoded it
    x = torch.ones(200, requires_grad=True)
    (x * x).sum().backward()
    (traced,) = [t for t in rows_of(zipped.json())["steps"][-1]["tensors"] if t["name"] == "x"]
    assert traced["grad"]["norm"] == pytest.approx(float(x.grad.norm()), rel=1e-6)


def test_gzip_is_made_for_the_first_client_that_needs_it_and_kept(client):
    code = "import torch\nx = torch.ones(300, requires_grad=True)\n(x * 3).sum().backward()\n"
    browser = client.post("/api/trace", json={"code": code}, headers={"accept-encoding": "gzip, br"})
    assert browser.headers["content-encoding"] == "br"
    key = cache_key(code, TraceOptions().model_dump(), client.app.state.settings.result_caps())
    cache = client.app.state.cache
    assert Encoded.unpack(cache.get_now(key)).gzip is None  # no client needed gzip yet
    first = client.post("/api/trace", json={"code": code}, headers={"accept-encoding": "gzip"})
    kept = Encoded.unpack(cache.get_now(key)).gzip
    assert first.headers["content-encoding"] == "gzip" and kept is not None
    assert gzip.decompress(kept) == brotli.decompress(Encoded.unpack(cache.get_now(key)).br)
    again = client.post("/api/trace", json={"code": code}, headers={"accept-encoding": "gzip"})
    assert again.json() == first.json() == browser.json()


def test_a_run_says_what_its_parts_took_in_server_timing_and_a_cache_hit_does_not(client):
    code = "import torch\nx = torch.ones(5, requires_grad=True)\n(x * 4).sum().backward()\n"
    start = time.monotonic()
    miss = post(client, code)
    elapsed_ms = (time.monotonic() - start) * 1e3
    parts = server_timing(miss.headers)
    assert set(parts) == {"run", "check"} and all(ms > 0 for ms in parts.values())
    assert sum(parts.values()) <= elapsed_ms  # parts of this request's own time
    hit = post(client, code)
    assert hit.headers["x-gradstep-cache"] == "hit" and "server-timing" not in hit.headers
