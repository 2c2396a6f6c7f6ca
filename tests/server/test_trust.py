"""Attacks on the trust boundary between the sandboxed child and the server (issue 20).

The snippet runs in the same process as the tracer, so it can write anything to the result
descriptor: a forged trace, forged "verified" fixes, thousands of warnings. Each test here
attempts one attack through the real app and the real sandbox (in a guard cgroup, as
tests/sandbox/test_sandbox_attacks.py does) and shows it failing: the server shows the code that ran,
offers only fixes it ran itself, runs no rule on the child's bytes, charges every run a request
causes to its client, and stops them all when the client goes away.
"""

from __future__ import annotations

import ast
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gradstep.diagnose
import gradstep.jobs
import gradstep.runs
import httpx
import orjson
import pytest
import torch
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from gradstep import serving
from gradstep.app import create_app
from gradstep.cache import cache_key, fix_run_key
from gradstep.columns import pack, rows_of
from gradstep.diagnose import RULES, facts
from gradstep.encoding import compress, decompress
from gradstep.export import export_html
from gradstep.narrate import narrate
from gradstep.routes.trace import TraceOptions
from gradstep.runs import NOT_CHECKED, TraceRunner, sandbox_config
from gradstep.sandbox import Sandbox
from gradstep.schema import VERSION, Trace
from gradstep.settings import Settings
from gradstep.tracer import Limits, record
from gradstep.traces import HIT_COST
from testkit.sandbox_guard import Guard, guard_fixture, guard_unavailable, settle, uid_base
from testkit.server_timing import server_timing

pytestmark = pytest.mark.skipif(guard_unavailable() is not None, reason=str(guard_unavailable()))

SNIPPETS = Path(__file__).resolve().parents[2] / "snippets"
FREED = (SNIPPETS / "shared_trunk_partial_grads.py").read_text()  # two fixes, both verified
TRIVIAL = "import torch\nx = torch.ones(2, requires_grad=True)\n(x * 3).sum().backward()\n"
SLEEP_FOREVER = "import time\ntime.sleep(10**6)\n"

guard = guard_fixture(memory_mb=6144, pids=400)


def forge(trace: dict, proposals: list[dict] | None = None, build: str = "") -> str:
    """A snippet that writes ``trace`` (plus ``proposals`` as its diagnoses) as its own result frame,
    as the tracer would at the end, and exits: the server gets nothing else from this child.
    ``build``: code run first, which may change ``trace`` (to forge more than fits in a snippet)."""
    trace = {"version": 2, "status": "ok", **trace, "diagnoses": proposals or []}
    return (
        "import json, os, struct\n"
        f"trace = json.loads({orjson.dumps(trace).decode()!r})\n"
        f"{build}"
        "body = json.dumps(trace).encode()\n"
        "os.write(3, b'R' + struct.pack('<Q', len(body)) + body)\n"
        "os._exit(0)\n"
    )


def proposal(*codes: str, message: str = "FORGED") -> dict:
    fixes = [{"title": "Forged fix", "explanation": "verified, trust me", "code": c} for c in codes]
    return {
        "kind": "backward_through_freed_graph",
        "severity": "error",
        "line": 1,
        "message": message,
        "fixes": fixes,
    }


def caps(client: TestClient) -> dict:
    return client.app.state.settings.result_caps()


def guarded_app(guard: Guard, uid_base: int, **overrides) -> FastAPI:
    settings = Settings(
        workers=2, queue=4, rate=0, wall_seconds=30, cpu_seconds=10, fix_budget=10, uid_base=uid_base
    )
    for name, value in overrides.items():
        setattr(settings, name, value)
    sandbox = Sandbox(sandbox_config(settings, cgroup_parent=guard.parent, memory_mb=768))
    return create_app(settings, runner=TraceRunner(settings, sandbox=sandbox))


@contextlib.contextmanager
def serving_client(app: FastAPI, guard: Guard) -> Iterator[TestClient]:
    with TestClient(app) as client:
        guard.hold(app.state.runner.health()["zygote_pid"])
        yield client
        settle(app.state.runner.sandbox, timeout=30)


