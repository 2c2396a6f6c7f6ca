"""retain_grad() in the page (issue 24, point 1): its line is a step of the timeline, the tensor's
row appears from that step with the .grad plain torch has there, and a retain_grad() after the only
backward says why .grad stays None, with a verified fix."""

from __future__ import annotations

import pytest
from testkit.browser_support import Page, fmt_grad, needs_chromium

pytestmark = needs_chromium

BEFORE = """import torch
x = torch.tensor([1.0, 2.0], requires_grad=True)
h = x * 3
h.retain_grad()
z = (h * h).sum()
z.backward()
"""
AFTER = """import torch
x = torch.tensor([1.0, 2.0], requires_grad=True)
h = x * 3
z = (h * h).sum()
z.backward()
h.retain_grad()
"""


def _plain_h_grad(code: str, upto_line: int):
    scope: dict = {}
    exec(compile("\n".join(code.splitlines()[:upto_line]), "<plain>", "exec"), scope)  # plain torch
    return scope["h"]


def _go_to_line(app: Page, trace: dict, line: int) -> int:
    index = next(s["index"] for s in trace["steps"] if s.get("line") == line and s["kind"] == "forward")
    app.page.evaluate(f"window.gradstep.viewer.setStep({index})")
    return index


@pytest.mark.parametrize("code, line", [(BEFORE, 4), (AFTER, 6)], ids=["before_backward", "after_backward"])
def test_the_retain_grad_line_is_a_step_and_the_tensor_shows_from_it(app, code, line):
    app.open()
    trace = app.run_code(code)
    index = _go_to_line(app, trace, line)
    chips = app.page.locator(".gs-timeline li")
    assert chips.count() == len(trace["steps"])
    assert f"L{line}" in chips.nth(index).inner_text()
    plain = _plain_h_grad(code, line)
    assert plain.retains_grad and not plain.is_leaf and plain.grad is None  # plain torch at that line
    row = app.page.locator('.gs-tensors [data-tensor-grad="h"]')
    assert row.count() == 1 and row.inner_text() == fmt_grad(None)
    assert "h.retain_grad()" in app.page.locator("#gs-graph .gs-narration").inner_text()
    assert app.errors == []


def test_retain_grad_after_the_backward_says_why_grad_stays_none_and_the_fix_fills_it(app):
    app.open()
    trace = app.run_code(AFTER)
    _go_to_line(app, trace, 6)
    plain = _plain_h_grad(AFTER, 6)
    assert plain.grad is None  # plain torch: nothing kept it
    narration = app.page.locator("#gs-graph .gs-narration").inner_text()
    assert "already ran through" in narration and "h.grad stays None" in narration
    card = app.page.locator('.gs-diag[data-kind="grad_of_non_leaf"]')
    assert card.count() == 1 and "stays None" in card.locator(".gs-diag-message").inner_text()
    fix = next(d for d in trace["diagnoses"] if d["kind"] == "grad_of_non_leaf")["fixes"][0]["code"]
    scope: dict = {}
    exec(compile(fix, "<plain>", "exec"), scope)  # the offered fix, in plain torch
    assert scope["h"].grad is not None
    assert app.errors == []
