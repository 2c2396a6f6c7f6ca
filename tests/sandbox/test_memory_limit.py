"""A model too big for a run's memory: the run ends as ``status=limit`` with the graph it recorded
until then, says which limit stopped it and its value, and what to do (a smaller width,
gradstep.record() in one's own process, the deployment's setting). A run the memory cgroup kills
outright says the same, with nothing recorded. Both through the server's runner, in a guard."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest
from gradstep import encoding
from gradstep.runs import TraceRunner, sandbox_config
from gradstep.sandbox import Sandbox
from gradstep.sandbox.config import data_mb
from gradstep.settings import Settings
from gradstep.tracer import record
from testkit.real_models import catalog
from testkit.sandbox_guard import guard_fixture, guard_unavailable, uid_base

pytestmark = pytest.mark.skipif(guard_unavailable() is not None, reason=str(guard_unavailable()))

MEMORY_MB = 600  # a 12-layer GPT at GPT-2-small width needs ~750 MB: its backward's gradients do not fit
GPT2_WIDTH = catalog.gpt(12, d=768)

guard = guard_fixture(memory_mb=4096, pids=300)


@pytest.fixture(scope="module")
def runner(guard):
    settings = Settings(
        workers=1,
        extra_slots=1,
        rate=0,
        memory_mb=MEMORY_MB,
        cpu_seconds=30,
        wall_seconds=60,
        uid_base=uid_base(2350),
    )
    r = TraceRunner(settings, Sandbox(sandbox_config(settings, cgroup_parent=guard.parent)))
    r.start()
    guard.hold(r.health()["zygote_pid"])
    yield r
    r.close()


def traced(runner: TraceRunner, code: str) -> dict:
    return orjson.loads(encoding.decompress(runner.trace(code).stored))


@pytest.fixture(scope="module")
def stopped(runner):
    return traced(runner, GPT2_WIDTH)


def plain_failing_line(code: str, memory_mb: int) -> int | None:
    """The line at which plain torch, in a process allowed the same data as a run, fails to allocate."""
    probe = f"""
import resource, sys, traceback
import torch
torch.set_num_threads(1)
data = [int(l.split()[1]) << 10 for l in open('/proc/self/status') if l.startswith('VmData:')][0]
limit = data + {data_mb(memory_mb)} * 2**20
resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
try:
    exec(compile(sys.stdin.read(), "<snippet>", "exec"), {{}})
except (MemoryError, RuntimeError) as e:
    print([f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == "<snippet>"][-1])
