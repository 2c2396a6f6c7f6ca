"""The child's bytes checked off the server's GIL (server/gradstep/checker.py): what is served is
what was validated, parsed alike by the checker and a browser's JSON.parse; the server's fields
always win; a checker process that dies costs one run a clear failure, not the server."""

from __future__ import annotations

import gzip
import os
import shutil
import signal
import subprocess

import brotli
import orjson
import pytest
import torch
from gradstep import checker, jobs
from gradstep.checker import CHECKER_DIED, NOT_JSON, CheckerPool
from gradstep.checker import check as check_with
from gradstep.columns import rows_of
from gradstep.encoding import Encoded, decompress, with_gzip
from gradstep.narrate import narrate
from gradstep.runs import payload_for, served_fields
from gradstep.schema import SERVER_FIELDS
from gradstep.voice import Observed

SMALL = "import torch\nx = torch.ones(3, requires_grad=True)\n(x * 2).sum().backward()\n"
# a trace past INLINE_BYTES: it goes to the checker processes
BIG = "import torch\nx = torch.ones(64, requires_grad=True)\nfor i in range(60):\n    (x * i).sum().backward()\n"
FIELDS = served_fields(SMALL)
NODE = shutil.which("node")
SEEN = Observed()  # what the runner saw: nothing here (no run of the sandbox)
NARRATION = ("explanation", "links")


def check(raw: bytes, fields: dict, encode: bool = True) -> checker.Checked:
    return check_with(raw, fields, SEEN, encode)


def facts(trace: dict) -> dict:
    """A trace's rows without its narration and notes (the server's sentences): the child's facts."""
    rows = {k: v for k, v in rows_of(trace).items() if k != "notes"}
    rows["steps"] = [{k: v for k, v in step.items() if k not in NARRATION} for step in rows["steps"]]
    return rows


def served_json(stored: bytes) -> dict:
    """The stored trace as a reader reads it (its tables as rows)."""
    made = Encoded.unpack(with_gzip(stored))  # the gzip a gzip-only client gets: the same JSON
    assert gzip.decompress(made.gzip) == brotli.decompress(made.br) == decompress(stored)
    return rows_of(orjson.loads(decompress(stored)))


def test_the_childs_facts_are_served_with_the_servers_fields_and_narration_and_nothing_else_changed():
    raw = jobs.run(payload_for(SMALL))
    child = orjson.loads(raw)
    assert not set(child) & set(SERVER_FIELDS)  # the child leaves them to the server...
    assert not any(k in step for step in child["steps"] for k in NARRATION)  # ...and every sentence
    checked = check(raw, FIELDS)
    assert checked.problem is None and not checked.proposed
    served = served_json(checked.stored)
    assert facts(served) == facts({**child, **FIELDS})
    told = narrate(rows_of({**child, **FIELDS}))  # the server's narration of those facts
    assert [s["explanation"] for s in served["steps"]] == [s["explanation"] for s in told["steps"]]
    assert all(s["explanation"] for s in served["steps"])
    x = torch.ones(3, requires_grad=True)
    (x * 2).sum().backward()
    (last,) = [t for t in served_json(checked.stored)["steps"][-1]["tensors"] if t["name"] == "x"]
    assert last["grad"]["values"] == x.grad.tolist()


@pytest.mark.parametrize("field", SERVER_FIELDS)
def test_a_server_field_the_child_wrote_is_overwritten(field):
    forged = orjson.loads(jobs.run(payload_for(SMALL)))
    forged[field] = {"version": 99, "reaches": [{"line": 1, "what": "forged"}]}.get(field, "forged")
    for raw in (
        orjson.dumps(forged),
        orjson.dumps({field: forged[field]})[:-1] + b"," + orjson.dumps(forged)[1:],
    ):
        served = served_json(check(raw, FIELDS).stored)
        assert {k: served[k] for k in SERVER_FIELDS} == FIELDS


