"""Sphinx, for real: the recipe of docs/notebooks.md built by `python -m sphinx` with alabaster
(Sphinx's default theme, a narrow one), served over HTTP and opened in Chromium at a laptop's
width and in both system themes: the stepper is not cut, it steps, and its grads are those of
plain torch."""

from __future__ import annotations

import contextlib
import http.server
import re
import subprocess
import sys
import threading
from functools import partial

import pytest
import torch
from testkit.browser_support import fmt_values, needs_chromium
from testkit.hosts_support import PAGE_STATE, REPO, ensure_packages, is_dark, shot

pytestmark = [pytest.mark.hosts, needs_chromium]


def recipe() -> tuple[str, str]:
    """The Sphinx section's conf.py line and page, as docs/notebooks.md gives them."""
    text = (REPO / "docs" / "notebooks.md").read_text()
    section = text[text.index("## Sphinx") :]
    conf = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    page = re.search(r"```rst\n(.*?)```", section, re.S).group(1)
    return conf, page


def plain_cube_grad() -> list[float]:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    (x**3).sum().backward()
    return x.grad.tolist()


@contextlib.contextmanager
def _served_build(src):
    """Build the Sphinx project in ``src`` to HTML and serve it on a loopback port: yields its URL."""
    out = src / "_build"
    r = subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-b", "html", str(src), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    versions = ensure_packages("sphinx")
    src = tmp_path_factory.mktemp("sphinx")
    conf, page = recipe()
    (src / "conf.py").write_text(f'project = "course"\nhtml_theme = "alabaster"\n{conf}')
    (src / "index.rst").write_text(f"Cube\n====\n\nSome text before the stepper.\n\n{page}\nAnd after.\n")
    with _served_build(src) as base:
        yield {"base": base, "versions": versions}


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_sphinx_recipe_in_alabaster_is_not_cut_and_steps_to_plain_torch_grads(site, browser, scheme):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=scheme)
    page = ctx.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(f"{site['base']}/index.html")
        page.locator("iframe.gradstep-frame").scroll_into_view_if_needed()
        frame = page.frame_locator("iframe.gradstep-frame")
        frame.locator("body[data-ready=true]").wait_for(timeout=60_000)
        inner = next(f for f in page.frames if f != page.main_frame)
        frame.get_by_role("button", name="First step (Home)").click()  # it opens at :step: 2, the last
        assert inner.locator('[data-grad-for="x"]').first.text_content() == "None"
        frame.get_by_role("button", name="Last step (End)").click()
        assert inner.locator('[data-grad-for="x"]').first.text_content() == fmt_values(plain_cube_grad())
        # the iframe is as tall as the page in it: nothing is cut, nothing scrolls inside
        for _ in range(100):
            outer = page.locator("iframe.gradstep-frame").bounding_box()["height"]
            state = inner.evaluate(PAGE_STATE)
            if outer >= state["scroll"] - 1:
                break
            page.wait_for_timeout(100)
        assert outer >= state["scroll"] - 1, (
            f"the stepper needs {state['scroll']} px, the iframe is {outer} px"
        )
        assert is_dark(state["bg"]) == (scheme == "dark")  # theme auto: the system's (alabaster has none)
        page.locator("iframe.gradstep-frame").scroll_into_view_if_needed()
        shot(page, f"sphinx-alabaster-{scheme}")
        assert errors == []
    finally:
        ctx.close()


# ---------------------------------------------------------------- an exercise (`:predict:`)


def exercise_page() -> str:
    """The `:predict:` directive of docs/exercises.md's Sphinx section, as given there."""
    text = (REPO / "docs" / "exercises.md").read_text()
    section = text[text.index("### Sphinx") :]
    return re.search(r"```rst\n(.*?)```", section, re.S).group(1)


@pytest.fixture(scope="module")
def exercise_site(tmp_path_factory):
    ensure_packages("sphinx")
    src = tmp_path_factory.mktemp("sphinx-exercise")
    conf, _ = recipe()
    (src / "conf.py").write_text(f'project = "course"\nhtml_theme = "alabaster"\n{conf}')
    (src / "index.rst").write_text(f"Predict\n=======\n\n{exercise_page()}\n")
    with _served_build(src) as base:
        yield base


def test_sphinx_page_with_predict_asks_before_the_call_and_checks_the_answer_against_torch(
    exercise_site, browser
):
    from testkit.truth import run_plain

    body = "\n".join(line[3:] for line in exercise_page().splitlines()[3:])  # the directive's code
    first = run_plain(body).calls[0]
    (truth,) = [g for names, g in first.grads.items() if "w" in names]
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(f"{exercise_site}/index.html")
        page.locator("iframe.gradstep-frame").scroll_into_view_if_needed()
        frame = page.frame_locator("iframe.gradstep-frame")
        frame.locator("body[data-ready=true]").wait_for(timeout=60_000)
        frame.get_by_role("button", name="Last step (End)").click()
        frame.locator(".gs-ex-card:not([hidden]) .gs-ex-form").wait_for(timeout=10_000)
        frame.locator(".gs-ex-input").fill(str(truth.tolist()))
        frame.locator(".gs-ex-check").click()
        row = frame.locator(".gs-ex-results tbody tr[data-kind=grad]")
        assert row.get_attribute("data-correct") == "true"
        shot(page, "sphinx-exercise-answered")
        assert errors == []
    finally:
        ctx.close()
