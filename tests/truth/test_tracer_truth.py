"""The tracer agrees with plain PyTorch on every snippet and test case.

Each file in snippets/ and tests/cases/ is run twice: by the tracer
(``gradstep.tracer.record``) and by ``truth.run_plain``, which wraps
torch.autograd.backward/grad and asks torch itself after every call. Every
test compares one behaviour; the messages name the call and the node.

A file that names CUDA is GPU code: the tracer runs it as the sandbox does (``cuda_on_cpu``:
its devices become the CPU), and the plain run is the same code with its devices set to the CPU
by hand (``truth.devices_on_cpu``).

``KNOWN_GAPS`` lists what the tracer gets wrong today, per file and test: those
tests are strict xfails, so the fix that makes one pass also makes the suite
fail until its entry is removed.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import NamedTuple

import orjson
import pytest
import torch
from gradstep.tracer import Limits, record
from testkit import truth

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "snippets").glob("*.py")) + sorted((ROOT / "tests" / "cases").glob("*.py"))
IDS = [f"{p.parent.name}/{p.stem}" for p in FILES]


class Gap(NamedTuple):
    reason: str
    tests: frozenset[str]  # the tests of this file that fail because of it


def _gap(reason: str, *tests: str) -> Gap:
    return Gap(reason, frozenset(tests))


KNOWN_GAPS: dict[str, Gap] = {}


def _traced_and_plain(path: Path) -> tuple[str, Limits, str]:
    """(code the tracer runs, with which limits; code the plain run runs)."""
    code = path.read_text()
    if truth.names_cuda(code):
        return code, Limits(cuda_on_cpu=True), truth.devices_on_cpu(code)
    return code, Limits(), code


@functools.cache
def _runs(path: Path) -> tuple[dict, truth.PlainRun]:
    code, limits, plain_code = _traced_and_plain(path)
    torch.manual_seed(0)
    trace = record(code, limits)
    plain = truth.run_plain(plain_code, seed=0)
    return trace, plain


@functools.cache
def _seq_counts(path: Path) -> tuple[int, int, int]:
    """Sequence numbers consumed by a bare exec, by the truth recorder, by the tracer."""
    code, limits, plain_code = _traced_and_plain(path)
    bare = truth.seq_used_bare(plain_code)
    plain = truth.run_plain(plain_code).seq_used
    torch.manual_seed(0)
    before = torch._C._autograd._get_sequence_nr()
    record(code, limits)
    traced = torch._C._autograd._get_sequence_nr() - before
    return bare, plain, traced


@pytest.fixture(params=FILES, ids=IDS)
def path(request) -> Path:
    """A snippet or case file; a known gap of the tracer makes the test a strict xfail."""
    gap = KNOWN_GAPS.get(f"{request.param.parent.name}/{request.param.stem}")
    if gap is not None and request.node.originalname in gap.tests:
        request.applymarker(pytest.mark.xfail(reason=gap.reason, strict=True))
    return request.param


@pytest.fixture
def runs(path: Path) -> tuple[dict, truth.PlainRun]:
    return _runs(path)


def _assert_none(mismatches: list[str]) -> None:
    assert not mismatches, "\n".join(mismatches)


def test_files_found():
    assert any(p.parent.name == "cases" for p in FILES)


def test_truth_recorder_creates_no_autograd_nodes(path):
    bare, plain, _ = _seq_counts(path)
    assert plain == bare


def test_tracer_creates_no_autograd_nodes_of_its_own(path):
    """Node seqs match plain torch only if the tracer's own work builds no nodes."""
    bare, _, traced = _seq_counts(path)
    assert traced == bare, f"the tracer consumed {traced - bare} extra autograd sequence numbers"


def test_trace_validates_against_schema(runs):
    from gradstep.trace_dicts import typed

    trace, _ = runs
    typed(trace)


def test_the_server_refuses_no_fact_the_tracer_wrote(runs):
    """gradstep.meaning holds a child's facts to what the tracer writes: it writes nothing else."""
    from gradstep.columns import pack
    from gradstep.meaning import check_meaning

    trace, _ = runs
    wire = orjson.loads(orjson.dumps(pack(trace), default=repr))
    before = orjson.dumps(wire)
    assert check_meaning(wire) == 0 and orjson.dumps(wire) == before


def test_one_step_per_backward_or_grad_call_with_its_api(runs):
    _assert_none(truth.compare_calls(*runs))


def test_call_steps_point_at_the_calling_line(runs):
    _assert_none(truth.compare_lines(*runs))


def test_call_errors_match_torch(runs):
    _assert_none(truth.compare_errors(*runs))


def test_grads_after_each_call_match_torch(runs):
    _assert_none(truth.compare_grads(*runs))


def test_autograd_grad_returns_match_torch(runs):
    _assert_none(truth.compare_returned(*runs))


def test_freed_flags_match_saved_tensor_access(runs):
    _assert_none(truth.compare_freed(*runs))


def test_stale_flags_match_saved_tensor_access(runs):
    _assert_none(truth.compare_stale(*runs))


def test_executed_nodes_follow_engine_order(runs):
    _assert_none(truth.compare_order(*runs))


def test_failing_call_marks_the_node_it_stopped_in(runs):
    _assert_none(truth.compare_failed(*runs))


def test_snippet_status_and_error_match_torch(runs):
    _assert_none(truth.compare_status(*runs))


def test_stdout_matches_plain_run(runs):
    trace, plain = runs
    assert trace.get("stdout", "") == plain.stdout


def test_tracing_never_stops(runs):
    """The tracer says what it cannot read and keeps going; it never gives up on the rest of a run."""
    trace, _ = runs
    stopped = [n for n in trace.get("notes", []) if n.startswith("Tracing stopped")]
    assert not stopped, stopped