@pytest.mark.parametrize(
    "raw, problem",
    [
        (b"not json", NOT_JSON),
        (b'{"status": "ok"} trailing', NOT_JSON),
        (b'{"status": "ok", "stdout": "\\ud800"}', NOT_JSON),  # a lone surrogate: JSON.parse would take it
        (b'{"status": "ok", "steps": [], "steps": "not a list"}', "not a trace"),  # the last one counts
        (b'{"status": "ok", "nodes": [{"id": 1e999}]}', NOT_JSON),  # JSON.parse would read Infinity
        (b'{"status": "sure"}', "not a trace"),
        (b"[]", "not a trace"),
    ],
)
def test_bytes_that_are_not_a_trace_are_refused_before_anything_is_served(raw, problem):
    checked = check(raw, FIELDS)
    assert checked.stored is None and problem in (checked.problem or "")


def test_a_big_trace_is_refused_or_mended_alike():
    # past INLINE_BYTES (checked in a checker process in a server) what fails the check is still
    # never served, and a forged server field is still overwritten
    trace = orjson.loads(jobs.run(payload_for(BIG)))
    raw = orjson.dumps(trace)
    assert len(raw) > checker.INLINE_BYTES
    for bad, problem in (
        (raw + b" trailing", NOT_JSON),
        (orjson.dumps({**trace, "status": "sure"}), "not a trace"),
        (raw[:-1] + b',"steps":"not a list"}', "not a trace"),
    ):
        checked = check(bad, FIELDS)
        assert checked.stored is None and problem in (checked.problem or "")
    served = served_json(check(orjson.dumps({**trace, "code": "forged"}), FIELDS).stored)
    assert {k: served[k] for k in SERVER_FIELDS} == FIELDS
    assert facts(served_json(check(raw, FIELDS).stored)) == facts({**trace, **FIELDS})


def test_a_trace_that_proposes_diagnoses_is_left_to_the_server_to_verify():
    raw = orjson.dumps({"status": "ok", "diagnoses": [{"kind": "k", "severity": "error", "message": "m"}]})
    checked = check(raw, FIELDS)
    assert checked.proposed and checked.stored is None
    assert orjson.loads(checked.body) == {
        "status": "ok",
        "diagnoses": orjson.loads(raw)["diagnoses"],
        **FIELDS,
        "notes": [],  # the server's: none for these facts
    }


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_a_browser_parses_what_the_checker_validated():
    """Duplicate keys, escapes, whitespace, numbers: JSON.parse reads the served text as the
    checker's parse did, so what passed the check is what the page gets. (Integers past 2**53
    read as the nearest double in any browser, as they did when the server re-serialized.)"""
    tricky = [
        b'{"status": "error", "status": "ok", "stdout": "a\\u0000b\\u2028\\"\\ud83d\\ude00"}',
        b'{ "status":"ok" ,"truncated":[] , "truncated" : ["steps"], "limit": null}\n',
        b'{"status": "ok", "error": {"type": "E", "message": "m", "line": 9007199254740991}}',
        b'{"status": "ok", "warnings": [{"message": "w", "category": "UserWarning", "line": -0}]}',
    ]
    served, expected = [], []
    for raw in tricky:
        checked = check(raw, FIELDS)
        assert checked.problem is None, (raw, checked.problem)
        served.append(decompress(checked.stored).decode())
        expected.append({**orjson.loads(raw), **FIELDS, "notes": []})  # notes: the server's (none here)
    script = "const lines = require('fs').readFileSync(0, 'utf8').split('\\n\\u0000\\n');\n"
    script += "process.stdout.write(JSON.stringify(lines.map((l) => JSON.parse(l))));\n"
    out = subprocess.run(
        [NODE, "-e", script], input="\n\0\n".join(served), capture_output=True, text=True, check=True
    )
    assert orjson.loads(out.stdout) == orjson.loads(orjson.dumps(expected))


