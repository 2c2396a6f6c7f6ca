"""The command line: ``gradstep trace FILE.py`` runs the snippet in a child process.

Every test runs the real console script (or ``python -m gradstep``) as a
subprocess. All of them are started together when the module's tests begin
(each one imports torch, which is most of its time) and each test waits for
its own. Subprocess timeouts are generous safety nets, never asserts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from gradstep.schema import Trace
from gradstep.tracer import record

GRADSTEP = Path(sys.executable).with_name("gradstep")  # the console script of this venv
SAFETY = 120  # seconds: only so a hung child cannot hang the suite

SNIPPET = textwrap.dedent(
    """\
    import torch
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    print("start")
    y = (x * 2).exp()
    loss = y.sum()
    loss.backward(retain_graph=True)
    g, = torch.autograd.grad(loss, x)
    """
)

FAILING = textwrap.dedent(
    """\
    import torch
    x = torch.ones(3, requires_grad=True)
    y = x * 2
    y.backward()
    """
)


class _Child:
    """A command started now; ``result()`` waits for it."""

    def __init__(self, args: list[str]):
        self.args = args
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.done: subprocess.CompletedProcess | None = None

    def result(self) -> subprocess.CompletedProcess:
        if self.done is None:
            try:
                out, err = self.proc.communicate(timeout=SAFETY)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()
                raise
            self.done = subprocess.CompletedProcess(self.args, self.proc.returncode, out, err)
        return self.done


def _shape(trace: dict) -> list[tuple]:
    return [(s["kind"], s.get("line"), s.get("repeat", 1), s.get("api")) for s in trace["steps"]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    files = {"snippet": SNIPPET, "failing": FAILING, "endless": "while True:\n    pass\n"}
    for name, code in files.items():
        (tmp / f"{name}.py").write_text(code)
    children = {
        "snippet": _Child([str(GRADSTEP), "trace", str(tmp / "snippet.py")]),
        "pretty": _Child([str(GRADSTEP), "trace", str(tmp / "snippet.py"), "--pretty"]),
        "module": _Child([sys.executable, "-m", "gradstep", "trace", str(tmp / "snippet.py")]),
        "failing": _Child([str(GRADSTEP), "trace", str(tmp / "failing.py")]),
        "timeout": _Child([str(GRADSTEP), "trace", str(tmp / "endless.py"), "--timeout", "1"]),
        "missing": _Child([str(GRADSTEP), "trace", str(tmp / "nope.py")]),
    }
    yield {name: child.result for name, child in children.items()}
    for child in children.values():
        if child.proc.poll() is None:
            child.proc.kill()
            child.proc.communicate()


def test_console_script_exists():
    assert GRADSTEP.is_file()


def test_trace_prints_a_valid_trace(runs):
    done = runs["snippet"]()
    assert done.returncode == 0, done.stderr
    trace = json.loads(done.stdout)
    Trace.model_validate(trace)
    assert trace["status"] == "ok"
    assert trace["code"] == SNIPPET


def test_trace_steps_match_in_process_record(runs):
    trace = json.loads(runs["snippet"]().stdout)
    expected = record(SNIPPET)
    assert expected["steps"]
    assert _shape(trace) == _shape(expected)
    assert trace["stdout"] == expected["stdout"]


def test_pretty_prints_the_same_trace_indented(runs):
    done = runs["pretty"]()
    assert done.returncode == 0, done.stderr
    assert "\n  " in done.stdout
    assert _shape(json.loads(done.stdout)) == _shape(json.loads(runs["snippet"]().stdout))


def test_failing_snippet_exits_zero_with_error_status(runs):
    expected = record(FAILING)
    assert expected["status"] == "error"
    done = runs["failing"]()
    assert done.returncode == 0, done.stderr
    trace = json.loads(done.stdout)
    assert trace["status"] == "error"
    assert trace["error"]["type"] == expected["error"]["type"]
    assert trace["error"]["message"] == expected["error"]["message"]
    assert trace["error"]["line"] == expected["error"]["line"]


def test_missing_file_exits_two_with_message_on_stderr(runs):
    done = runs["missing"]()
    assert done.returncode == 2
    assert done.stdout == ""
    assert "nope.py" in done.stderr


def test_timeout_stops_an_endless_snippet(runs):
    done = runs["timeout"]()
    assert done.returncode == 0, done.stderr
    trace = json.loads(done.stdout)
    # the tracer stops the code itself short of --timeout, keeping what ran (docs: Status); a run
    # killed at the limit itself (a long call into torch) would be `timeout`
    assert (trace["status"], trace["limit"]) in {("limit", "wall"), ("timeout", None)}
    if trace["status"] == "limit":
        assert trace["error"]["line"] in (1, 2)  # where it stopped: in the loop
    # what raises the limit here is the command's option (it overrides GRADSTEP_WALL_SECONDS)
    assert "a larger --timeout" in trace["error"]["message"]
    Trace.model_validate(trace)


def test_python_dash_m_gradstep_trace_works(runs):
    done = runs["module"]()
    assert done.returncode == 0, done.stderr
    assert _shape(json.loads(done.stdout)) == _shape(json.loads(runs["snippet"]().stdout))
