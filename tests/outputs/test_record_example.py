"""The curated example of ``gradstep.record()`` (examples/record_training_step.ipynb) runs, cell by
cell, in IPython's own shell: cells are files named ``<ipython-input-…>``, and the recordings they
make are valid traces whose steps point into those cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gradstep.trace_dicts import typed

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "record_training_step.ipynb"


def test_the_example_notebook_has_no_saved_outputs():
    nb = json.loads(NOTEBOOK.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(not c["outputs"] and c["execution_count"] is None for c in code)


def test_the_example_notebook_runs_and_records(tmp_path, monkeypatch):
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.chdir(tmp_path)  # its export lands here
    sh = InteractiveShell.instance()
    try:
        for cell in json.loads(NOTEBOOK.read_text())["cells"]:
            if cell["cell_type"] == "code":
                result = sh.run_cell("".join(cell["source"]))
                assert result.success, result.error_in_exec or result.error_before_exec
        rec = sh.user_ns["rec"]
        trace = typed(rec.data)
        assert trace.status == "error"  # the last recording: a second backward through a freed graph
        assert trace.files and trace.files[0].path.startswith("<ipython-input-")
        assert (tmp_path / "train_step.html").exists()
    finally:
        InteractiveShell.clear_instance()
