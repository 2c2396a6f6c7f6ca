"""The rule registry is the one list of rules and kinds: every rule module is in it, the docs list
its kinds, its snippets exist; a crashing rule fails tests loudly and costs a user nothing; the
shared pieces rules use (toolkit.py, Source's block edits) do what they say."""

from __future__ import annotations

import ast
import logging
import pkgutil
import re
import subprocess
import sys
import textwrap
from importlib import import_module
from pathlib import Path

import gradstep.diagnose
import pytest
from gradstep.diagnose import find, registry, toolkit
from gradstep.diagnose.candidate import Candidate
from gradstep.diagnose.source import Source
from gradstep.pipeline import in_process
from gradstep.tracer import record

ROOT = Path(__file__).resolve().parents[2]


def rule_modules() -> list[str]:
    """The package's modules that are rules: they declare a kind and find it."""
    out = []
    for info in pkgutil.iter_modules(gradstep.diagnose.__path__):
        module = import_module(f"gradstep.diagnose.{info.name}")
        if hasattr(module, "KIND") and callable(getattr(module, "find", None)):
            out.append(info.name)
    return out


def test_every_rule_module_is_registered_once():
    assert sorted(registry.NAMES) == sorted(rule_modules())
    assert len(set(registry.NAMES)) == len(registry.NAMES)


def test_kinds_are_distinct():
    assert len(set(registry.KINDS)) == len(registry.KINDS)


def test_the_docs_list_the_registered_kinds():
    text = (ROOT / "docs" / "trace-format.md").read_text()
    # written by `make schema` (tests/trace/trace_copies.py), which tests/trace/test_trace_copies.py checks
    listed = text.split("<!-- generated: diagnosis kinds", 1)[1].split("<!-- /generated: diagnosis kinds", 1)[
        0
    ]
    assert re.findall(r"^- `([a-z0-9_]+)`", listed, re.M) == list(registry.KINDS)


def test_every_snippet_a_rule_names_exists():
    for rule in registry.RULES:
        for name in getattr(rule, "SNIPPETS", ()):
            assert (ROOT / "snippets" / f"{name}.py").is_file(), f"{rule.__name__}: no snippet {name}"


def test_diagnose_does_not_import_the_pipeline():
    # the layers point one way: pipeline -> diagnose (a fix is run by the pipeline, not by the rules)
    code = "import sys, gradstep.diagnose; print('gradstep.pipeline' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------- a rule that crashes

FREED = "import torch\nx = torch.ones(2, requires_grad=True)\ny = (x * x).sum()\ny.backward()\ny.backward()\n"


class Broken(Exception):
    pass


def broken_find(trace: dict, src: Source) -> list[Candidate]:
    raise Broken("this rule trips on every snippet")


def test_a_crashing_rule_fails_tests_with_its_own_error(monkeypatch):
    monkeypatch.setattr(registry.RULES[0], "find", broken_find)
    with pytest.raises(Broken):
        find(record(FREED))


def test_in_production_a_crashing_rule_is_skipped_and_logged_once(monkeypatch, caplog):
    monkeypatch.setattr(gradstep.diagnose, "STRICT", False)
    monkeypatch.setattr(gradstep.diagnose, "_logged", set())
    monkeypatch.setattr(registry.RULES[0], "find", broken_find)
    trace = record(FREED)
    with caplog.at_level(logging.ERROR, logger="gradstep.diagnose"):
        first, second = find(trace), find(trace)
    assert [c.kind for c in first] == [c.kind for c in second] == ["backward_through_freed_graph"]
    logged = [r for r in caplog.records if "Broken" in (r.exc_text or "") or r.exc_info]
    assert len(logged) == 1, caplog.records


def test_in_production_a_crash_in_diagnosing_leaves_the_trace_with_a_note(monkeypatch):
    monkeypatch.setattr(gradstep.diagnose, "STRICT", False)

    def broken(trace, run):
        raise Broken("diagnosing failed")

    monkeypatch.setattr(gradstep.diagnose, "diagnose", broken)
    trace = in_process(FREED)
    assert trace["status"] == "error"
    assert any("No diagnoses for this trace: Broken" in note for note in trace["notes"])


