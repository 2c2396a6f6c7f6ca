"""A run's spec (gradstep.runspec) is the one source of what a run is made under: the server's caps
from its settings and the request's options, modelled once, sent whole with every job the request
causes (its run, its fix runs, their check), and each cap reaching the place that enforces it."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import typing
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from gradstep import jobs
from gradstep.checker import CheckerPool
from gradstep.columns import unpack
from gradstep.encoding import decompress
from gradstep.routes.trace import TraceRequest
from gradstep.runs import TraceRunner, payload_for, sandbox_config
from gradstep.runspec import LIMITS_FIELDS, SANDBOX_FIELDS, SERVER_USED, RunSpec, TraceOptions
from gradstep.sandbox import RunResult
from gradstep.settings import Settings
from gradstep.tracer.limits import Limits

FREED = (Path(__file__).resolve().parents[2] / "snippets" / "shared_trunk_partial_grads.py").read_text()

LINES = "import torch\nx = torch.ones(2, requires_grad=True)\n" + "x = x * 2\n" * 8


def test_the_request_the_job_and_the_tracer_share_one_model_of_run_options():
    assert typing.get_type_hints(TraceRequest)["options"] == TraceOptions | None
    assert typing.get_type_hints(RunSpec)["options"] is TraceOptions  # the job's: Job.spec.options
    assert set(TraceOptions.model_fields) <= LIMITS_FIELDS
    defaults = Limits()
    assert TraceOptions().model_dump() == {
        name: getattr(defaults, name) for name in TraceOptions.model_fields
    }


def test_every_cap_is_a_setting_of_its_type_and_reaches_where_it_is_enforced():
    settings = {f.name: f for f in dataclasses.fields(Settings)}
    hints = typing.get_type_hints(RunSpec)
    for name in RunSpec.cap_names():
        assert name in settings, f"{name}: a cap with no setting"
        assert settings[name].type in (hints[name], hints[name].__name__), name
        assert name in LIMITS_FIELDS | SANDBOX_FIELDS | SERVER_USED, f"{name}: a cap nothing applies"


def test_the_sandbox_is_made_with_the_specs_caps():
    settings = Settings(wall_seconds=7.5, cpu_seconds=4, memory_mb=700)
    config = sandbox_config(settings)
    assert (config.wall_seconds, config.cpu_seconds, config.memory_mb) == (7.5, 4, 700)


def test_the_child_traces_under_the_options_of_its_spec():
    whole = unpack(orjson.loads(jobs.run(payload_for(LINES))))
    cut = unpack(orjson.loads(jobs.run(payload_for(LINES, {"max_steps": 3}))))
    assert len(whole["steps"]) > 3 and not whole["truncated"]
    assert len(cut["steps"]) == 3 and cut["truncated"]


def test_a_request_with_an_unknown_option_is_refused():
    with pytest.raises(ValueError, match="extra"):
        Settings().run_spec().with_options({"max_stdout": 10})


class _Forking:
    """A sandbox without confinement: each job runs in a child forked from this process (a job
    lowers its process's CPU limit, and sets signal handlers), and its payload is kept."""

    def __init__(self):
        self.payloads: list[dict] = []

    def run(self, payload: str, deadline=None, cancel=None) -> RunResult:
        self.payloads.append(orjson.loads(payload))
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: the job's output down the pipe, then gone without cleanup
            try:
                with os.fdopen(write, "wb") as out:
                    out.write(jobs.run(payload))
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as out:
            output = out.read()
        _, status = os.waitpid(pid, 0)
        return RunResult("ok" if status == 0 and output else "crashed", output)

    @contextlib.contextmanager
    def running(self, payload: str, deadline=None, cancel=None) -> Iterator[RunResult]:
        yield self.run(payload, deadline, cancel)

    @contextlib.contextmanager
    def spares_held(self):
        yield


def test_a_run_its_fix_runs_and_their_check_are_all_sent_the_requests_spec():
    settings = Settings(workers=2, cpu_seconds=9, wall_seconds=14.0, memory_mb=900, fix_budget=8.0)
    sandbox = _Forking()
    runner = TraceRunner(settings, sandbox=sandbox, checker=CheckerPool(0))
    options = {"max_steps": 400, "line_repeats": 2}
    traced = runner.trace(FREED, options)
    kinds = [next(k for k in ("check", "propose", "code") if k in p) for p in sandbox.payloads]
    assert kinds.count("code") >= 2 and "check" in kinds  # the run and a fix run, then their check
    assert traced.fix_runs
    expected = settings.run_spec().with_options(options).model_dump()
    assert all(p["spec"] == expected for p in sandbox.payloads)
    sandbox.payloads.clear()
    fix = next(iter(traced.fix_runs))
    runner.trace(fix, options, verified=decompress(traced.fix_runs[fix]))  # Apply fix: a propose job
    assert [p["spec"] for p in sandbox.payloads if "propose" in p] == [expected]


def test_the_readme_names_every_cap_in_the_cache_key():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    sentence = readme.split("every cap of the run spec", 1)[1].split("never serve each other's traces", 1)[0]
    named = {
        name.lstrip("_").removeprefix("GRADSTEP_").lower() for name in sentence.split("`") if name.isupper()
    }
    assert named == set(RunSpec.cap_names())
