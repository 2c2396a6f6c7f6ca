"""A rebound name's old leaf on the page: at the second backward of `w = w - 0.1 * w.grad` the
tensors panel and the leaf's AccumulateGrad node show `w (line 2)` with the .grad plain torch
accumulated into that leaf, at a desktop and a phone size."""

from __future__ import annotations

import pytest
import torch
from testkit import truth
from testkit.browser_support import Page, fmt_grad, needs_chromium
from testkit.learner_code import REBOUND_LEAF_LOOP

pytestmark = needs_chromium

CODE = REBOUND_LEAF_LOOP
LABEL = "w (line 2)"


def _plain_grad_of_the_first_leaf() -> torch.Tensor:
    w = torch.randn(3, requires_grad=True)
    leaf = w
    x = torch.tensor([1.0, 2.0, 3.0])
    (w * x).sum().backward()
    w = w - 0.1 * w.grad
    (w * x).sum().backward()  # the second backward: through the subtraction into the first leaf
    return leaf.grad


@pytest.mark.parametrize("size", [(1400, 900), (390, 844)], ids=["desktop", "phone"])
def test_the_old_leaf_shows_its_label_and_real_grad_at_the_second_backward(browser, server, size):
    app = Page(browser, server, reduced_motion="reduce", viewport={"width": size[0], "height": size[1]})
    try:
        app.open()
        trace = app.run_code(CODE)
        second = [s for s in trace["steps"] if s["kind"] == "backward"][1]
        app.page.evaluate(f"window.gradstep.viewer.setStep({second['index']})")
        shown = next(t for t in second["tensors"] if t["name"] == LABEL)
        assert truth.grad_mismatch(_plain_grad_of_the_first_leaf(), shown["grad"]) is None
        expected = fmt_grad(shown["grad"])
        row = app.page.locator(f'.gs-tensors [data-tensor-grad="{LABEL}"]')
        assert row.count() == 1 and row.inner_text() == expected
        leaf = app.page.locator('[data-node-id][data-op="AccumulateGrad"] text.gs-leaf-name')
        assert LABEL in leaf.first.text_content()
        assert "No named tensor" not in app.page.locator(".gs-tensors").inner_text()
        app.shot(f"unnamed_leaf_{size[0]}")
        assert app.errors == []
    finally:
        app.close()
