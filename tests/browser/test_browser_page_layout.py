"""The page at the sizes people use it (issue 24, points 3, 7 and 10): 1400×900 and a 390×844 phone,
the /embed page and a static export. The graph is never shrunk below readable text (it pans
instead), comes first on a phone and stays there while stepping; the panels are on screen at
1400×900; nothing is cut (timeline chips, the Tensors table's words, a failing step's narration,
the side-by-side title); an embed without the code gives its width to the graph."""

from __future__ import annotations

from pathlib import Path

import pytest
from gradstep import snippets
from test_browser_explain import apply_first_fix
from test_browser_export import FilePage, export
from testkit.browser_support import Page, needs_chromium

pytestmark = needs_chromium

WIDE = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}
BIG = "training_loop_no_zero_grad"  # 17 nodes in a module frame: wider and taller than a phone
MIN_TEXT_PX = 10.9  # node text as drawn on screen, in CSS px

# the smallest node text drawn on screen (font size × the graph's scale), over the op and leaf names
SMALLEST_TEXT = """(root) => {
  const texts = [...(root || document).querySelectorAll('g.gs-item:not(.gs-absent) .gs-op, g.gs-item:not(.gs-absent) .gs-leaf-name')];
  if (!texts.length) return null;
  return Math.min(...texts.map(t => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a));
}"""


def page(browser, server, viewport, **kw) -> Page:
    return Page(browser, server, reduced_motion="reduce", viewport=viewport, **kw)


def rect(p, selector: str) -> dict:
    return p.locator(selector).first.evaluate(
        "el => { const r = el.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, width: r.width, height: r.height}; }"
    )


def test_at_1400x900_the_panels_are_on_screen_and_nothing_is_cut(browser, server):
    app = page(browser, server, WIDE)
    try:
        trace = app.open(f"?snippet={BIG}")
        app.page.evaluate(f"window.gradstep.viewer.setStep({len(trace['steps']) - 1})")
        for panel in (".gs-tensors", ".gs-output", ".gs-inspector"):
            r = rect(app.page, panel)
            assert r["top"] < WIDE["height"] - 60, f"{panel} is below the fold ({r})"
        # the .grad of every leaf is readable in the Tensors panel without scrolling the page
        r = rect(app.page, ".gs-tensors")
        assert r["bottom"] <= WIDE["height"]
        # every timeline chip is inside the timeline's box (wrapped, not clipped at its right edge)
        tl = rect(app.page, "#gs-stepper .gs-timeline")
        chips = app.page.locator("#gs-stepper .gs-tl-step button").evaluate_all(
            "els => els.map(e => { const r = e.getBoundingClientRect(); return [r.left, r.right]; })"
        )
        assert chips and all(left >= tl["left"] - 1 and right <= tl["right"] + 1 for left, right in chips)
        # the closed Legend covers no node
        legend = rect(app.page, ".gs-legend")
        boxes = app.page.locator("#gs-graph g.gs-item:not(.gs-absent) .gs-body").evaluate_all(
            "els => els.map(e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; })"
        )
        for left, top, right, bottom in boxes:
            overlap = (
                left < legend["right"]
                and right > legend["left"]
                and top < legend["bottom"]
                and bottom > legend["top"]
            )
            assert not overlap, "the Legend covers a node"
        assert app.errors == []
    finally:
        app.close()


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1400", "390"])
def test_the_graph_text_stays_readable_in_the_app_and_pans_instead(browser, server, viewport):
    app = page(browser, server, viewport)
    try:
        app.open(f"?snippet={BIG}")
        assert app.page.evaluate(SMALLEST_TEXT, None) >= MIN_TEXT_PX
        # stepping to the last step: the step's nodes are in view (the graph follows them)
        app.page.evaluate("window.gradstep.viewer.setStep(window.gradstep.viewer.model.steps.length - 1)")
        app.page.wait_for_timeout(400)
        assert app.page.evaluate(SMALLEST_TEXT, None) >= MIN_TEXT_PX
        assert app.errors == []
    finally:
        app.close()


def test_the_graph_text_stays_readable_side_by_side(browser, server):
    app = page(browser, server, WIDE)
    try:
        original = app.open(f"?snippet={BIG}")
        apply_first_fix(app, original, "grad_accumulates_without_zero_grad")
        smallest = app.page.evaluate(
            SMALLEST_TEXT.replace("(root || document)", "document.querySelector('#gs-compare')"), None
        )
        assert smallest >= MIN_TEXT_PX
    finally:
        app.close()


