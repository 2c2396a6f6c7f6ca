"""The Sphinx extension: a tiny project built with `python -m sphinx` in a temporary folder, its HTML
opened in Chromium from file://, what it shows checked against plain PyTorch."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from gradstep.columns import rows_of
from testkit.browser_support import fmt_values, needs_chromium

pytest.importorskip("sphinx")

SAFETY = 300  # seconds: only so a hung build cannot hang the suite

CUBE = """\
import torch
x = torch.tensor([1.0, 2.0], requires_grad=True)
y = (x ** 3).sum()
y.backward()"""


def plain_cube_grad() -> list[float]:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    (x**3).sum().backward()
    return x.grad.tolist()


def indent(code: str) -> str:
    return textwrap.indent(code, "   ")


def build(src: Path, builder: str = "html") -> tuple[subprocess.CompletedProcess, Path]:
    out = src / "_build" / builder
    r = subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-b", builder, str(src), str(out)],
        capture_output=True,
        text=True,
        timeout=SAFETY,
    )
    return r, out


def project(tmp: Path, pages: dict[str, str]) -> Path:
    (tmp / "conf.py").write_text('project = "demo"\nextensions = ["gradstep.sphinx"]\n')
    for name, text in pages.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_text(text)
    return tmp


GOOD = {
    "index.rst": f"Demo\n====\n\n.. toctree::\n\n   course/cube\n\n.. gradstep::\n   :theme: dark\n\n{indent(CUBE)}\n",
    "course/cube.rst": f"Cube\n====\n\n.. gradstep::\n   :step: 99\n   :height: 500\n\n{indent(CUBE)}\n",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    src = project(tmp_path_factory.mktemp("docs"), GOOD)
    r, out = build(src)
    assert r.returncode == 0, r.stderr
    return out


def iframes(page: Path) -> list[dict]:
    tags = re.findall(r"<iframe [^>]*>", page.read_text())
    return [dict(re.findall(r'(\w[\w-]*)="([^"]*)"', t)) for t in tags]


def exported(page: Path) -> tuple[dict, dict]:
    text = page.read_text()
    trace = re.search(r'id="gradstep-trace">(.*?)</script>', text, re.S).group(1)
    options = re.search(r'id="gradstep-options">(.*?)</script>', text, re.S).group(1)
    return json.loads(trace), json.loads(options)


def test_each_directive_becomes_an_iframe_to_a_written_export(built):
    for doc in ("index.html", "course/cube.html"):
        (frame,) = iframes(built / doc)
        target = (built / doc).parent / frame["src"]
        assert target.is_file(), f"{doc} points at {frame['src']}, which was not written"


def test_the_export_carries_the_trace_of_the_directives_body(built):
    (frame,) = iframes(built / "course/cube.html")
    trace, _ = exported((built / "course").joinpath(frame["src"]))
    assert trace["code"].strip() == CUBE
    assert trace["status"] == "ok"


def test_directive_options_set_the_step_clamped_the_theme_and_the_height(built):
    (frame,) = iframes(built / "course/cube.html")
    trace, options = exported((built / "course").joinpath(frame["src"]))
    assert options == {"step": len(trace["steps"]) - 1, "theme": "auto"}
    assert (
        "height: 500px" in frame["style"] and "data-fixed-height" in (built / "course/cube.html").read_text()
    )
    (frame,) = iframes(built / "index.html")
    assert exported(built / frame["src"])[1]["theme"] == "dark"


def test_an_unknown_theme_fails_the_directive_naming_the_choices(tmp_path):
    src = project(tmp_path, {"index.rst": f"T\n=\n\n.. gradstep::\n   :theme: pink\n\n{indent(CUBE)}\n"})
    r, out = build(src)
    assert '"pink" unknown; choose from "light", "dark", or "auto"' in r.stderr
    assert iframes(out / "index.html") == []


def test_a_directive_without_code_says_it_needs_its_body(tmp_path):
    src = project(tmp_path, {"index.rst": "T\n=\n\n.. gradstep::\n   :step: 1\n"})
    r, _ = build(src)
    assert "the directive needs the code to trace as its body" in r.stderr


def test_a_negative_step_fails_the_directive(tmp_path):
    src = project(tmp_path, {"index.rst": f"T\n=\n\n.. gradstep::\n   :step: -1\n\n{indent(CUBE)}\n"})
    r, _ = build(src)
    assert "invalid option value: (option: \"step\"; value: '-1')" in r.stderr


def test_other_builders_show_the_code(tmp_path):
    r, out = build(project(tmp_path, {"index.rst": GOOD["course/cube.rst"]}), "text")
    assert r.returncode == 0, r.stderr
    assert "y = (x ** 3).sum()" in (out / "index.txt").read_text()


@needs_chromium
def test_built_page_shows_the_stepper_with_the_grads_of_plain_torch(built, browser):
    ctx = browser.new_context(viewport={"width": 1200, "height": 900})
    errors: list[str] = []
    page = ctx.new_page()
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    try:
        page.goto((built / "course" / "cube.html").as_uri())
        page.frame_locator("iframe.gradstep-frame").locator("body[data-ready=true]").wait_for(timeout=30_000)
        frame = next(f for f in page.frames if f != page.main_frame)
        shown = frame.locator('[data-grad-for="x"]').first.text_content()
        assert shown == fmt_values(plain_cube_grad())
        assert errors == []
    finally:
        ctx.close()


@needs_chromium
def test_an_iframe_without_a_height_grows_to_its_page(built, browser):
    ctx = browser.new_context(viewport={"width": 1200, "height": 900})
    page = ctx.new_page()
    try:
        page.goto((built / "index.html").as_uri())
        inner = page.frame_locator("iframe.gradstep-frame").locator("body[data-ready=true]")
        inner.wait_for(timeout=30_000)
        want = inner.evaluate("() => document.documentElement.scrollHeight")
        page.wait_for_function(
            f"Math.abs(document.querySelector('iframe.gradstep-frame').getBoundingClientRect().height - {want}) <= 1",
            timeout=10_000,
        )
    finally:
        ctx.close()


def test_a_parallel_build_writes_the_export_of_every_page(tmp_path):
    pages = {f"p{i}.rst": f"P{i}\n==\n\n.. gradstep::\n\n{indent(CUBE)}\n" for i in range(4)}
    pages["index.rst"] = "Index\n=====\n\n.. toctree::\n\n" + "".join(f"   p{i}\n" for i in range(4))
    src = project(tmp_path, pages)
    out = src / "_build" / "html"
    r = subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-j", "2", "-b", "html", str(src), str(out)],
        capture_output=True,
        text=True,
        timeout=SAFETY,
    )
    assert r.returncode == 0, r.stderr
    for i in range(4):
        (frame,) = iframes(out / f"p{i}.html")
        assert (out / frame["src"]).is_file()


def test_a_rebuild_keeps_the_exports_of_pages_it_did_not_reread(tmp_path):
    src = project(tmp_path, {"index.rst": GOOD["course/cube.rst"]})
    build(src)
    out = src / "_build" / "html"
    for f in (out / "_gradstep").iterdir():
        f.unlink()
    r, _ = build(src)
    assert r.returncode == 0, r.stderr
    (frame,) = iframes(out / "index.html")
    assert (out / frame["src"]).is_file()


FAILING = """\
import torch
x = torch.tensor(2.0, requires_grad=True)
y = x ** 7
y.backward()
y.backward()"""


@pytest.fixture(scope="module")
def built_failing(tmp_path_factory):
    src = project(
        tmp_path_factory.mktemp("docs"),
        {"index.rst": f"Lesson\n======\n\n.. gradstep::\n\n{indent(FAILING)}\n"},
    )
    r, out = build(src)
    assert r.returncode == 0, r.stderr
    return out


@needs_chromium
@pytest.mark.parametrize(("width", "height"), [(700, 900), (390, 844)])
def test_built_page_shows_the_diagnosis_under_a_stepper_on_one_screen_and_applies_the_fix_offline(
    built_failing, browser, width, height
):
    from testkit.browser_support import EMBED_BOXES, assert_stepper_on_one_screen

    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        exec(FAILING, {})  # plain torch fails as the page says
    ctx = browser.new_context(viewport={"width": width, "height": height})
    requests: list[str] = []
    ctx.route(
        "**/*",
        lambda r: (
            r.continue_()
            if r.request.url.startswith(("file:", "blob:", "data:"))
            else (requests.append(r.request.url), r.abort())
        ),
    )
    errors: list[str] = []
    page = ctx.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto((built_failing / "index.html").as_uri())
        page.frame_locator("iframe.gradstep-frame").locator("body[data-ready=true]").wait_for(timeout=30_000)
        frame = next(f for f in page.frames if f != page.main_frame)
        page.evaluate("document.querySelector('iframe.gradstep-frame').scrollIntoView()")
        boxes = frame.evaluate(EMBED_BOXES, "#gradstep")
        frame_top = page.evaluate(
            "document.querySelector('iframe.gradstep-frame').getBoundingClientRect().top"
        )
        assert_stepper_on_one_screen(boxes, -frame_top, height)  # the frame's coordinates
        assert (
            frame.locator(".gs-embed-diagnoses .gs-diag").get_attribute("data-kind")
            == "backward_through_freed_graph"
        )
        frame.click(".gs-apply-fix")
        frame.wait_for_function("document.querySelector('.gs-embed-compare').dataset.rows", timeout=15_000)
        assert frame.locator(".gs-cmp-col").count() == 2
        assert requests == [] and errors == []
    finally:
        ctx.close()


def test_the_built_site_writes_the_front_end_once_for_all_its_steppers(built):
    pages = sorted((built / "_gradstep").glob("*.html"))
    assert len(pages) == 2
    assert sorted(p.name for p in (built / "_gradstep").iterdir() if p.suffix != ".html") == [
        "gradstep.css",
        "gradstep.js",
    ]
    for page in pages:
        text = page.read_text()
        assert (
            'src="gradstep.js"' in text and "function createViewer(" not in text
        )  # no inlined module of its own
        assert len(text) < (built / "_gradstep" / "gradstep.js").stat().st_size / 10


def test_a_site_can_inline_the_front_end_in_each_page(tmp_path):
    src = project(tmp_path, {"index.rst": f"Demo\n====\n\n.. gradstep::\n\n{indent(CUBE)}\n"})
    (src / "conf.py").write_text((src / "conf.py").read_text() + "gradstep_shared_library = False\n")
    r, out = build(src)
    assert r.returncode == 0, r.stderr
    (page,) = (out / "_gradstep").iterdir()
    assert 'src="gradstep.js"' not in page.read_text() and "function createViewer(" in page.read_text()


# ---------------------------------------------------------------- the exercise option


def exercise_recipe() -> str:
    """The directive of docs/exercises.md's Sphinx section, as an instructor copies it."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "exercises.md").read_text()
    section = text[text.index("### Sphinx") :]
    return re.search(r"```rst\n(.*?)```", section, re.S).group(1)


