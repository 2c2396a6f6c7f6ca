"""An LSTM unrolled over 100 time steps (a chain of about 1,500 autograd nodes in one module) is
fully expanded by the layout worker: Expand all draws every node, and the worker does not fail
(the page would say so in its console and lay out on the main thread instead)."""

from __future__ import annotations

from testkit.browser_support import Page, needs_chromium
from testkit.real_models import catalog

pytestmark = needs_chromium

LSTM = catalog.lstm(100)


def test_expand_all_on_an_unrolled_lstm_draws_every_node_without_the_worker_failing(browser, server):
    app = Page(browser, server, reduced_motion="reduce", viewport={"width": 1400, "height": 900})
    console: list[str] = []
    app.page.on("console", lambda m: console.append(m.text))
    try:
        app.open()
        trace = app.run_code(LSTM)
        assert trace["status"] == "ok"
        groups = {n["module"].split(".")[0] for n in trace["nodes"] if n.get("module")}
        iterations = {n["iteration"] for n in trace["nodes"] if n.get("iteration")}
        # one box per time step, folded (the cell's parameters and the head are boxes of their own)
        assert app.page.locator('g.gs-group[data-group^="@"]').count() == len(iterations)
        app.page.click(".gs-expand-all")
        app.page.wait_for_function(
            "n => document.querySelectorAll('g.gs-item[data-node-id]').length === n && !document.querySelector('g.gs-group')",
            arg=len(trace["nodes"]),
            timeout=120_000,
        )
        layout = app.page.evaluate(
            "() => { const l = window.gradstep.viewer.lastLayout; return { items: l.items.size, frames: [...l.frames.keys()] }; }"
        )
        assert layout["items"] == len(trace["nodes"])
        assert set(layout["frames"]) >= groups
        assert not [t for t in console if "layout worker failed" in t], console
        assert app.errors == []
        app.page.wait_for_timeout(1000)  # the nodes in view are built before the picture
        app.shot("deep_layout_lstm_expanded_1400")
    finally:
        app.close()