@contextlib.contextmanager
def live_server(app: FastAPI, guard: Guard) -> Iterator[str]:
    """``app`` served by uvicorn (as `gradstep serve` does) on a free port, in a thread."""
    settings: Settings = app.state.settings
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        settings.port = s.getsockname()[1]
    server = uvicorn.Server(serving.config(app, settings, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    end = time.monotonic() + 180  # a busy machine starts the zygote slowly
    while not server.started:
        assert thread.is_alive() and time.monotonic() < end, "the server did not start"
        time.sleep(0.05)
    guard.hold(app.state.runner.health()["zygote_pid"])
    try:
        yield f"http://127.0.0.1:{settings.port}"
    finally:
        server.should_exit = True
        thread.join(60)


@contextlib.contextmanager
def sandbox_runs(app: FastAPI) -> Iterator[list[dict]]:
    """Every run the server starts while the block runs, as it starts: {"job", "concurrent": trace jobs
    running then, this one included, "result": its RunResult once it returns (None until then)}."""
    sandbox = app.state.runner.sandbox
    runs: list[dict] = []
    running = [0]
    lock = threading.Lock()
    run = sandbox.running  # run() goes through it too

    @contextlib.contextmanager
    def counting(payload: str, **kw):
        job = orjson.loads(payload)
        with lock:
            running[0] += runs_a_snippet(job)
            entry = {"job": job, "concurrent": running[0], "result": None}
            runs.append(entry)
        try:
            with run(payload, **kw) as entry["result"]:
                yield entry["result"]
        finally:
            with lock:
                running[0] -= runs_a_snippet(job)

    sandbox.running = counting
    try:
        yield runs
    finally:
        del sandbox.running


def started(runs: list[dict], code: str) -> bool:
    return any(r["job"].get("code") == code for r in runs)


def runs_a_snippet(job: dict) -> bool:
    """A trace job (a snippet or a fix), not a check or propose job (rules only: gradstep.jobs)."""
    return "check" not in job and "propose" not in job


def trace_jobs(runs: list[dict]) -> list[dict]:
    return [r for r in runs if runs_a_snippet(r["job"])]


def wait_for(condition, what: str, timeout: float = 90.0) -> None:
    """A safety net for a hung run (never an assert on speed: the limits it proves are far larger)."""
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def client(guard):
    with serving_client(guarded_app(guard, uid_base(2000)), guard) as c:
        yield c


def post(client, code: str, **headers) -> httpx.Response:
    return client.post("/api/trace", json={"code": code}, headers=headers)


@pytest.fixture
def unseen(monkeypatch) -> None:
    """As if the server's look at the code (gradstep.reach) missed how a forging snippet reaches its
    process: the protections behind that look must hold on their own."""
    monkeypatch.setattr(gradstep.runs, "_reaches", lambda code: ())


# -- 1. the server runs no rule on what a child wrote ----------------------------------------


@pytest.fixture
def rules_in_the_server(monkeypatch) -> list[str]:
    """Every rule, the candidate search and the check, counted when this process calls them."""
    called: list[str] = []

    def counting(name, fn):
        def wrapper(*args, **kw):
            called.append(name)
            return fn(*args, **kw)

        return wrapper

    for rule in RULES:
        monkeypatch.setattr(rule, "find", counting(rule.__name__, rule.find))
    for name in ("find", "verify", "diagnose", "check", "propose"):
        monkeypatch.setattr(gradstep.diagnose, name, counting(name, getattr(gradstep.diagnose, name)))
    monkeypatch.setattr(gradstep.jobs, "run", counting("jobs.run", gradstep.jobs.run))
    return called


def test_forged_warnings_cost_the_server_no_rule_run(client, rules_in_the_server):
    # The 479-byte attack: 8,500 lines of code and 2,000 non-leaf warnings, built in the child
    # (it cost the server 48 s of CPU when the server ran the rules on the child's trace).
    build = (
        "trace['code'] = 'import torch\\nx = torch.ones(2, requires_grad=True)\\ny = x * 2\\n' + "
        "'print(y.grad)\\n' * 8500\n"
        "trace['warnings'] = [{'category': 'UserWarning', 'message': 'The .grad attribute of a Tensor "
        f"{facts.NON_LEAF_MARK}', 'line': 4 + i}} for i in range(2000)]\n"
    )
    code = forge({}, [proposal("x = 1\n")], build=build)
    body = post(client, code).json()
    assert body["code"] == code and len(body["warnings"]) == 2000  # served: the child's claim, with its code
    assert body["diagnoses"] == []  # nothing the check found in that claim, about this code
    assert rules_in_the_server == []


def test_a_genuine_snippet_of_55_kb_of_grad_reads_is_diagnosed_in_the_sandbox(client, rules_in_the_server):
    code = "import torch\nx = torch.ones(2, requires_grad=True)\ny = x * 2\ny.sum().backward()\n"
    code += "y.grad\n" * ((55_000 - len(code)) // 7)
    body = post(client, code).json()
    assert body["status"] == "ok"
    (d,) = body["diagnoses"]  # one tensor, one diagnosis, however many lines read it
    assert d["kind"] == "grad_of_non_leaf" and d["fixes"][0]["code"].count("y.retain_grad()") == 1
    assert rules_in_the_server == []


def test_diagnoses_with_verified_fixes_still_come_from_the_sandbox(client, rules_in_the_server):
    r = post(client, FREED + "# rules-free server\n")
    body = r.json()
    assert [d["kind"] for d in body["diagnoses"]] == ["backward_through_freed_graph"]
    assert len(body["diagnoses"][0]["fixes"]) == 2
    assert rules_in_the_server == []
    # the fix runs and their check are a part of their own
    assert list(server_timing(r.headers)) == ["run", "check", "diagnose"]


# -- 2. a forged trace is served as the child's claim, never as the server's truth -------------


def test_a_forged_error_frame_is_quoted_as_the_codes_words_never_the_servers(client):
    claim = "Security notice from gradstep: your session expired, log in at evil.example"
    code = (
        "import os, struct\n"
        f"text = {claim!r}.encode()\n"
        "os.write(3, b'E' + struct.pack('<Q', len(text)) + text)\n"  # the frame the job code writes when it raises
        "os._exit(1)\n"
    )
    trace = Trace.model_validate_json(post(client, code).content)
    assert trace.status == "crashed" and trace.error is not None
    assert claim not in trace.error.message  # the server's sentence is its own...
    assert trace.error.reported == claim  # ...and the child's text is kept apart, as the child's


def test_a_forged_result_frame_shows_the_code_that_ran_not_the_code_it_claims(client):
    claim = {"code": "print('an innocent snippet')\n", "torch": "9.9.9", "version": 1, "stdout": "hello\n"}
    code = forge(claim)
    first = post(client, code)
    again = post(client, code)
    assert (first.headers["x-gradstep-cache"], again.headers["x-gradstep-cache"]) == ("miss", "hit")
    for r in (
        first,
        again,
    ):  # served, and cached (memory and Redis hold the same bytes), as the code that ran
        trace = Trace.model_validate_json(r.content)
        assert (trace.code, trace.torch, trace.version) == (code, torch.__version__, VERSION)


def test_forged_verified_fixes_are_never_shown(client, unseen):
    # The child claims a failed second backward with a "verified" fix that does run cleanly.
    steps = [
        {"index": 0, "kind": "backward", "line": 2, "nodes": {"id": []}},
        {
            "index": 1,
            "kind": "backward",
            "line": 2,
            "error": {"type": "RuntimeError", "message": f"Trying to {facts.FREED_MARK}", "line": 2},
        },
    ]
    code = forge({"steps": steps, "status": "error"}, [proposal("print('fixed')\n")])
    with sandbox_runs(client.app) as runs:
        body = post(client, code).json()
    ran = [r["job"]["code"] for r in trace_jobs(runs)]
    assert ran == [code, "print('fixed')\n"]  # the proposal was run (charged to this client)...
    shown = orjson.dumps(body["diagnoses"]).decode()
    assert "FORGED" not in shown and "Forged fix" not in shown
    # ...but only a diagnosis the sandboxed check found in the claim is shown, without that fix
    assert all(f["code"] != "print('fixed')\n" for d in body["diagnoses"] for f in d["fixes"])


def test_a_forging_snippet_is_shown_as_reported_by_its_code_and_no_fix_is_run_for_it(client):
    steps = [{"index": 0, "kind": "backward", "line": 2, "nodes": {"id": []}}]
    code = forge(
        {"steps": steps, "stdout": "gradstep checked this against plain PyTorch\n"}, [proposal(TRIVIAL)]
    )
    with sandbox_runs(client.app) as runs:
        trace = Trace.model_validate_json(post(client, code).content)
    line = code.splitlines().index(next(x for x in code.splitlines() if x.startswith("os.write"))) + 1
    assert [r.what for r in trace.reaches if r.line == line] == ["os.write"]  # the server's look at the code
    assert trace.diagnoses == [] and [r["job"]["code"] for r in runs] == [
        code
    ]  # nothing run or checked for it


def test_the_same_mistake_without_reaching_past_torch_gets_its_fixes(client):
    plain = FREED + "# reaching or not\n"
    reaching = plain + "import os\nprint(os.getpid())\n"
    kinds = [[d["kind"] for d in post(client, code).json()["diagnoses"]] for code in (plain, reaching)]
    assert kinds == [["backward_through_freed_graph"], []]


def test_an_export_carries_the_code_that_ran(client):
    code = forge({"code": "print('an innocent snippet')\n"})
    body = decompress(client.app.state.runner.trace(code).stored)  # what `gradstep export` writes
    page = export_html(orjson.loads(body))
    assert orjson.loads(body)["code"] == code
    assert (
        "an innocent snippet" in page and "os.write(3" in page
    )  # the claim's code only as part of the real one


def test_a_trace_that_inflates_absurdly_is_served_to_its_author_but_never_cached(client):
    # ~7 MB of JSON that brotli makes a few KB: kept, it would be inflated for every client
    code = forge({}, build="trace['stdout'] = 'x' * 7_000_000  # inflates\n")
    first = post(client, code, **{"accept-encoding": "br"})
    assert first.status_code == 200 and len(first.json()["stdout"]) == 7_000_000
    assert len(first.content) > 7_000_000 and int(first.headers.get("content-length", 0)) < 100_000
    again = post(client, code, **{"accept-encoding": "br"})
    assert again.headers["x-gradstep-cache"] == "miss"  # ran again: nothing was kept


def test_a_trace_is_inflated_as_the_client_reads_it(client):
    code = TRIVIAL + "# streamed\n"
    with client.stream(
        "POST", "/api/trace", json={"code": code}, headers={"accept-encoding": "identity"}
    ) as r:
        assert "content-length" not in r.headers  # streamed, not held whole
        assert r.headers.get("content-encoding") is None
        body = b"".join(r.iter_raw())
    assert orjson.loads(body)["code"] == code


# -- 3. the runs a request causes are its client's -------------------------------------------


@pytest.fixture(scope="module")
def stingy(guard):
    """A server whose clients may make 4 runs (no refill to speak of) and whose requests get 6 s for fixes."""
    app = guarded_app(guard, uid_base(2100), rate=0.001, burst=4, fix_budget=6, trust_proxy=True)
    with serving_client(app, guard) as c:
        yield c


def test_forged_proposals_run_only_as_far_as_the_clients_budget_goes(stingy, unseen):
    fixes = [f"x = {i}\n" for i in range(8)]
    code = forge({}, [proposal(*fixes)])
    me = {"x-forwarded-for": "203.0.113.7"}
    with sandbox_runs(stingy.app) as runs:
        body = post(stingy, code, **me).json()
    # 4 runs in the budget: this one and 3 of the 8 proposed fixes, one at a time (never both workers)
    fix_runs = trace_jobs(runs)[1:]
    assert [r["job"]["code"] for r in fix_runs] == fixes[:3]
    assert all(r["concurrent"] == 1 for r in fix_runs)
    assert body["diagnoses"] == []
    # and the client's budget is spent: its next run is refused
    assert post(stingy, TRIVIAL + "# next\n", **me).status_code == 429


def test_a_client_short_of_budget_gets_its_diagnosis_with_the_fixes_it_could_pay_for(stingy):
    me = {"x-forwarded-for": "203.0.113.10"}
    for i in range(2):  # 2 of its 4 runs
        assert post(stingy, TRIVIAL + f"# spend {i}\n", **me).status_code == 200
    code = FREED + "# short of budget\n"
    with sandbox_runs(stingy.app) as runs:
        body = post(stingy, code, **me).json()
    assert len(trace_jobs(runs)) == 2  # its run and one of the two fixes: all it had left
    (diagnosis,) = body["diagnoses"]
    assert [f["code"] for f in diagnosis["fixes"]] == [trace_jobs(runs)[1]["job"]["code"]]
    assert NOT_CHECKED in body["notes"]
    # not cached: whoever asks next (with budget) gets both fixes checked
    assert stingy.app.state.cache.get_now(cache_key(code, TraceOptions().model_dump(), caps(stingy))) is None


def test_a_proposed_fix_too_costly_to_read_is_never_parsed_in_the_server_nor_run(client, unseen, monkeypatch):
    # the child proposes 59 KB of crafted f-string (its parse ~0.5-1 s holding the GIL) as a fix
    build = "trace['diagnoses'][0]['fixes'][0]['code'] = 'f\"' + '{a:{b}}a' * 7400 + '\"\\n'\n"
    steps = [{"index": 0, "kind": "backward", "line": 2, "nodes": {"id": []}}]
    code = forge({"steps": steps}, [proposal("placeholder\n")], build=build)
    parsed = []
    real_parse = ast.parse
    monkeypatch.setattr(
        ast, "parse", lambda source, *a, **kw: parsed.append(len(source)) or real_parse(source, *a, **kw)
    )
    with sandbox_runs(client.app) as runs:
        assert post(client, code).status_code == 200
    crafted_size = len('f"' + "{a:{b}}a" * 7400 + '"\n')
    assert crafted_size not in parsed  # read in a reader process, which gave up on it
    assert [r["job"]["code"] for r in trace_jobs(runs)] == [code]  # and never run


def test_fix_runs_get_an_even_share_of_the_requests_cpu(stingy, unseen):
    show_limit = "import resource\nprint(resource.getrlimit(resource.RLIMIT_CPU))  # fix {}\n"
    fixes = [show_limit.format(i) for i in range(3)]
    with sandbox_runs(stingy.app) as runs:
        post(stingy, forge({}, [proposal(*fixes)]), **{"x-forwarded-for": "203.0.113.8"})
    for fix in fixes:
        (run,) = [r for r in runs if r["job"].get("code") == fix]
        soft, hard = ast.literal_eval(orjson.loads(run["result"].output)["stdout"])
        # 6 s of CPU for 3 fixes: 2 s each (the sandbox's limit is 10), on top of the little the child
        # used before the snippet
        assert soft <= 3 and hard == soft  # SIGKILL at it: the child is its PID namespace's pid 1


def test_a_trivial_run_of_another_user_does_not_wait_for_an_attackers_fixes(stingy, unseen):
    fix_a, fix_b = SLEEP_FOREVER + "# a\n", SLEEP_FOREVER + "# b\n"
    code = forge({}, [proposal(fix_a, fix_b)])
    attacker_done = threading.Event()

    def attack():
        post(stingy, code, **{"x-forwarded-for": "203.0.113.9"})
        attacker_done.set()

    with sandbox_runs(stingy.app) as runs:
        threading.Thread(target=attack, daemon=True).start()
        # the attacker's first fix holds a worker until the request's deadline (6 s)...
        wait_for(lambda: started(runs, fix_a), "the attacker's fix run")
        r = post(stingy, TRIVIAL + "# bystander\n", **{"x-forwarded-for": "198.51.100.1"})
        # ...and the bystander's run took the other one meanwhile
        bystander_first = not attacker_done.is_set()
        wait_for(attacker_done.is_set, "the attacker's request")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    assert bystander_first
    (first_fix,) = [r for r in runs if r["job"].get("code") == fix_a]
    # the attacker's fix ended at its request's deadline (6 s for all its fixes), not the 30 s wall
    # limit; its second fix, past the deadline, never started
    assert (first_fix["result"].status, first_fix["result"].limit) == ("timeout", "wall")
    assert not started(runs, fix_b)


def test_a_class_behind_one_address_opening_the_same_page_gets_its_fixes(guard):
    # 30 students behind one NAT address open the same diagnosed snippet at once: one run and its
    # two fix runs, shared by all; the first pays for them, the others a share's small cost
    # (29 × HIT_COST: burst 5 would refuse 25 of 30 if each paid for a run).
    app = guarded_app(guard, uid_base(2200), rate=0.001, burst=5)
    with live_server(app, guard) as base, sandbox_runs(app) as runs:
        code = FREED + "# class\n"
        barrier = threading.Barrier(30)

        def student(_):
            barrier.wait()
            return httpx.post(f"{base}/api/trace", json={"code": code}, timeout=120, trust_env=False)

        with ThreadPoolExecutor(30) as pool:
            answers = list(pool.map(student, range(30)))
    assert [r.status_code for r in answers] == [200] * 30
    assert all(len(r.json()["diagnoses"][0]["fixes"]) == 2 for r in answers)
    assert len(trace_jobs(runs)) == 3  # the snippet and its two fixes, once


def test_a_client_asking_for_one_cached_answer_again_and_again_spends_its_budget(stingy):
    me, other = {"x-forwarded-for": "203.0.113.20"}, {"x-forwarded-for": "198.51.100.20"}
    code = TRIVIAL + "# asked again and again\n"
    assert post(stingy, code, **me).headers["x-gradstep-cache"] == "miss"  # 1 of its 4 runs
    answers = [post(stingy, code, **me).status_code for _ in range(100)]
    served = answers.index(429)  # the 3 runs left, spent a hit's cost at a time
    assert 0 < served <= 3 / HIT_COST + 1 and set(answers[served:]) == {429}
    assert post(stingy, code, **other).status_code == 200  # another client is served


# -- 2c. every sentence is the server's, written from checked facts (gradstep.voice) -------------
# Each with ``unseen``: as if the look at the code missed how the snippet reaches its process.

CLAIM = "gradstep checked this run against plain PyTorch: visit https://evil.example/verify"


def served_text(body: dict) -> str:
    """Everything a page says in the server's voice: narration, notes, the status's message, diagnoses."""
    said = [s.get("explanation", "") for s in body.get("steps") or ()] + list(body.get("notes") or ())
    said.append((body.get("error") or {}).get("message", ""))
    return "\n".join(said) + orjson.dumps(body.get("diagnoses") or []).decode()


def recorded(code: str) -> dict:
    """``code``'s trace as a child writes it (columns, no server field), to forge from."""
    trace = pack(record(code, Limits.sandboxed()))
    return {k: v for k, v in trace.items() if k not in ("code", "version", "torch", "notes")}


def test_narration_and_notes_a_run_writes_are_never_served(client, unseen):
    trace = recorded(TRIVIAL)
    for step in trace["steps"]:
        step["explanation"], step["links"] = CLAIM, []
    trace["notes"] = [CLAIM]
    body = post(client, forge(trace)).json()
    assert CLAIM not in served_text(body) and "evil.example" not in served_text(body)
    told = narrate(rows_of({**recorded(TRIVIAL), "code": TRIVIAL}))  # the server's narration of the facts
    assert [s["explanation"].split(" (line")[1:] for s in body["steps"]] == [
        s["explanation"].split(" (line")[1:] for s in told["steps"]
    ]
    assert body["notes"] == []  # the facts (uses) say nothing to note


@pytest.mark.parametrize(
    "status, limit, error_type",
    [("limit", "cpu", "limit"), ("limit", "wall", "StoppedAtLimit"), ("limit", "memory", "RuntimeError"),
     ("limit", "output", "limit"), ("timeout", None, "timeout"), ("crashed", None, "crashed"),
     ("limit", CLAIM, "limit")],
)  # fmt: skip
def test_a_limit_or_status_a_run_claims_is_never_the_servers_sentence(
    client, unseen, status, limit, error_type
):
    # a quick run: the sandbox saw it use almost none of its CPU and time, and no refused allocation
    forged = {**recorded(TRIVIAL), "status": status, "limit": limit}
    forged["error"] = {"type": error_type, "message": CLAIM, "line": 1}
    code = forge(forged)
    for r in (post(client, code), post(client, code)):  # served, then as the cache has it
        body = r.json()
        assert (body["status"], body["limit"]) == ("crashed", None)
        assert CLAIM not in served_text(body) and "gradstep cannot vouch" in body["error"]["message"]
        assert body["error"]["reported"] == CLAIM  # the run's words, kept apart as its own


def test_a_memory_limit_is_the_servers_reading_of_a_refused_allocation(client, unseen):
    forged = {**recorded(TRIVIAL), "status": "limit", "limit": "memory"}
    forged["error"] = {"type": "MemoryError", "message": "", "line": 3}
    body = post(client, forge(forged)).json()
    assert (body["status"], body["limit"]) == ("limit", "memory")
    assert body["error"]["message"].startswith("Line 3 needed more memory than a run may use here")


def test_a_sentence_forged_as_a_name_or_an_op_never_reaches_the_servers_words(client, unseen):
    trace = recorded(FREED)
    nodes = trace["nodes"]
    nodes["op"] = [f"Visit {CLAIM}" if op == "TanhBackward0" else op for op in nodes["op"]]
    for step in trace["steps"]:
        tensors = step.get("tensors") or {}
        tensors["name"] = [CLAIM if n == "w1" else n for n in tensors.get("name") or ()]
        if step.get("error"):
            step["error"]["type"] = f"RuntimeError {CLAIM}"
    body = post(client, forge(trace, build="")).json()
    text = served_text(body)
    assert "evil.example" not in text and "Visit" not in text
    assert "?" in body["nodes"]["op"] and any("refused" in note for note in body["notes"])
    # the rest of the run is kept: the failed call is still explained at its line
    assert [s["kind"] for s in body["steps"]] == [s["kind"] for s in trace["steps"]]


def test_values_a_run_could_not_have_recorded_are_refused_and_the_rest_kept(client, unseen):
    trace = recorded(TRIVIAL)
    last = trace["steps"][-1]["tensors"]
    last["grad"] = [dict(g, values=[CLAIM]) if g else g for g in last["grad"]]
    last["shape"] = [[-1] for _ in last["shape"]]
    body = post(client, forge(trace)).json()
    (grad,) = [g for g in body["steps"][-1]["tensors"]["grad"] if g]
    assert grad["values"] is None and body["steps"][-1]["tensors"]["shape"] == [[]]
    assert "evil.example" not in orjson.dumps(body).decode().split('"code"')[0]


# -- 3b. a fix's run answers only for that fix ---------------------------------------------------


def test_a_forged_proposal_of_another_users_code_is_not_kept_as_its_trace(client):
    victim = TRIVIAL + "print('a victim snippet')\n"
    post(client, forge({}, [proposal(victim)]))  # the server runs it as a fix run, and offers nothing
    assert (
        client.app.state.cache.get_now(fix_run_key(victim, TraceOptions().model_dump(), caps(client))) is None
    )
    with sandbox_runs(client.app) as runs:
        answer = post(client, victim)
    assert answer.headers["x-gradstep-cache"] == "miss" and started(runs, victim)  # a run of its own
    assert answer.json()["stdout"] == "a victim snippet\n"


def test_the_answer_to_apply_fix_is_never_stored_as_the_fixed_codes_own_trace(client):
    fix = post(client, FREED + "# applied\n").json()["diagnoses"][0]["fixes"][0]["code"]
    options = TraceOptions().model_dump()
    assert client.app.state.cache.get_now(fix_run_key(fix, options, caps(client))) is not None
    applied = post(client, fix)
    assert applied.headers["x-gradstep-cache"] == "verified" and applied.json()["status"] == "ok"
    assert client.app.state.cache.get_now(cache_key(fix, options, caps(client))) is None


def test_proposals_planted_in_a_kept_fix_run_are_never_run(client):
    fix = post(client, FREED + "# planted\n").json()["diagnoses"][0]["fixes"][0]["code"]
    key = fix_run_key(fix, TraceOptions().model_dump(), caps(client))
    kept = orjson.loads(decompress(client.app.state.cache.get_now(key)))
    planted = TRIVIAL + "print('planted')\n"
    kept["diagnoses"] = [proposal(planted)]  # what a writer to the shared cache could put there
    client.app.state.cache.put_now(key, compress(orjson.dumps(kept)))
    with sandbox_runs(client.app) as runs:
        applied = post(client, fix)
    assert applied.headers["x-gradstep-cache"] == "verified"
    assert not started(runs, planted)
    assert "FORGED" not in applied.text
    assert any("propose" in r["job"] for r in runs)  # what to run next: the rules' say, in a sandbox


# -- 4. a client that goes away takes its runs with it ----------------------------------------


@pytest.fixture(scope="module")
def patient(guard):
    """A live server whose runs would last minutes (wall 300 s, fixes 300 s): only a disconnect ends them
    soon; capacity 2 (1 worker, 1 queued)."""
    # client_runs: the queue tests queue a second run from the same address
    app = guarded_app(
        guard, uid_base(2300), workers=1, queue=1, wall_seconds=300, fix_budget=300, client_runs=2
    )
    with live_server(app, guard) as base:
        yield app, base


def send_and_hang_up(base: str, code: str, until) -> None:
    """POST ``code``, wait until ``until()`` (the server is busy with it), then close the connection."""
    body = orjson.dumps({"code": code})
    port = int(base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(
            b"POST /api/trace HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        wait_for(until, "the server to start the run")


def test_a_client_that_hangs_up_gives_back_its_place_and_its_run_is_killed(patient):
    app, base = patient
    with sandbox_runs(app) as runs:
        code = SLEEP_FOREVER + "# hang up\n"
        send_and_hang_up(base, code, lambda: started(runs, code))
        wait_for(
            lambda: app.state.admission.inside == 0 and runs[0]["result"], "the place and the run to end"
        )
    assert [r["result"].status for r in runs] == ["cancelled"]  # not the 300 s wall limit
    settle(app.state.runner.sandbox, timeout=30)
    r = httpx.post(f"{base}/api/trace", json={"code": TRIVIAL}, timeout=120, trust_env=False)
    assert r.json()["status"] == "ok"


def test_a_client_that_hangs_up_during_its_fix_runs_stops_them(patient, unseen):
    app, base = patient
    fixes = [SLEEP_FOREVER + f"# fix {i}\n" for i in range(4)]
    with sandbox_runs(app) as runs:
        send_and_hang_up(base, forge({}, [proposal(*fixes)]), lambda: started(runs, fixes[0]))
        wait_for(lambda: app.state.admission.inside == 0, "the place to be given back")
    # the forged run, then the first fix, killed: the other three never started, nor did a check
    assert [(r["job"]["code"], r["result"].status) for r in runs[1:]] == [(fixes[0], "cancelled")]
    settle(app.state.runner.sandbox, timeout=30)


def test_a_queued_request_whose_client_hangs_up_leaves_the_queue(patient):
    app, base = patient
    port = int(base.rsplit(":", 1)[1])
    holds, queues = SLEEP_FOREVER + "# holds the worker\n", SLEEP_FOREVER + "# queued\n"
    body = orjson.dumps({"code": holds})
    request = (
        b"POST /api/trace HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    with sandbox_runs(app) as runs:
        with socket.create_connection(("127.0.0.1", port)) as holder:
            holder.sendall(request)
            wait_for(lambda: started(runs, holds), "the first run")
            send_and_hang_up(base, queues, lambda: started(runs, queues))
            wait_for(lambda: app.state.admission.inside == 1, "the queued request to leave")
            holding, queued = runs
            # the queued one left without a worker, while the first still runs
            assert queued["result"].status == "cancelled" and holding["result"] is None
        wait_for(lambda: app.state.admission.inside == 0, "the holder's run to end when it hung up")
    assert holding["result"].status == "cancelled"
    settle(app.state.runner.sandbox, timeout=30)


# -- 5. slow clients ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def quick(guard):
    """A live server that gives a request 1 s to arrive whole."""
    app = guarded_app(guard, uid_base(2400), workers=1, request_timeout=1.0)
    with live_server(app, guard) as base:
        yield base


def closed_by_server(s: socket.socket) -> bool:
    s.settimeout(60)  # a safety net: the server closes it after 1 s
    try:
        while s.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return True


@pytest.mark.parametrize(
    "sent",
    [
        b"",
        b"POST /api/trace HTTP/1.1\r\nHost: x\r\n",
        b"POST /api/trace HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
    ],
    ids=["nothing", "half-headers", "half-body"],
)
def test_a_connection_that_does_not_send_its_request_whole_is_closed(quick, sent):
    port = int(quick.rsplit(":", 1)[1])
    conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]  # as many as were held
    for c in conns:
        c.sendall(sent)
    assert all(closed_by_server(c) for c in conns)
    for c in conns:
        c.close()
    assert httpx.get(f"{quick}/healthz", timeout=30, trust_env=False).status_code == 200


def test_a_kept_alive_connection_serves_requests_that_take_longer_than_the_timeout(quick):
    # the timeout is the client's, not the app's: a run of ~2 s on a kept-alive connection answers
    with httpx.Client(base_url=quick, timeout=120, trust_env=False) as c:
        for i in range(2):
            r = c.post("/api/trace", json={"code": f"import time\ntime.sleep(2)  # {i}\n"})
            assert r.status_code == 200 and r.json()["status"] == "ok"