@pytest.mark.parametrize("editor", ["readonly", "hidden"])
def test_the_graph_text_stays_readable_in_a_narrow_embed(browser, server, editor):
    tab = page(browser, server, {"width": 420, "height": 900})
    try:
        tab.page.goto(f"{server}/embed?snippet={BIG}&editor={editor}")
        tab.page.wait_for_function("document.body.dataset.state === 'ready'", timeout=60_000)
        assert tab.page.evaluate(SMALLEST_TEXT, None) >= MIN_TEXT_PX
    finally:
        tab.close()


def test_the_graph_text_stays_readable_in_an_export_on_a_phone(browser, tmp_path):
    path, _ = export(tmp_path, snippets.load_all()[BIG].code)
    page_ = FilePage(browser, path)
    try:
        page_.page.set_viewport_size(PHONE)
        page_.open()
        assert page_.page.evaluate(SMALLEST_TEXT, None) >= MIN_TEXT_PX
    finally:
        page_.close()


def test_an_embed_without_the_code_gives_the_graph_the_width(browser, server):
    tab = page(browser, server, {"width": 1000, "height": 900})
    try:
        tab.page.goto(f"{server}/embed?snippet=backward_twice_fails&editor=hidden")
        tab.page.wait_for_function("document.body.dataset.state === 'ready'", timeout=60_000)
        frame = rect(tab.page, ".gs-graph-frame")
        whole = rect(tab.page, ".gs-embed")
        assert frame["width"] >= 0.9 * whole["width"], (frame, whole)
    finally:
        tab.close()


def test_on_a_phone_the_graph_comes_first_and_stays_on_screen_while_stepping(browser, server):
    app = page(browser, server, PHONE)
    try:
        app.open("?snippet=retain_graph_accumulates")
        header = rect(app.page, ".gs-header")
        assert header["height"] <= 60
        graph = rect(app.page, "#gs-graph .gs-graph-frame")
        editor = rect(app.page, "#gs-editor")
        stepper = rect(app.page, "#gs-stepper")
        assert graph["top"] < editor["top"], "the code comes before the graph"
        assert graph["bottom"] <= PHONE["height"], "the graph does not fit the first screen"
        assert graph["bottom"] <= stepper["top"] <= graph["bottom"] + 40, "the stepper is not under the graph"
        assert stepper["bottom"] <= PHONE["height"], "the stepper is below the first screen"
        for _ in range(2):
            app.page.click("#gs-stepper .gs-next")
            app.page.wait_for_timeout(200)
            assert app.page.evaluate("scrollY") == 0, "Next scrolled the page"
            assert rect(app.page, "#gs-graph .gs-graph-frame")["top"] >= 0
        # the sticky header no longer covers content when the page scrolls
        app.page.evaluate("window.scrollTo(0, 400)")
        assert rect(app.page, ".gs-header")["bottom"] <= 0
        assert app.errors == []
    finally:
        app.close()


def test_on_a_phone_the_tensors_table_cuts_no_word_and_shows_the_badge(browser, server):
    app = page(browser, server, PHONE)
    try:
        trace = app.open(f"?snippet={BIG}")
        last_backward = max(s["index"] for s in trace["steps"] if s["kind"] == "backward")
        app.page.evaluate(f"window.gradstep.viewer.setStep({last_backward})")
        app.page.locator(".gs-tensors").scroll_into_view_if_needed()
        app.page.wait_for_timeout(300)
        # no cell breaks a word over two lines (a word's first and last letter on one line)
        broken = app.page.evaluate(
            """() => {
              const out = [];
              for (const td of document.querySelectorAll('.gs-tensors tbody td')) {
                const walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
                for (let n = walker.nextNode(); n; n = walker.nextNode()) {
                  for (const m of n.textContent.matchAll(/[A-Za-z]{3,}/g)) {
                    const r = document.createRange();
                    r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
                    if (r.getClientRects().length > 1) out.push(m[0]);
                  }
                }
              }
              return out;
            }"""
        )
        assert broken == []
        badges = app.page.locator(".gs-tensors .gs-what-accumulated")
        assert badges.count() > 0
        # the badge is whole: inside the panel's box, or reachable by the panel's own scroll
        for i in range(badges.count()):
            whole = badges.nth(i).evaluate(
                "el => { const r = el.getBoundingClientRect(), p = el.closest('.gs-panel');"
                " const pr = p.getBoundingClientRect();"
                " return r.right <= pr.right + 1 || p.scrollWidth > p.clientWidth; }"
            )
            assert whole
        assert app.errors == []
    finally:
        app.close()


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1400", "390"])
def test_the_narration_of_a_failing_step_shows_the_whole_error(browser, server, viewport):
    app = page(browser, server, viewport)
    try:
        trace = app.open("?snippet=backward_twice_fails")
        last = len(trace["steps"]) - 1
        assert trace["steps"][last].get("error")
        app.page.evaluate(f"window.gradstep.viewer.setStep({last})")
        banner = app.page.locator("#gs-graph .gs-banner")
        assert banner.evaluate("b => b.scrollHeight <= b.clientHeight + 1"), "the error is cut"
        assert trace["steps"][last]["error"]["message"][:60] in banner.inner_text()
        assert app.errors == []
    finally:
        app.close()


