"""`gradstep export <folder>` reads only what the folder holds: a symbolic link in it that leads out
(to /etc/passwd, to ../secret.py) is never read, let alone run or written into a page."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gradstep.cli import _snippet_files
from gradstep.export import ExportError, write_exports
from gradstep.tracer import record

GRADSTEP = Path(sys.executable).with_name("gradstep")
SAFETY = 120  # seconds: only so a hung child cannot hang the suite
SNIPPET = "import torch\nx = torch.ones(2, requires_grad=True)\nx.sum().backward()\n"
SECRET = "API_KEY = 'gradstep-export-secret'\n"


def course_with(tmp_path: Path, links: dict[str, str]) -> Path:
    """A course folder with one real snippet and ``links`` (name -> target); a secret beside it."""
    (tmp_path / "secret.py").write_text(SECRET)
    course = tmp_path / "course"
    course.mkdir()
    (course / "a_real.py").write_text(SNIPPET)
    for name, target in links.items():
        os.symlink(target, course / name)
    return course


def export(course: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(GRADSTEP), "export", str(course), "-o", str(out)], capture_output=True, text=True, timeout=SAFETY
    )


def test_a_link_to_etc_passwd_in_the_folder_is_not_exported(tmp_path):
    course = course_with(tmp_path, {"b_passwd.py": "/etc/passwd"})
    r = export(course, tmp_path / "site")
    assert r.returncode == 2
    assert "b_passwd.py -> /etc/passwd" in r.stderr and "not read" in r.stderr
    assert "starting the sandbox" not in r.stderr  # refused before anything ran
    assert not (tmp_path / "site").exists()


def test_a_link_to_a_file_beside_the_folder_is_not_exported(tmp_path):
    course = course_with(tmp_path, {"b_secret.py": "../secret.py"})
    r = export(course, tmp_path / "site")
    assert r.returncode == 2
    assert f"b_secret.py -> {(tmp_path / 'secret.py').resolve()}" in r.stderr
    assert "gradstep-export-secret" not in r.stderr + r.stdout
    assert not (tmp_path / "site").exists()


def test_a_link_through_a_linked_folder_out_is_not_exported(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.py").write_text(SECRET)
    course = course_with(tmp_path, {"sub": "../elsewhere", "b.py": "sub/x.py"})
    assert _snippet_files([str(course)]) is None


def test_every_link_out_is_named(tmp_path, capsys):
    course = course_with(tmp_path, {"b.py": "/etc/passwd", "c.py": "../secret.py"})
    assert _snippet_files([str(course)]) is None
    err = capsys.readouterr().err
    assert "b.py -> /etc/passwd" in err and "c.py -> " in err and "these symbolic links lead" in err


def test_a_link_to_a_file_inside_the_folder_is_that_file(tmp_path):
    course = course_with(tmp_path, {"b_again.py": "a_real.py"})
    assert _snippet_files([str(course)]) == [course / "a_real.py", course / "b_again.py"]


def test_a_folder_reached_through_a_link_is_read_as_that_folder(tmp_path):
    course = course_with(tmp_path, {})
    os.symlink(course, tmp_path / "linked")
    assert _snippet_files([str(tmp_path / "linked")]) == [tmp_path / "linked" / "a_real.py"]


def test_a_file_named_on_the_command_line_is_read_where_it_is(tmp_path):
    course = course_with(tmp_path, {"b.py": "../secret.py"})
    assert _snippet_files([str(course / "b.py")]) == [course / "b.py"]  # the user's own choice


def test_a_folder_export_never_writes_a_page_through_a_link_in_the_output_folder(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    site = tmp_path / "site"
    site.mkdir()
    os.symlink(outside, site / "a.json")  # planted where the export writes a.py's page
    trace = json.dumps(record(SNIPPET)).encode()
    with pytest.raises(ExportError, match="a.json: it is a symbolic link"):
        write_exports(
            lambda i, path, code: trace, [(Path("a.py"), SNIPPET, None)], output=str(site), fmt="json"
        )
    assert outside.read_text() == "keep me"