"""
    out = subprocess.run(
        [sys.executable, "-c", probe], input=code, capture_output=True, text=True, timeout=300
    )
    return int(out.stdout) if out.stdout.strip() else None


def test_a_model_too_big_for_the_memory_limit_ends_as_a_limit_naming_memory_and_its_value(stopped):
    assert (stopped["status"], stopped["limit"]) == ("limit", "memory")
    assert f"{MEMORY_MB} MB of memory" in stopped["error"]["message"]


def test_it_stops_at_the_line_where_plain_torch_runs_out_under_the_same_limit(stopped):
    assert stopped["error"]["line"] == plain_failing_line(GPT2_WIDTH, MEMORY_MB)


def test_it_keeps_the_steps_recorded_before_the_limit_as_a_full_run_records_them(stopped):
    whole = record(GPT2_WIDTH)  # no limit here: the whole run
    line = stopped["error"]["line"]
    before = [(s["kind"], s["line"]) for s in whole["steps"] if s["line"] != line]
    kept = [(s["kind"], s["line"]) for s in stopped["steps"] if s["line"] != line]
    assert len(kept) > 10 and kept == before[: len(kept)]
    assert kept == [(k, n) for k, n in before if k == "forward"]  # every forward step, up to the backward
    nodes = len(stopped["nodes"]["op"])
    assert nodes == len(whole["nodes"]) and stopped["nodes"]["op"] == [n["op"] for n in whole["nodes"]]


def test_its_message_says_what_to_do(stopped):
    message = stopped["error"]["message"]
    assert "smaller width" in message
    assert "3072×768" in message  # the largest tensors a smaller width shrinks: the MLP's weights
    assert "gradstep.record()" in message and "GRADSTEP_MEMORY_MB" in message


def test_a_run_the_memory_cgroup_kills_says_which_limit_its_value_and_what_to_do(runner):
    # shared mappings are not data: only the cgroup stops this one, and nothing of the run is kept
    code = "import mmap\nm = mmap.mmap(-1, 2**31)\nfor i in range(0, 2**31, 4096):\n    m[i] = 1\n"
    trace = traced(runner, code)
    assert (trace["status"], trace["limit"]) == ("limit", "memory")
    message = trace["error"]["message"]
    assert f"{MEMORY_MB} MB" in message and "GRADSTEP_MEMORY_MB" in message and "gradstep.record()" in message


def test_a_bomb_that_writes_every_page_is_refused_by_the_data_limit(runner):
    # every page written (bytearray zeroes its memory): RLIMIT_DATA refuses the allocation before the
    # cgroup's kill, and the runner's CPU limit (30 s) is far beyond what writing 600 MB costs
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 2**20))\n"
    trace = traced(runner, code)
    assert (trace["status"], trace["limit"], trace["error"]["type"]) == ("limit", "memory", "MemoryError")
    assert trace["error"]["line"] == 3 and f"{MEMORY_MB} MB of memory" in trace["error"]["message"]


def test_the_data_limit_leaves_room_below_the_cgroup():
    for mb in (128, 512, 1024, 8192):
        assert 0 < data_mb(mb) <= mb - 32


# -- CPU time: the run stops itself short of RLIMIT_CPU, with what it recorded --------------------

BUSY_AFTER_A_GRAPH = """\
import torch
torch.manual_seed(0)
w = torch.randn(4, 3, requires_grad=True)
h = (w * 2).tanh()
loss = h.sum()
loss.backward()
while True:
    pass
"""


SLEEPS_AFTER_A_GRAPH = BUSY_AFTER_A_GRAPH.replace(
    "while True:\n    pass\n", "import time\nwhile True:\n    time.sleep(0.05)\n"
)

# limit -> (the runner's settings, code that runs into it after a graph, where that code's endless
# part starts, what the message must say)
SELF_STOPS = {
    "cpu": (
        dict(cpu_seconds=2, wall_seconds=30, uid_base=uid_base(2360)),
        BUSY_AFTER_A_GRAPH,
        "while True",
        ["of its 2 s of CPU time", "GRADSTEP_CPU_SECONDS", "gradstep.record()", "fewer iterations"],
    ),
    "wall": (
        dict(wall_seconds=3, uid_base=uid_base(2370)),
        SLEEPS_AFTER_A_GRAPH,
        "import time",
        [
            "of its 3 s of wall-clock time",
            "GRADSTEP_WALL_SECONDS",
            "with the gradstep command, a larger --timeout",
        ],
    ),
}


@pytest.mark.parametrize("limit", SELF_STOPS)
def test_a_run_near_its_limit_stops_itself_with_the_steps_it_recorded(guard, limit):
    options, code, endless, words = SELF_STOPS[limit]
    settings = Settings(workers=1, extra_slots=1, rate=0, **options)
    r = TraceRunner(settings, Sandbox(sandbox_config(settings, cgroup_parent=guard.parent)))
    r.start()
    try:
        guard.hold(r.health()["zygote_pid"])
        trace = traced(r, code)
    finally:
        r.close()
    assert (trace["status"], trace["limit"]) == ("limit", limit)
    before = record(code.split(endless)[0])  # the same code up to its endless part, whole
    kept = [(s["kind"], s["line"]) for s in trace["steps"] if s["kind"] != "error"]
    assert kept == [(s["kind"], s["line"]) for s in before["steps"]]
    grads = trace["steps"][len(kept) - 1]["tensors"]
    assert (
        grads["name"][0] == "w"
        and grads["grad"][0]["values"] == before["steps"][-1]["tensors"][0]["grad"]["values"]
    )
    for word in words:
        assert word in trace["error"]["message"]
