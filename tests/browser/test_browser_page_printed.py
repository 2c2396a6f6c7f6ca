"""What the code printed is reachable from the step it belongs to: on a phone (390×844) it shows
under the step buttons, its last lines and a button for all of them, by keyboard too; at 1400×900
the Output panel beside the graph shows it and nothing is added under the buttons."""

from __future__ import annotations

import pytest
from testkit.browser_support import Page, needs_chromium

pytestmark = needs_chromium

WIDE = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}

PRINTS = """import torch
x = torch.ones(6, 3, requires_grad=True)
for i in range(5):
    print("iteration", i)
print(x.detach() * 2)
loss = (x ** 2).sum()
loss.backward()
print("grad norm", x.grad.norm().item())
"""

# each element that shows a text, visible and inside the window: (its text, whether it is)
ON_SCREEN = """(texts) => texts.map(text => {
  const all = [...document.querySelectorAll('pre')].filter(e => e.textContent.includes(text));
  return all.some(e => {
    const r = e.getBoundingClientRect();
    const style = getComputedStyle(e);
    return r.width > 0 && r.height > 0 && style.visibility !== 'hidden'
      && r.top >= 0 && r.bottom <= window.innerHeight && r.left >= 0 && r.right <= window.innerWidth;
  });
})"""


def _show_step(app: Page, i: int) -> None:
    """Go to step ``i`` with the keyboard, from the step buttons, and bring them into view."""
    app.page.locator("#gs-stepper .gs-tl-step button").first.focus()
    app.page.keyboard.press("Home")
    for _ in range(i):
        app.page.keyboard.press("ArrowRight")
    assert app.page.locator(".gs-stepper").get_attribute("data-step") == str(i)
    app.page.locator("#gs-stepper .gs-next").scroll_into_view_if_needed()


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1400", "390"])
def test_a_steps_output_is_on_screen_with_its_step_buttons(browser, server, viewport):
    app = Page(browser, server, reduced_motion="reduce", viewport=viewport)
    try:
        app.open()
        trace = app.run_code(PRINTS)
        first = trace["steps"][0]
        assert first["stdout"].startswith("iteration 0\n")
        _show_step(app, 0)
        last_line = first["stdout"].rstrip("\n").splitlines()[-1]
        assert app.page.evaluate(ON_SCREEN, [last_line]) == [True], (
            "the step's last printed line is on screen"
        )
        strip = app.page.locator("#gs-stepper .gs-step-output")
        if viewport is WIDE:
            assert not strip.is_visible(), "at 1400 the Output panel beside the graph shows it: no strip"
        else:
            assert strip.is_visible()
            # all of it, by keyboard: the button under the lines
            more = strip.locator(".gs-step-output-more")
            assert more.inner_text() == f"all {len(first['stdout'].splitlines())} lines"
            more.focus()
            app.page.keyboard.press("Enter")
            assert more.get_attribute("aria-expanded") == "true"
            assert strip.locator("pre").inner_text() == first["stdout"].rstrip("\n")
            more.focus()
            app.page.keyboard.press("Enter")
            assert more.get_attribute("aria-expanded") == "false"
        # what was printed after the last step shows at the last step
        _show_step(app, len(trace["steps"]) - 1)
        after = trace["stdout"][sum(len(s["stdout"]) for s in trace["steps"]) :]
        assert after.startswith("grad norm")
        assert app.page.evaluate(ON_SCREEN, [after.strip()]) == [True]
        app.shot(f"printed_{viewport['width']}")
        assert app.errors == []
    finally:
        app.close()


def test_a_step_that_printed_nothing_shows_no_strip(browser, server):
    app = Page(browser, server, reduced_motion="reduce", viewport=PHONE)
    try:
        app.open()
        trace = app.run_code(
            "import torch\nx = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()\n"
        )
        assert not trace["stdout"]
        assert not app.page.locator("#gs-stepper .gs-step-output").is_visible()
        assert app.errors == []
    finally:
        app.close()
