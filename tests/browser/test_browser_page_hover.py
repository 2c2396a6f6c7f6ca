"""A node hovered when a new run arrives: the new trace may have fewer nodes, and the page must
draw it (it showed "Could not run: Cannot read properties of undefined (reading 'line')")."""

from __future__ import annotations

import pytest
from testkit.browser_support import Page, needs_chromium

pytestmark = needs_chromium

BIG = "import torch\nx = torch.ones(3, requires_grad=True)\ny = x\nfor i in range(6):\n    y = (y * 2).sin()\ny.sum().backward()\n"
SMALL = "import torch\nx = torch.ones(3, requires_grad=True)\n(x * 2).sum().backward()\n"


@pytest.fixture
def app(browser, server):
    page = Page(browser, server, viewport={"width": 1400, "height": 900})
    page.open()
    yield page
    page.close()


def test_a_run_with_fewer_nodes_draws_while_a_node_of_the_last_run_is_hovered(app):
    big = app.run_code(BIG)
    small_nodes = 3
    assert len(big["nodes"]) > small_nodes
    app.press("End")  # the last call: the whole graph drawn
    shown = [
        i
        for i in range(small_nodes, len(big["nodes"]))
        if app.page.locator(f'[data-node-id="{i}"]').is_visible()
        and 0 < app.page.locator(f'[data-node-id="{i}"]').bounding_box()["y"] < 850
    ]
    app.page.hover(f'[data-node-id="{shown[-1]}"]')  # a node the small run will not have; the pointer stays
    n = app.runs()
    app.page.focus(".cm-content")  # the keyboard, not the pointer: nothing leaves the node
    app.page.keyboard.press("Control+A")
    app.page.keyboard.press("Delete")
    app.page.keyboard.insert_text(SMALL)
    app.page.keyboard.press("Control+Enter")
    app.wait_runs(n + 1)  # fails with "Could not run: ..." when the hovered id is read in the new trace
    assert app.errors == []