def test_a_big_trace_is_checked_in_a_checker_process_as_it_would_be_here():
    """A checker process checks it: what fails is still never served,
    a forged server field is still overwritten, and what passes is served as the inline check does."""
    trace = orjson.loads(jobs.run(payload_for(BIG)))
    raw = orjson.dumps(trace)
    assert len(raw) > checker.INLINE_BYTES
    pool = CheckerPool(1)
    pool.start()
    try:
        pooled = pool.check(raw, served_fields(BIG), SEEN)
        for bad, problem in (
            (raw + b" trailing", NOT_JSON),
            (orjson.dumps({**trace, "status": "sure"}), "not a trace"),
        ):
            refused = pool.check(bad, FIELDS, SEEN)
            assert refused.stored is None and problem in (refused.problem or "")
        forged = pool.check(orjson.dumps({**trace, "code": "forged"}), FIELDS, SEEN)
        diagnoses = [{"kind": "k", "severity": "error", "message": "m"}]
        proposing = pool.check(orjson.dumps({**trace, "diagnoses": diagnoses}), FIELDS, SEEN)
    finally:
        pool.close()
    assert pooled.problem is None
    assert served_json(pooled.stored) == served_json(check(raw, served_fields(BIG)).stored)
    served = served_json(forged.stored)
    assert {k: served[k] for k in SERVER_FIELDS} == FIELDS
    assert proposing.proposed and orjson.loads(proposing.body)["diagnoses"] == diagnoses


def test_without_checker_processes_a_big_trace_is_checked_inline():
    """What the CLI uses (one run, no server to keep responsive): no process, and no wait for one."""
    raw = jobs.run(payload_for(BIG))
    pool = CheckerPool(0)
    pool.start()
    try:
        checked = pool.check(raw, served_fields(BIG), SEEN)
        assert served_json(checked.stored) == served_json(check(raw, served_fields(BIG)).stored)
        padded = {"status": "ok", "stdout": "x" * 100_000}
        assert served_json(pool.compress(orjson.dumps(padded))) == padded
    finally:
        pool.close()


def test_a_checker_process_that_dies_fails_its_run_and_the_next_run_gets_a_new_one():
    raw = jobs.run(payload_for(BIG))
    pool = CheckerPool(1)
    pool.start()
    try:
        for process in list(pool._idle.queue):  # killed as the OOM killer would
            os.kill(process.proc.pid, signal.SIGKILL)
        assert pool.check(raw, FIELDS, SEEN) == checker.Checked(CHECKER_DIED)
        assert pool.health() == {"processes": 1, "died": 1}  # what /healthz says
        again = pool.check(raw, served_fields(BIG), SEEN)
        assert again.problem is None and served_json(again.stored)["code"] == BIG
    finally:
        pool.close()


@pytest.mark.parametrize(
    "trace",
    [
        {"status": "limit"},  # a limit with no error
        {"status": "limit", "limit": "cpu", "error": {"type": "limit", "message": "m"}, "steps": []},
        {"status": "ok", "steps": [{"index": 5, "kind": "backward", "nodes": {"id": [7, -1]}}]},
        {
            "status": "ok",
            "nodes": {"op": ["A B"], "step": [0], "next": [[3]]},
            "steps": [{"index": 0, "kind": "forward"}],
        },
        {
            "status": "error",
            "error": {"type": "", "message": ""},
            "uses": [{"kind": "missing_file", "name": ""}],
        },
        {
            "status": "ok",
            "steps": [{"index": 0, "kind": "update", "update": {"op": "step", "params": [{"name": ""}]}}],
        },
    ],
)
def test_a_trace_the_contract_allows_but_no_tracer_writes_is_served_or_refused_never_a_crash(trace):
    checked = check(orjson.dumps(trace), FIELDS)
    assert checked.problem is not None or served_json(checked.stored)["code"] == SMALL
