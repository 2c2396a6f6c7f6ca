"""examples/course/: the retain_graph lesson with two steppers, stepped in Chromium.

The page is served from its own origin (another port) as a course site would be: the first stepper is
an <iframe> of the test's gradstep server, driven by the page's buttons through the frame messages;
the second is a static export made at test time with `gradstep export`. What each shows is checked
against the trace behind it (the API's for the first, the one inside the export for the second).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from gradstep import snippets
from test_browser_embed import Site
from testkit.browser_support import Page, assert_step_matches, needs_chromium

pytestmark = needs_chromium

ROOT = Path(__file__).resolve().parents[2]
COURSE = ROOT / "examples" / "course"
PLACEHOLDER = "http://127.0.0.1:8000"  # the server address written in the page


@pytest.fixture(scope="module")
def course(tmp_path_factory, server):
    """The course folder as an instructor would publish it: server address set, static export built."""
    root = tmp_path_factory.mktemp("course-site")
    shutil.copytree(COURSE, root, dirs_exist_ok=True)
    page = root / "index.html"
    html = page.read_text(encoding="utf-8")
    assert PLACEHOLDER in html
    page.write_text(html.replace(PLACEHOLDER, server), encoding="utf-8")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "gradstep",
            "export",
            str(ROOT / "snippets" / "backward_twice_fails.py"),
            "-o",
            str(root / "backward_twice_static.html"),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    site = Site(root)
    yield site
    site.httpd.shutdown()


@pytest.fixture
def lesson(browser, server, course):
    tab = Page(browser, server, reduced_motion="reduce", viewport={"width": 1200, "height": 900})
    tab.page.goto(f"{course.base}/index.html")
    yield tab
    tab.close()


def frame_of(tab, element_id: str):
    handle = tab.page.locator(f"#{element_id}")
    handle.scroll_into_view_if_needed()
    frame = handle.element_handle().content_frame()
    frame.wait_for_selector(".gs-stepper[data-steps]:not([data-steps='0'])", timeout=60_000)
    return frame


def graph_state(frame) -> dict:
    return Page.graph_state(SimpleNamespace(page=frame))


def test_course_page_is_on_another_origin_than_gradstep(lesson, server):
    assert not lesson.page.url.startswith(server)


def test_page_buttons_step_the_server_stepper(lesson, server):
    trace = httpx.post(
        f"{server}/api/trace", json={"code": snippets.load_all()["retain_graph_accumulates"].code}, timeout=60
    ).json()
    frame = frame_of(lesson, "first")
    status = lesson.page.locator("#first-status")
    status.get_by_text(f"Step 1 of {len(trace['steps'])}").wait_for()
    for i in range(1, len(trace["steps"])):
        lesson.page.click("#first-next")
        status.get_by_text(f"Step {i + 1} of {len(trace['steps'])}").wait_for()
        assert_step_matches(graph_state(frame), trace, i)
    lesson.page.click("#first-prev")
    status.get_by_text(f"Step {len(trace['steps']) - 1} of").wait_for()
    assert graph_state(frame)["step"] == len(trace["steps"]) - 2


def wait_sized(lesson, frame_id: str, height_js: str):
    """Wait until the iframe `frame_id` is as tall as its page measures itself with `height_js`."""
    frame = frame_of(lesson, frame_id)
    lesson.page.wait_for_function(
        f"(h) => document.getElementById('{frame_id}').clientHeight === h",
        arg=frame.evaluate(height_js),
        timeout=10_000,
    )
    return frame


def test_page_sizes_the_server_stepper_to_the_height_it_reports(lesson):
    wait_sized(lesson, "first", "Math.ceil(document.documentElement.getBoundingClientRect().height)")


def test_page_sizes_the_static_export_to_the_height_it_reports(lesson):
    frame = wait_sized(lesson, "second", "Math.ceil(document.documentElement.scrollHeight)")
    assert frame.evaluate("document.documentElement.scrollHeight <= window.innerHeight")  # nothing cut off


def test_static_export_steps_with_the_keyboard_and_matches_its_trace(lesson):
    frame = frame_of(lesson, "second")
    trace = frame.evaluate("JSON.parse(document.getElementById('gradstep-trace').textContent)")
    assert trace["status"] == "error"  # the lesson's point: the second backward fails
    frame.focus(".gs-embed")
    for i in range(1, len(trace["steps"])):
        lesson.page.keyboard.press("ArrowRight")
        assert_step_matches(graph_state(frame), trace, i)


def test_course_page_loads_without_errors(lesson):
    frame_of(lesson, "first")
    frame_of(lesson, "second")
    assert lesson.errors == []
