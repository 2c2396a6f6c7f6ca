"""Run every curated snippet with plain torch (no tracer) and check its header.

Header shape (the module docstring):

    Title in a few words
    <blank>
    One short paragraph.
    <blank>
    Watch: one or two sentences.

A snippet written for a GPU (it names CUDA) runs as the same code with its devices set to the CPU
(truth.devices_on_cpu), as the sandbox runs it on a machine without one.

A snippet whose docstring contains "This snippet fails" must raise RuntimeError from its
last top-level statement, and the docstring must quote the start of the error message as
RuntimeError ("..."). Every other snippet must run to completion.
"""

import ast
import re
import time
import traceback
from pathlib import Path

import pytest
import torch
from testkit import truth

SNIPPETS_DIR = Path(__file__).resolve().parents[2] / "snippets"
SNIPPETS = sorted(SNIPPETS_DIR.glob("*.py"))
FAIL_MARK = "This snippet fails"
QUOTED_ERROR = re.compile(r'RuntimeError \("([^"]+)"\)')
MAX_SECONDS = 5.0


def _flat(text: str) -> str:
    return " ".join(text.split())


def _docstring(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(), filename=str(path)), clean=True)
    assert doc, f"{path.name}: no module docstring"
    return doc


def test_snippets_exist():
    assert SNIPPETS, f"no snippets found in {SNIPPETS_DIR}"


@pytest.mark.parametrize("path", SNIPPETS, ids=lambda p: p.name)
def test_file_name(path: Path):
    assert re.fullmatch(r"[a-z][a-z0-9_]*\.py", path.name), path.name


@pytest.mark.parametrize("path", SNIPPETS, ids=lambda p: p.name)
def test_header_shape(path: Path):
    doc = _docstring(path)
    blocks = doc.split("\n\n")
    assert len(blocks) == 3, f"{path.name}: expected title, paragraph, Watch: separated by blank lines"
    title, paragraph, watch = blocks
    assert title.strip() and "\n" not in title, f"{path.name}: title must be one non-empty line"
    assert paragraph.strip(), f"{path.name}: empty explanation paragraph"
    assert not paragraph.lstrip().startswith("Watch:"), f"{path.name}: paragraph missing before Watch:"
    assert watch.startswith("Watch:") and watch[len("Watch:") :].strip(), f"{path.name}: bad Watch: line"
    if FAIL_MARK in _flat(doc):
        assert QUOTED_ERROR.search(_flat(doc)), (
            f'{path.name}: failing snippet must quote RuntimeError ("...")'
        )


@pytest.fixture(scope="module")
def lazy_imports() -> None:
    """What torch imports on first use, once per process, is not a snippet's own time:
    torch.utils.checkpoint imports torch._dynamo on its first call (seconds on a busy machine)."""
    import torch._dynamo  # noqa: F401


def _run(path: Path) -> dict:
    namespace = {"__name__": "__main__", "__file__": str(path)}
    code = path.read_text()
    if truth.names_cuda(code) and not torch.cuda.is_available():
        code = truth.devices_on_cpu(code)
    exec(compile(code, str(path), "exec"), namespace)
    return namespace


@pytest.mark.filterwarnings(r"ignore:Using backward\(\) with create_graph=True:UserWarning")
@pytest.mark.parametrize("path", SNIPPETS, ids=lambda p: p.name)
def test_runs_as_documented(path: Path, capsys, lazy_imports):
    doc = _flat(_docstring(path))
    start = time.perf_counter()
    if FAIL_MARK not in doc:
        _run(path)
    else:
        with pytest.raises(RuntimeError) as info:
            _run(path)
        quoted = QUOTED_ERROR.search(doc).group(1)
        assert quoted in _flat(str(info.value)), f"{path.name}: error was {info.value}"
        # The failing call must be the snippet's last top-level statement, left uncaught.
        last_stmt = ast.parse(path.read_text()).body[-1]
        frames = [f for f in traceback.extract_tb(info.tb) if f.filename == str(path)]
        assert frames, f"{path.name}: the error was not raised from the snippet"
        assert last_stmt.lineno <= frames[-1].lineno <= last_stmt.end_lineno, (
            f"{path.name}: raised at line {frames[-1].lineno}, not in the last statement"
        )
    elapsed = time.perf_counter() - start
    assert elapsed < MAX_SECONDS, f"{path.name}: took {elapsed:.2f}s"
    assert capsys.readouterr().out.strip(), f"{path.name}: prints nothing for the learner"
