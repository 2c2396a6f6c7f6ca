"""The page by keyboard alone (issue 24, point 4): leaving the editor, seeing focus on a graph node,
and Space on a timeline chip doing what Space does everywhere in the stepper (play)."""

from __future__ import annotations

import pytest
from testkit.browser_support import Page, needs_chromium

pytestmark = needs_chromium

CODE = (
    "import torch\nx = torch.tensor([1.0, 2.0], requires_grad=True)\ny = x * x\nz = y.sum()\n"
    "z.backward(retain_graph=True)\nz.backward()\n"
)


def focus_in_editor(app: Page) -> bool:
    return app.page.evaluate(
        "Boolean(document.activeElement && document.activeElement.closest('.cm-editor'))"
    )


def test_the_editor_says_how_to_leave_it_and_escape_then_tab_leaves_it(app):
    app.open("?snippet=retain_graph_accumulates")
    hint = app.page.locator("#gs-editor .gs-editor-hint")
    app.page.click(".cm-content")
    assert focus_in_editor(app)
    app.page.wait_for_timeout(250)  # its fade-in
    assert hint.is_visible() and "Esc, then Tab" in hint.inner_text()
    assert float(hint.evaluate("el => getComputedStyle(el).opacity")) > 0.8
    described = app.page.locator(".cm-content").get_attribute("aria-describedby")
    assert described == hint.get_attribute("id")
    code = app.page.evaluate("window.gradstep.editor.getCode()")
    app.page.keyboard.press("Escape")
    app.page.keyboard.press("Tab")
    assert not focus_in_editor(app)
    assert app.page.evaluate("window.gradstep.editor.getCode()") == code  # Tab moved on, indented nothing
    # unfocused, the hint is out of the way
    app.page.wait_for_timeout(250)
    assert float(hint.evaluate("el => getComputedStyle(el).opacity")) < 0.1
    assert app.errors == []


@pytest.mark.parametrize("state", ["new", "executed"])
def test_focus_on_a_graph_node_is_visible_whatever_it_shows(app, state):
    trace = app.run_code(CODE) if app.open() else None
    # a step where some node is new (the forward) or ran (the backward)
    want = "executed" if state == "executed" else "new"
    idx = next(
        i
        for i, s in enumerate(trace["steps"])
        if (want == "executed" and s["kind"] != "forward") or (want == "new" and s["kind"] == "forward")
    )
    app.page.evaluate(f"window.gradstep.viewer.setStep({idx})")
    node = app.page.locator(f"g.gs-item.gs-{state}").first
    assert node.count() == 1
    body = node.locator(".gs-body")

    def look():
        return body.evaluate(
            "el => { const s = getComputedStyle(el), g = getComputedStyle(el.parentNode);"
            " return [s.stroke, s.strokeWidth, g.outlineStyle, g.outlineWidth].join(' '); }"
        )

    app.page.keyboard.press("Tab")  # keyboard modality: focus() then matches :focus-visible
    unfocused = look()
    node.evaluate("el => el.focus()")
    assert node.evaluate("el => el.matches(':focus-visible')")
    assert look() != unfocused, "a focused node looks the same as an unfocused one"
    width = float(body.evaluate("el => parseFloat(getComputedStyle(el).strokeWidth)"))
    assert width >= 3.5
    assert app.errors == []


def test_space_on_a_timeline_chip_plays_and_enter_goes_to_its_step(app):
    trace = app.run_code(CODE) if app.open() else None
    n = len(trace["steps"])
    assert n >= 3
    app.page.evaluate("window.gradstep.viewer.setStep(0)")
    chip = app.page.locator(f'.gs-tl-step[data-index="{n - 1}"] button')
    chip.focus()
    app.page.keyboard.press(" ")
    play = app.page.locator(".gs-play")
    assert play.get_attribute("aria-pressed") == "true"
    # it plays from where it was, one step at a time: no jump to the chip's step
    assert int(app.page.locator(".gs-stepper").get_attribute("data-step")) < n - 1
    app.page.keyboard.press(" ")  # space again pauses
    assert play.get_attribute("aria-pressed") == "false"
    app.page.evaluate("window.gradstep.viewer.setStep(0)")
    chip.focus()
    app.page.keyboard.press("Enter")
    assert app.page.locator(".gs-stepper").get_attribute("data-step") == str(n - 1)
    assert app.errors == []


# the focused graph item as [its node id, absent?], or null when focus is not on one
FOCUSED_GRAPH_ITEM = """() => {
  const e = document.activeElement;
  return e && e.matches('#gs-graph g.gs-item') ? [e.dataset.nodeId ?? '', e.classList.contains('gs-absent')] : null;
}"""


@pytest.mark.parametrize("motion", ["reduce", "no-preference"])
def test_tab_reaches_every_shown_graph_item_and_no_absent_one(browser, server, motion):
    # a node not alive at the step is drawn transparent in its place; the keyboard must skip it as
    # the eye does, also after stepping back (it fades out, then leaves the Tab order)
    app = Page(browser, server, reduced_motion=motion, viewport={"width": 1400, "height": 900})
    try:
        trace = app.run_code(CODE) if app.open() else None
        last = len(trace["steps"]) - 1
        for step in (0, last, 0):
            app.page.evaluate(f"window.gradstep.viewer.setStep({step})")
            app.page.wait_for_timeout(500)  # past the fade
            items = app.page.locator("#gs-graph g.gs-item")
            shown = app.page.locator("#gs-graph g.gs-item:not(.gs-absent)")
            assert shown.count() >= 1
            if step == 0:
                assert shown.count() < items.count(), "step 0 must have a node not yet made"
            shown.first.focus()
            reached = []
            for _ in range(items.count() + 2):
                here = app.page.evaluate(FOCUSED_GRAPH_ITEM)
                if here is None:
                    break
                reached.append(here)
                app.page.keyboard.press("Tab")
            assert not [r for r in reached if r[1]], f"Tab landed on absent items at step {step}: {reached}"
            assert len(reached) == shown.count(), (step, reached)
        assert app.errors == []
    finally:
        app.close()