# ---------------------------------------------------------------- the toolkit


def trace_with_call_lines(lines: list[int | None], failed: set[int] = frozenset()) -> dict:
    steps = [
        {"kind": "backward", "line": line, "error": {"message": "x"} if line in failed else None}
        for line in lines
    ]
    return {"steps": steps}


def test_call_lines_are_each_line_once_in_the_order_first_run():
    assert toolkit.call_lines(trace_with_call_lines([5, 3, 5, 7, 3])) == [5, 3, 7]


def test_call_lines_can_leave_out_calls_that_failed():
    assert toolkit.call_lines(trace_with_call_lines([5, 3, 5], failed={3}), ran=True) == [5]


def test_call_lines_are_capped():
    many = list(range(1, 3 * toolkit.MAX_CALL_LINES))
    assert toolkit.call_lines(trace_with_call_lines(many)) == many[: toolkit.MAX_CALL_LINES]


def test_calls_failing_with_a_mark_are_only_those():
    trace = {
        "steps": [
            {"kind": "backward", "line": 1, "error": {"message": "a second time, boom"}},
            {"kind": "backward", "line": 2, "error": {"message": "something else"}},
            {"kind": "forward", "line": 3, "error": {"message": "a second time"}},
            {"kind": "backward", "line": 4, "error": None},
        ]
    }
    assert [s["line"] for s in toolkit.calls_failing_with(trace, "a second time")] == [1]


NESTED = textwrap.dedent(
    """\
    import torch
    with torch.no_grad():
        for i in range(3):
            with open("f") as f:
                y = w * 2

    @torch.inference_mode()
    def f(w):
        return w * 2
    """
)


def node_at(src: Source, line: int, kind: type) -> ast.AST:
    return next(n for n in src.walk() if isinstance(n, kind) and n.lineno == line)


def no_grad(expr: ast.expr) -> bool:
    return toolkit.is_call_of(expr, ("no_grad", "inference_mode"))


def test_enclosing_with_finds_the_innermost_block_whose_context_passes():
    src = Source(NESTED)
    assert toolkit.enclosing_with(src, node_at(src, 5, ast.Assign), no_grad).lineno == 2


def test_enclosing_with_stops_at_the_node_given():
    src = Source(NESTED)
    loop = node_at(src, 3, ast.For)
    assert toolkit.enclosing_with(src, node_at(src, 5, ast.Assign), no_grad, stop=loop) is None


def test_enclosing_with_counts_a_decorated_function_only_when_asked():
    src = Source(NESTED)
    ret = node_at(src, 9, ast.Return)
    assert toolkit.enclosing_with(src, ret, no_grad) is None
    assert toolkit.enclosing_with(src, ret, no_grad, decorated=True).name == "f"


def test_dotted_name_of_an_attribute_path():
    assert toolkit.dotted_name(ast.parse("model.fc.weight", mode="eval").body) == "model.fc.weight"
    assert toolkit.dotted_name(ast.parse("f().weight", mode="eval").body) is None


# ---------------------------------------------------------------- block edits keep the file's end


@pytest.mark.parametrize("ending", ["\n", ""])
def test_unwrapping_the_last_block_keeps_the_files_final_newline_or_its_lack(ending: str):
    code = "import torch\nwith torch.no_grad():\n    y = 2\n    z = 3" + ending
    src = Source(code)
    block = node_at(src, 2, ast.With)
    assert src.apply([src.unwrap(block)]) == "import torch\ny = 2\nz = 3" + ending


@pytest.mark.parametrize("ending", ["\n", ""])
def test_wrapping_the_last_statement_keeps_the_files_final_newline_or_its_lack(ending: str):
    code = "import torch\ny = 2" + ending
    src = Source(code)
    stmt = node_at(src, 2, ast.Assign)
    assert src.apply([src.wrap(stmt, "with torch.no_grad():")]) == (
        "import torch\nwith torch.no_grad():\n    y = 2" + ending
    )
