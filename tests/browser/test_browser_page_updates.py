"""The optimizer in the page: a training loop's zero_grad and step are timeline steps, the first
step of each iteration is labelled with it, and the narration and the tensors panel say what the
call did, as plain torch shows it."""

from __future__ import annotations

import pytest
from gradstep.printing import fmt_number
from testkit.browser_support import Page, fmt_grad, needs_chromium

pytestmark = needs_chromium

CODE = """import torch
import torch.nn as nn
torch.manual_seed(0)
model = nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(4, 2)
y = torch.randn(4, 1)
for epoch in range(3):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
"""
ZERO, STEP = 9, 12


def _plain_first_step_delta() -> float:
    """How far plain torch's first opt.step() moves model.weight."""
    scope: dict = {}
    head = CODE.split("for epoch")[0]
    exec(compile(head, "<plain>", "exec"), scope)
    model, opt, x, y = scope["model"], scope["opt"], scope["x"], scope["y"]
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    before = model.weight.detach().clone()
    opt.step()
    return (model.weight.detach() - before).norm().item()


def _go(app: Page, index: int) -> None:
    app.page.evaluate(f"window.gradstep.viewer.setStep({index})")
    app.page.wait_for_function(f"document.querySelector('.gs-stepper').dataset.step === '{index}'")


@pytest.mark.parametrize("width", [1400, 390])
def test_the_timeline_shows_update_steps_and_iterations(browser, server, width):
    app = Page(browser, server, viewport={"width": width, "height": 900})
    try:
        app.open()
        trace = app.run_code(CODE)
        chips = app.page.locator(".gs-timeline li")
        assert chips.count() == len(trace["steps"])
        updates = [s["index"] for s in trace["steps"] if s["kind"] == "update"]
        assert [chips.nth(i).locator("button").inner_text().split()[0:2] for i in updates] == [
            ["L9", "zero_grad"],
            ["L12", "step"],
        ] * 3
        second = next(s["index"] for s in trace["steps"] if s.get("iteration") == 2)
        assert chips.nth(second).locator(".gs-tl-iter").inner_text() == "iteration 2"
        assert app.page.locator(".gs-tl-iter").all_inner_texts() == [
            "iteration 1",
            "iteration 2",
            "iteration 3",
        ]
        assert app.errors == []
    finally:
        app.close()


def test_the_narration_and_tensors_say_what_zero_grad_and_step_did(app):
    app.open()
    trace = app.run_code(CODE)
    zero2 = next(s["index"] for s in trace["steps"] if s["line"] == ZERO and s.get("iteration") == 2)
    _go(app, zero2)
    narration = app.page.locator("#gs-graph .gs-narration").inner_text()
    assert narration.startswith(
        "opt.zero_grad() (line 9, iteration 2) set the .grad of 2 parameters to None: model.weight and model.bias."
    )
    # plain torch: after zero_grad() (set_to_none=True by default) the .grad is None
    cell = app.page.locator('.gs-tensors [data-tensor-grad="model.weight"]')
    assert cell.inner_text() == fmt_grad(None)
    row = app.page.locator('.gs-tensors tr:has([data-tensor-grad="model.weight"])')
    assert ".grad → None" in row.inner_text()

    step1 = next(s["index"] for s in trace["steps"] if s["line"] == STEP)
    _go(app, step1)
    delta = fmt_number(_plain_first_step_delta())
    narration = app.page.locator("#gs-graph .gs-narration").inner_text()
    assert narration.startswith("opt.step() (line 12, iteration 1) updated 2 parameters")
    assert f"model.weight by ‖{delta}‖" in narration
    assert f"updated by ‖{delta}‖" in app.page.locator(".gs-tensors").inner_text()
    assert app.errors == []