@pytest.fixture(scope="module")
def built_exercises(tmp_path_factory):
    page = (
        f"Exercises\n=========\n\n{exercise_recipe()}\n"
        f".. gradstep::\n   :predict:   x.grad, freed@4 \n\n{indent(CUBE)}\n\n"
        f".. gradstep::\n\n{indent(CUBE)}\n"
    )
    src = project(tmp_path_factory.mktemp("docs"), {"index.rst": page})
    r, out = build(src)
    assert r.returncode == 0, r.stderr
    return out


def exercise_pages(out: Path) -> list[tuple[dict, dict]]:
    return [exported(out / frame["src"]) for frame in iframes(out / "index.html")]


def test_the_docs_recipe_with_predict_alone_asks_the_questions_of_the_bodys_comments(built_exercises):
    trace, options = exercise_pages(built_exercises)[0]
    assert options["predict"] == "code"
    assert "loss.backward()  # predict: w.grad" in trace["code"]  # the questions travel in the code


def test_the_docs_recipes_exercise_holds_the_grads_of_plain_torch(built_exercises):
    trace, _ = exercise_pages(built_exercises)[0]
    w = torch.tensor([1.0, -2.0], requires_grad=True)
    x = torch.tensor([3.0, 0.5])
    plain = []
    for _ in range(2):
        (w * x).sum().backward()
        plain.append(w.grad.tolist())
    shown = [
        t["grad"]["values"]
        for s in rows_of(trace)["steps"]
        if s["kind"] == "backward"
        for t in s["tensors"]
        if t["name"] == "w"
    ]
    assert shown == plain


def test_predict_with_a_spec_carries_it_stripped_and_a_directive_without_it_has_none(built_exercises):
    (_, first), (_, spec), (_, plain) = exercise_pages(built_exercises)
    assert spec["predict"] == "x.grad, freed@4"
    assert "predict" not in plain


def test_a_predict_spec_too_long_fails_the_directive_saying_why(tmp_path):
    spec = "x.grad, " * 70
    src = project(tmp_path, {"index.rst": f"T\n=\n\n.. gradstep::\n   :predict: {spec}\n\n{indent(CUBE)}\n"})
    r, out = build(src)
    assert 'invalid option value: (option: "predict"' in r.stderr
    assert "predict must be at most 500 characters" in r.stderr
    assert iframes(out / "index.html") == []
