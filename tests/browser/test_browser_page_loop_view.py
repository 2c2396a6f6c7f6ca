"""What a loop looks like on the page: a module's weights shared by every iteration of an unrolled
LSTM are one edge into the loop's frame (not one per iteration), still coloured by the gradient
flowing to them; the last step of a training loop shows the iteration it ran, not an empty frame."""

from __future__ import annotations

from testkit.browser_support import needs_chromium
from testkit.real_models import catalog, loop_iterations

pytestmark = needs_chromium


LSTM = catalog.lstm(100)
LOOP = catalog.training_loop(20)


BUNDLE = "path.gs-edge[data-edge='g:cell>f:@1']"


def test_an_unrolled_lstms_shared_weights_are_one_edge_into_the_loop(app):
    app.open()
    app.run_code(LSTM)
    steps = loop_iterations(LSTM, "for x in xs")
    edge = app.page.locator(BUNDLE)
    assert edge.count() == 1
    assert (
        edge.get_attribute("aria-label")
        == f"Edges from cell into {steps} items of loop · {steps} iterations, drawn as one"
    )
    assert app.page.locator("text.gs-edge-count").all_text_contents() == [f"×{steps}"]
    # no other edge leaves the cell's box; what is left links the steps to each other, the input and the head
    drawn = app.page.locator("path.gs-edge").evaluate_all("els => els.map(e => e.dataset.edge)")
    assert [e for e in drawn if e.startswith("g:cell>")] == ["g:cell>f:@1"]
    assert len(drawn) < steps + 10, f"{len(drawn)} edges for {steps} steps"
    assert app.errors == []


def test_the_gradient_reaches_the_lstms_weights_along_the_bundled_edge(app):
    app.open()
    app.run_code(LSTM)
    app.press("End")  # loss.backward()
    app.page.wait_for_function(
        f"() => document.querySelector(\"{BUNDLE}\").classList.contains('gs-edge-flow')"
    )
    assert app.page.locator("g.gs-group[data-group='cell']").get_attribute("data-executed") == "true"
    app.press("Home")  # before the call: nothing flows
    app.page.wait_for_function(
        f"() => !document.querySelector(\"{BUNDLE}\").classList.contains('gs-edge-flow')"
    )
    assert app.errors == []


def _in_pane(page, selector: str) -> bool:
    return page.evaluate(
        """(sel) => {
          const pane = document.querySelector('.gs-graph-canvas').getBoundingClientRect();
          const r = document.querySelector(sel).getBoundingClientRect();
          return r.width > 0 && r.left >= pane.left && r.right <= pane.right && r.top >= pane.top && r.bottom <= pane.bottom;
        }""",
        selector,
    )


def test_the_last_step_of_a_training_loop_shows_the_iteration_it_ran(app):
    app.open()
    trace = app.run_code(LOOP)
    n = loop_iterations(LOOP, "for epoch in")
    last = f"g.gs-group[data-group='@1.{n}']"
    app.press("End")
    app.page.wait_for_timeout(300)
    assert trace["steps"][-1]["kind"] == "update"  # the last iteration's opt.step()
    assert trace["steps"][-1]["iteration"] == n
    assert _in_pane(app.page, last), "the box of the iteration the optimizer stepped is in view"
    backward = max(i for i, s in enumerate(trace["steps"]) if s["kind"] == "backward")
    app.page.evaluate(f"window.gradstep.viewer.setStep({backward})")
    app.page.wait_for_timeout(300)
    assert app.page.locator(last).get_attribute("data-executed") == "true"
    assert _in_pane(app.page, last), "the box of the iteration whose backward ran is in view"
    app.shot("loop_view_training_loop_last_step_1400")
    assert app.errors == []


def test_stepping_to_the_last_step_ends_where_jumping_there_does(app):
    app.open()
    trace = app.run_code(LOOP)
    app.press("Home")
    for _ in range(len(trace["steps"]) - 1):
        app.page.keyboard.press("ArrowRight")
    app.page.wait_for_timeout(600)
    last = str(len(trace["steps"]) - 1)
    assert app.page.evaluate("() => document.querySelector('.gs-stepper').dataset.step") == last
    stepped = app.page.evaluate("() => document.querySelector('.gs-viewport').getAttribute('transform')")
    app.press("Home")
    app.page.wait_for_timeout(300)
    app.press("End")
    app.page.wait_for_timeout(600)
    assert stepped == app.page.evaluate(
        "() => document.querySelector('.gs-viewport').getAttribute('transform')"
    )
    assert app.errors == []
