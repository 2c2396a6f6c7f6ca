"""One number format in the page (issue 24, point 7, the front end's part): a 1×2 weight's .grad is
shown 2-D, as torch prints it, alike on its node, in the Tensors panel and in the narration's links;
the diagnoses' markdown `code` spans are rendered as code, never as raw backticks."""

from __future__ import annotations

from testkit.browser_support import needs_chromium
from testkit.torch_print import printed

pytestmark = needs_chromium

CODE = """import torch
w = torch.tensor([[0.31, -1.7]], requires_grad=True)
x = torch.tensor([[2.0], [0.5]])
loss = (w @ x).pow(2).sum()
loss.backward(retain_graph=True)
loss.backward()
"""


def test_a_1x2_weight_is_shown_2d_as_torch_prints_it_everywhere(app):
    app.open()
    trace = app.run_code(CODE)
    scope: dict = {}
    exec(compile(CODE, "<plain>", "exec"), scope)  # plain torch, in this process
    want = "[[" + ", ".join(printed(scope["w"].grad)) + "]]"
    app.page.evaluate(f"window.gradstep.viewer.setStep({len(trace['steps']) - 1})")
    assert app.page.locator('#gs-graph [data-grad-for="w"]').text_content() == want
    assert app.page.locator('.gs-tensors [data-tensor-grad="w"]').inner_text() == want
    # where the narration shows the value, it is the same text
    narration = app.page.locator("#gs-graph .gs-banner").inner_text()
    if "w.grad" in narration and "[[" in narration:
        assert want in narration
    assert app.errors == []


def test_diagnoses_render_backticks_as_code(app):
    trace = app.open("?snippet=training_loop_no_zero_grad")
    texts = [d["message"] for d in trace["diagnoses"]] + [
        t for d in trace["diagnoses"] for f in d["fixes"] for t in (f["title"], f["explanation"])
    ]
    assert any("`" in t for t in texts), "no backticks to render in this run's diagnoses"
    shown = app.page.locator("#gs-diagnoses").inner_text()
    assert "`" not in shown
    assert app.page.locator("#gs-diagnoses code").count() > 0
    assert app.errors == []