def test_on_a_phone_the_side_by_side_title_is_whole(browser, server):
    app = page(browser, server, PHONE)
    try:
        original = app.open("?snippet=backward_twice_fails")
        apply_first_fix(app, original, "backward_through_freed_graph")
        title = app.page.locator(".gs-cmp-title")
        assert title.evaluate("t => t.scrollWidth <= t.clientWidth + 1")
        assert app.page.evaluate("document.documentElement.scrollWidth <= innerWidth + 1")
    finally:
        app.close()


ANOMALY = (Path(__file__).parents[1] / "cases" / "anomaly_nan_fails.py").read_text()


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1400", "390"])
def test_a_warnings_quoted_stack_keeps_its_lines_and_nothing_runs_out_of_its_box(browser, server, viewport):
    app = page(browser, server, viewport)
    try:
        app.open()
        trace = app.run_code(ANOMALY)
        last = len(trace["steps"]) - 1
        (message,) = [
            w["message"] for w in trace["steps"][last]["warnings"] if "forward call" in w["message"]
        ]
        app.page.evaluate(f"window.gradstep.viewer.setStep({last})")
        app.page.locator(".gs-warnings").first.scroll_into_view_if_needed()  # off-screen panels wait
        warning = app.page.locator(".gs-warning", has_text="forward call").first
        warning.wait_for()
        shown = warning.locator("span").inner_text()
        assert shown.splitlines() == message.splitlines(), "each of the message's lines is a line"
        assert warning.evaluate("w => w.scrollWidth <= w.clientWidth + 1"), "a long path runs out of the box"
        assert app.errors == []
    finally:
        app.close()


NOTED = """%matplotlib inline
import torch
from torch.utils.data import DataLoader, TensorDataset
data = TensorDataset(torch.randn(8, 3), torch.randn(8, 1))
w = torch.zeros(3, 1, requires_grad=True)
for x, y in DataLoader(data, batch_size=4, num_workers=2):
    loss = ((x @ w - y) ** 2).mean()
    loss.backward()
print(w.grad)
"""


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1400", "390"])
def test_the_run_status_offers_the_runs_notes_and_shows_them(browser, server, viewport):
    # The notes follow the step's narration in its box: on a phone, below what the box shows
    app = page(browser, server, viewport)
    try:
        app.open()
        trace = app.run_code(NOTED)
        assert len(trace["notes"]) == 2
        button = app.page.locator("#gs-run-status .gs-notes-link")
        assert button.inner_text() == "2 notes"
        button.click()
        first = app.page.locator(".gs-banner .gs-note").first
        shown = first.evaluate(
            """n => { const b = n.closest('.gs-banner').getBoundingClientRect(), r = n.getBoundingClientRect();
                      return r.top >= b.top - 1 && r.top < b.bottom && r.bottom > b.top; }"""
        )
        assert shown, "the first note is in the box's view"
        assert first.inner_text() == trace["notes"][0]
        app.run_code("import torch\nx = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()\n")
        assert app.page.locator("#gs-run-status .gs-notes-link").count() == 0, (
            "a run without notes offers none"
        )
        assert app.errors == []
    finally:
        app.close()
