"""A big model opens at a readable summary: a 12-layer GPT's blocks are labelled module boxes,
legible at 1400x900, each with its parameters' gradient norm (plain torch's, computed here); a
box expands in place; stepping with the keyboard ends at the view jumping there gives."""

from __future__ import annotations

import math

import pytest
import torch
from testkit.browser_support import Page, needs_chromium
from testkit.real_models import catalog

pytestmark = needs_chromium


GPT12 = catalog.gpt(12)

# Module boxes whose name is drawn whole inside the graph's pane at 10 px or more on screen.
LEGIBLE_BOXES = """() => {
  const pane = document.querySelector('.gs-graph-canvas').getBoundingClientRect();
  const out = [];
  for (const g of document.querySelectorAll('g.gs-group[data-group]')) {
    if (g.style.display === 'none' || g.classList.contains('gs-absent')) continue;
    const name = g.querySelector('text.gs-group-name');
    const r = name.getBoundingClientRect();
    if (!r.width || r.left < pane.left || r.right > pane.right || r.top < pane.top || r.bottom > pane.bottom) continue;
    const px = parseFloat(getComputedStyle(name).fontSize) * name.getScreenCTM().a;
    if (px >= 10) out.push({ group: g.dataset.group, px, name: name.textContent, norm: g.dataset.gradNorm ?? null,
      facts: [...g.querySelectorAll('text')].map((t) => t.textContent) });
  }
  return out;
}"""

VIEW = "() => document.querySelector('.gs-viewport').getAttribute('transform')"


def _torch_module_norms(code: str) -> dict[str, float]:
    """Run the snippet in plain torch: the L2 norm over each module's parameters' .grad."""
    scope: dict = {"__name__": "__snippet__"}
    exec(compile(code, "<snippet>", "exec"), scope)
    model: torch.nn.Module = scope["model"]
    out = {}
    for path, mod in model.named_modules(prefix="model"):
        grads = [p.grad for p in mod.parameters() if p.grad is not None]
        if grads:
            out[path] = math.sqrt(sum(float(g.double().norm()) ** 2 for g in grads))
    return out


@pytest.fixture(scope="module")
def gpt_page(browser, server):
    app = Page(browser, server, reduced_motion="reduce", viewport={"width": 1400, "height": 900})
    app.open()
    trace = app.run_code(GPT12)
    assert trace["status"] == "ok"
    app.press("End")
    app.page.wait_for_timeout(300)
    yield app, trace
    app.close()


def test_a_12_layer_gpts_backward_step_shows_at_least_15_legible_module_boxes(gpt_page):
    app, trace = gpt_page
    boxes = app.page.evaluate(LEGIBLE_BOXES)
    assert len(boxes) >= 15, boxes
    blocks = {b["group"] for b in boxes}
    assert {f"model.h.{i}" for i in range(12)} <= blocks, "every block of the 12 is in view"
    # each says how many nodes it holds and what ran on the backward step
    h0 = next(b for b in boxes if b["group"] == "model.h.0")
    size = sum(1 for n in trace["nodes"] if (n.get("module") or "").startswith("model.h.0")) + sum(
        1 for n in trace["nodes"] if (n.get("tensor") or "").startswith("model.h.0.") and not n.get("module")
    )
    assert h0["facts"][1] == f"{size} nodes · ran {size}/{size}", h0["facts"]
    app.shot("summary_gpt12_backward_1400")
    assert app.errors == []


def test_each_module_boxs_gradient_norm_is_plain_torchs(gpt_page):
    app, _ = gpt_page
    want = _torch_module_norms(GPT12)
    boxes = app.page.evaluate(LEGIBLE_BOXES)
    assert boxes
    for b in boxes:
        assert b["norm"] is not None, b
        assert float(b["norm"]) == pytest.approx(want[b["group"]], rel=1e-4), b["group"]
        assert any(f.startswith("‖grad‖ ") for f in b["facts"]), b["facts"]


def test_expanding_a_block_keeps_it_where_it_was_and_lays_out_only_it_and_its_ancestors(browser, server):
    app = Page(browser, server, reduced_motion="reduce", viewport={"width": 1400, "height": 900})
    try:
        app.open()
        app.run_code(GPT12)
        app.press("End")
        app.page.wait_for_timeout(300)
        box = app.page.locator('g.gs-group[data-group="model.h.4"] rect.gs-body').bounding_box()
        scale = app.page.evaluate(VIEW)
        app.page.click('g.gs-group[data-group="model.h.4"]')
        app.page.wait_for_selector('g.gs-frame[data-group="model.h.4"]')
        frame = app.page.locator('g.gs-frame[data-group="model.h.4"] rect.gs-frame-box').bounding_box()
        assert abs(frame["x"] - box["x"]) < 1.5 and abs(frame["y"] - box["y"]) < 1.5, (box, frame)
        assert app.page.evaluate(VIEW).split("scale")[1] == scale.split("scale")[1], "same zoom"
        # its submodules are boxes now, and only the block and the containers around it were laid out
        assert app.page.locator('g.gs-group[data-group="model.h.4.attn"]').count() == 1
        laid = app.page.evaluate("() => window.gradstep.viewer.lastLayout.laidOut")
        assert laid <= 4, laid
        app.shot("summary_gpt12_expanded_block_1400")
        assert app.errors == []
    finally:
        app.close()


def test_stepping_with_the_keyboard_through_animated_pans_ends_at_the_view_jumping_there_gives(
    browser, server
):
    app = Page(browser, server, viewport={"width": 1400, "height": 900})  # animations on
    try:
        app.open()
        trace = app.run_code(GPT12)
        app.press("Home")
        app.page.wait_for_timeout(500)
        views = set()
        for _ in range(len(trace["steps"]) - 1):
            app.page.keyboard.press("ArrowRight")
            app.page.wait_for_timeout(60)  # shorter than a pan: each press cuts the last one short
            views.add(app.page.evaluate(VIEW))
        app.page.wait_for_timeout(800)
        last = str(len(trace["steps"]) - 1)
        assert app.page.evaluate("() => document.querySelector('.gs-stepper').dataset.step") == last
        stepped = app.page.evaluate(VIEW)
        assert len(views) > 2, "the view moved while stepping"
        app.press("Home")
        app.page.wait_for_timeout(800)
        app.press("End")
        app.page.wait_for_timeout(800)
        assert app.page.evaluate("() => document.querySelector('.gs-stepper').dataset.step") == last
        assert stepped == app.page.evaluate(VIEW)
        assert app.errors == []
    finally:
        app.close()
