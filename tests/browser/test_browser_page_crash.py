"""A run that ends with an error outside a backward (a TypeError at `w - 0.1 * w.grad`) gets a chip
on the timeline after its last step, at the line that raised: clicked or chosen with the keyboard it
goes to that step, the editor marks the line with the error, and the narration says why."""

from __future__ import annotations

import pytest
from testkit.browser_support import Page, needs_chromium
from testkit.learner_code import REBOUND_LEAF_LOOP

pytestmark = needs_chromium

WIDE = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}

REBOUND = REBOUND_LEAF_LOOP


def _current(app: Page) -> int:
    return int(app.page.locator(".gs-stepper").get_attribute("data-step"))


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1400", "390"])
def test_an_error_outside_a_backward_gets_a_chip_that_goes_to_its_step(browser, server, viewport):
    app = Page(browser, server, reduced_motion="reduce", viewport=viewport)
    try:
        app.open()
        trace = app.run_code(REBOUND)
        last = len(trace["steps"]) - 1
        assert trace["steps"][last]["kind"] == "error"
        line = trace["error"]["line"]
        chips = app.page.locator("#gs-stepper .gs-tl-step")
        assert chips.count() == len(trace["steps"])
        chip = chips.nth(last)
        assert chip.inner_text().split() == [f"L{line}", "TypeError", "✕"]
        assert "gs-tl-error" in chip.get_attribute("class")
        # the keyboard: from the first step, Tab to the chip and Enter
        app.page.evaluate("window.gradstep.viewer.setStep(0)")
        chip.locator("button").focus()
        app.page.keyboard.press("Enter")
        assert _current(app) == last
        current = app.page.locator("[data-current-line]")
        assert current.inner_text() == REBOUND.splitlines()[line - 1]
        widget = app.page.locator(f'.gs-inline-error[data-error-line="{line}"]')
        assert widget.count() == 1 and trace["error"]["message"] in widget.inner_text()
        banner = app.page.locator(".gs-banner").inner_text()
        assert f"w names a non-leaf since line {line} (SubBackward0)" in banner
        # a click on another chip, then on this one
        chips.nth(0).locator("button").click()
        assert _current(app) == 0
        chip.locator("button").click()
        assert _current(app) == last
        assert chip.locator("button").get_attribute("aria-current") == "step"
        app.shot(f"crash_chip_{viewport['width']}")
        assert app.errors == []
    finally:
        app.close()
