"""A run too big for the server's memory limit: the page says which limit stopped it, its value and
what to do, and shows the graph the run recorded before it (its steps on the timeline, their nodes
drawn), at 1400×900 and on a phone."""

from __future__ import annotations

import pytest
from testkit.browser_support import Page, needs_chromium

pytestmark = needs_chromium

WIDE = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}

# A graph first, then a tensor of 1 GB: more than a run's 1,024 MB allow once torch is loaded
TOO_BIG = """\
import torch
w = torch.randn(64, 64, requires_grad=True)
x = torch.randn(8, 64)
h = (x @ w).tanh()
loss = h.pow(2).mean()
big = torch.ones(2**28)
loss.backward()
"""


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1400", "390"])
def test_a_run_stopped_by_the_memory_limit_says_so_and_shows_what_it_recorded(browser, server, viewport):
    app = Page(browser, server, reduced_motion="reduce", viewport=viewport)
    try:
        app.open()
        trace = app.run_code(TOO_BIG)
        assert (trace["status"], trace["limit"], trace["error"]["line"]) == ("limit", "memory", 6)
        recorded = [(s["kind"], s["line"]) for s in trace["steps"] if s["kind"] != "error"]
        assert recorded == [("forward", 4), ("forward", 5)]  # the lines that built nodes, before line 6
        status = app.page.locator("#gs-run-status").inner_text()
        assert status == f"Memory limit at line 6 · {len(trace['steps'])} steps kept"
        app.page.evaluate(f"window.gradstep.viewer.setStep({len(recorded) - 1})")
        banner = app.page.locator(".gs-banner .gs-note-error")
        assert banner.count() == 1
        # first in the banner, above the step's narration: on a phone what follows is scrolled away
        assert app.page.evaluate(
            "document.querySelector('.gs-banner').firstElementChild.classList.contains('gs-note-error')"
        )
        said = banner.inner_text()
        assert said.startswith("Run stopped by the memory limit.")
        for words in ("1,024 MB of memory", "same graph", "gradstep.record()", "GRADSTEP_MEMORY_MB"):
            assert words in said
        # the partial graph: the recorded step's nodes are drawn
        drawn = app.page.locator("[data-node-id]")
        assert drawn.count() == len(trace["steps"][len(recorded) - 1]["nodes"])
        assert "PowBackward0" in app.page.locator(".gs-graph-canvas").inner_text()
        app.shot(f"memory_limit_{viewport['width']}")
        assert app.errors == []
    finally:
        app.close()


def test_a_run_stopped_by_a_limit_opens_where_it_stopped(app):
    app.open()
    trace = app.run_code(TOO_BIG)
    assert trace["status"] == "limit"
    last = len(trace["steps"]) - 1
    assert app.page.evaluate("() => document.querySelector('.gs-stepper').dataset.step") == str(last)
    assert trace["steps"][last]["line"] == trace["error"]["line"]  # the line the limit stopped
    # the graph it had then is drawn, and the page says which limit stopped it
    assert app.page.locator("[data-node-id]").count() == len(trace["steps"][last]["nodes"])
    assert (
        app.page.locator(".gs-banner .gs-note-error")
        .inner_text()
        .startswith("Run stopped by the memory limit.")
    )
    assert app.errors == []


def test_a_run_that_ends_well_still_opens_at_its_first_step(app):
    app.open()
    trace = app.run_code(TOO_BIG.replace("big = torch.ones(2**28)\n", ""))
    assert trace["status"] == "ok"
    assert app.page.evaluate("() => document.querySelector('.gs-stepper').dataset.step") == "0"
    assert app.errors == []
