"""The Share dialog as an instructor uses it (issue 24, point 2): the <iframe> HTML pasted as is into
a course page on another origin shows the whole stepper without scrolling inside the frame, and the
dialog names the step the way the page counts it."""

from __future__ import annotations

import pytest
from test_browser_embed import Site
from testkit.browser_support import Page, needs_chromium

pytestmark = needs_chromium

SNIPPET = "two_outputs_retain_graph"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    s = Site(tmp_path_factory.mktemp("lesson"))
    yield s
    s.httpd.shutdown()


def share(app: Page, step: int) -> tuple[str, str, dict]:
    trace = app.open(f"?snippet={SNIPPET}")
    app.page.evaluate(f"window.gradstep.viewer.setStep({step})")
    app.page.click("#gs-share")
    app.page.wait_for_selector("#gs-share-dialog[open]")
    return (
        app.page.locator("#gs-share-embed").input_value(),
        app.page.locator("#gs-share-dialog").inner_text(),
        trace,
    )


def lesson(browser, site, server, html: str, width: int, name: str):
    """A course page `width` px wide with the pasted HTML; returns (page, the frame's element, frame)."""
    tab = Page(browser, server, reduced_motion="reduce", viewport={"width": width, "height": 900})
    url = site.page(name, f"<h1>Lesson</h1><p>Step through it:</p>{html}<p>After the frame.</p>")
    tab.page.goto(url)
    frame = tab.page.frames[1]
    frame.wait_for_function("document.body.dataset.state === 'ready'", timeout=60_000)
    return tab, frame


def inner_overflow(tab, frame) -> int:
    """How many px of the frame's content do not fit its height (after the height settled)."""
    last, same = None, 0
    for _ in range(60):  # the height messages follow the content's layout (late on a busy machine)
        tab.page.wait_for_timeout(150)
        now = (
            frame.evaluate("Math.ceil(document.documentElement.getBoundingClientRect().height)"),
            tab.page.evaluate("document.querySelector('iframe').clientHeight"),
        )
        same = same + 1 if now == last else 0
        last = now
        # settled: unchanged for a while, and sooner once the frame holds its content
        if same >= 6 or (same >= 1 and now[0] <= now[1]):
            break
    content, box = last
    return content - box


@pytest.mark.parametrize("width", [1100, 520])
def test_the_pasted_iframe_html_shows_the_whole_stepper_without_scrolling_inside(
    app, browser, site, server, width
):
    html, _, _ = share(app, 2)
    assert html.startswith('<iframe src="') and "<script>" in html
    overflows = []
    for attempt in range(2):  # a second opening of the page when the first settled off on a busy machine
        tab, frame = lesson(browser, site, server, html, width, f"lesson-{width}-{attempt}.html")
        try:
            overflow = inner_overflow(tab, frame)
            overflows.append(overflow)
            assert tab.errors == []
        finally:
            tab.close()
        if -40 < overflow <= 0:
            break
    # the frame neither scrolls inside (its .grad panel cut) nor was just made huge: as high as its
    # content, within a few px
    assert -40 < overflows[-1] <= 0, overflows


def test_the_iframe_height_alone_fits_a_course_page_column(app, browser, site, server):
    """Without the script line (a site that strips scripts), the frame's own height still fits."""
    html, _, _ = share(app, 2)
    bare = html.split("<script>")[0]
    tab, frame = lesson(browser, site, server, bare, 1100, "lesson-bare.html")
    try:
        assert inner_overflow(tab, frame) <= 0
    finally:
        tab.close()


def test_the_dialog_counts_steps_as_the_page_does_and_says_how_the_frame_sizes(app):
    _, text, trace = share(app, 2)
    n = len(trace["steps"])
    counter = app.page.locator("#gs-stepper .gs-counter").inner_text()
    assert counter == f"3 / {n}"
    assert f"3 / {n}" in text  # the same number the counter shows, not another one
    assert "step 3" not in text.lower().replace("step=", "")  # no number that disagrees with the link
    link = app.page.locator("#gs-share-link").input_value()
    assert link.endswith("&step=2") and "step=2" in text  # and the link's parameter is explained
    assert "keeps it as high as its content" in text
    assert app.errors == []


# ---------------------------------------------------------------- the exercise option

EXERCISE = "exercise_retain_graph"  # its calls carry `# predict:` comments


def open_share(app: Page, snippet: str) -> None:
    app.open(f"?snippet={snippet}")
    app.page.click("#gs-share")
    app.page.wait_for_selector("#gs-share-dialog[open]")


def test_share_offers_the_exercise_for_code_with_predict_comments_and_its_iframe_asks(browser, server, site):
    app = Page(browser, server, reduced_motion="reduce")
    try:
        open_share(app, EXERCISE)
        box = app.page.locator("#gs-share-exercise")
        assert box.is_visible() and box.is_checked()  # the app asks: so does what it shares
        html = app.page.locator("#gs-share-embed").input_value()
        assert "&amp;predict=code" in html or "&predict=code" in html
        assert app.page.locator("#gs-share-link").input_value().endswith("&predict=code")
        assert app.errors == []
    finally:
        app.close()
    tab, frame = lesson(browser, site, server, html, 1100, "exercise.html")
    try:
        frame.click(".gs-stepper button[aria-label^='Last step']")
        frame.wait_for_selector(".gs-ex-card:not([hidden]) .gs-ex-form", timeout=10_000)
        assert tab.errors == []
    finally:
        tab.close()


def test_share_without_the_exercise_ticked_leaves_predict_out_of_the_iframe(app_share_unticked):
    html, link = app_share_unticked
    assert "predict" not in html
    assert link.endswith("&predict=0")  # the app would otherwise open code with comments as an exercise


@pytest.fixture
def app_share_unticked(browser, server):
    app = Page(browser, server, reduced_motion="reduce")
    try:
        open_share(app, EXERCISE)
        app.page.uncheck("#gs-share-exercise")
        yield (
            app.page.locator("#gs-share-embed").input_value(),
            app.page.locator("#gs-share-link").input_value(),
        )
        assert app.errors == []
    finally:
        app.close()


def test_a_shared_link_without_the_exercise_opens_its_code_with_the_exercise_off(
    browser, server, app_share_unticked
):
    _, link = app_share_unticked
    app = Page(browser, server, reduced_motion="reduce")
    try:
        app.page.goto(link)
        app.wait_runs(1)
        app.page.click(".gs-stepper button[aria-label^='Last step']")
        app.page.wait_for_function(
            "document.querySelector('.gs-stepper').dataset.step == document.querySelector('.gs-stepper').dataset.steps - 1"
        )
        assert app.page.locator(".gs-ex-card:not([hidden])").count() == 0
        assert not app.page.locator(".gs-ex-switch").is_checked()
    finally:
        app.close()


def test_share_offers_no_exercise_for_code_without_questions(browser, server):
    app = Page(browser, server, reduced_motion="reduce")
    try:
        open_share(app, SNIPPET)
        assert not app.page.locator("#gs-share-exercise").is_visible()
        assert "predict" not in app.page.locator("#gs-share-embed").input_value()
        assert "predict" not in app.page.locator("#gs-share-link").input_value()
    finally:
        app.close()
