"""Accessibility (issue 24): axe-core finds no serious or critical violation on the app (wide and on a
phone, light and dark), the /embed page and a static export, at a step where a backward failed.

axe-core is vendored for the tests only (server/testkit/vendor/axe.min.js, MPL-2.0, version in
server/testkit/vendor/README.md); it is evaluated in the page (page.evaluate is not subject to the pages'
Content-Security-Policy, which refuses inline and foreign scripts)."""

from __future__ import annotations

from pathlib import Path

import pytest
import testkit
from gradstep import snippets
from test_browser_export import FilePage, export
from testkit.browser_support import Page, needs_chromium
from testkit.real_models import catalog

pytestmark = needs_chromium

AXE = (Path(testkit.__file__).parent / "vendor" / "axe.min.js").read_text(encoding="utf-8")
SNIPPET = "backward_twice_fails"  # diagnoses, an error step, freed nodes
# WCAG 2.x A and AA, and axe's best practices
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]


def serious(target) -> list[str]:
    """Run axe in a page or frame; the serious and critical violations, one line each."""
    if not target.evaluate("typeof window.axe === 'object'"):
        target.evaluate(AXE + "\n;true")
    result = target.evaluate(
        "(tags) => axe.run(document, { runOnly: { type: 'tag', values: tags }, resultTypes: ['violations'] })",
        TAGS,
    )
    out = []
    for v in result["violations"]:
        if v["impact"] in ("serious", "critical"):
            for node in v["nodes"][:5]:
                out.append(
                    f"{v['id']} ({v['impact']}): {node['target']} — {node.get('failureSummary', '')[:200]}"
                )
    return out


def mismatched_names(target) -> list[str]:
    """axe's label-content-name-mismatch alone: elements whose name does not hold the text they show."""
    if not target.evaluate("typeof window.axe === 'object'"):
        target.evaluate(AXE + "\n;true")
    result = target.evaluate(
        "() => axe.run(document, { runOnly: { type: 'rule', values: ['label-content-name-mismatch'] } })"
    )
    return [str(n["target"]) for v in result["violations"] for n in v["nodes"]]


def at_failed_step(target) -> None:
    target.evaluate(
        "(() => { const v = window.gradstep ? window.gradstep.viewer : window.gradstepEmbed.viewer;"
        " v.setStep(v.model.steps.length - 1); })()"
    )
    target.wait_for_timeout(300)


@pytest.mark.parametrize(
    "size,scheme",
    [((1400, 900), "light"), ((1400, 900), "dark"), ((390, 844), "light"), ((390, 844), "dark")],
)
def test_the_app_has_no_serious_accessibility_violation(browser, server, size, scheme):
    app = Page(
        browser,
        server,
        reduced_motion="reduce",
        viewport={"width": size[0], "height": size[1]},
        color_scheme=scheme,
    )
    try:
        app.open(f"?snippet={SNIPPET}")
        at_failed_step(app.page)
        assert serious(app.page) == []
        # the picker open, with its filter
        app.page.click("#gs-picker summary")
        assert serious(app.page) == []
        app.page.keyboard.press("Escape")
        # the Share dialog
        app.page.click("#gs-share")
        app.page.wait_for_selector("#gs-share-dialog[open]")
        assert serious(app.page) == []
        assert app.errors == []
    finally:
        app.close()


def test_the_side_by_side_view_has_no_serious_accessibility_violation(browser, server):
    app = Page(browser, server, reduced_motion="reduce", viewport={"width": 1400, "height": 900})
    try:
        app.open(f"?snippet={SNIPPET}")
        n = app.runs()
        app.page.locator(".gs-apply-fix").first.click()
        app.wait_runs(n + 1)
        app.page.wait_for_selector("#gs-compare[data-rows]")
        assert serious(app.page) == []
    finally:
        app.close()


@pytest.mark.parametrize("editor", ["readonly", "hidden", "editable"])
def test_the_embed_has_no_serious_accessibility_violation(browser, server, editor):
    tab = Page(browser, server, reduced_motion="reduce", viewport={"width": 900, "height": 900})
    try:
        tab.page.goto(f"{server}/embed?snippet={SNIPPET}&editor={editor}")
        tab.page.wait_for_function("document.body.dataset.state === 'ready'", timeout=60_000)
        at_failed_step(tab.page)
        assert serious(tab.page) == []
        assert tab.errors == []
    finally:
        tab.close()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_a_static_export_has_no_serious_accessibility_violation(browser, tmp_path, theme):
    path, _ = export(tmp_path, snippets.load_all()[SNIPPET].code, theme=theme)
    page = FilePage(browser, path)
    try:
        page.open()
        page.page.evaluate(
            "(() => { const root = document.querySelector('.gs-stepper');"
            " const last = Number(root.dataset.steps) - 1; document.querySelector('#gradstep').focus(); return last; })()"
        )
        page.press("End")
        page.page.wait_for_timeout(300)
        assert serious(page.page) == []
    finally:
        page.close()


# four modules around sqrt at zero: a nan .grad on the leaves, module frames, small enough to open whole
NAN_MODULES = """import torch
import torch.nn as nn


class Dist(nn.Module):
    def forward(self, a, b):
        return torch.sqrt((a - b) ** 2)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.dist = Dist()
        self.act = nn.Tanh()
        self.out = nn.Linear(3, 1)

    def forward(self, x):
        h = self.act(self.lin(x))
        return self.out(self.dist(h, h.detach()))


torch.manual_seed(0)
net = Net()
x = torch.tensor([[0.0, 3.0, 4.0]], requires_grad=True)
net(x).sum().backward()
"""

# items of the graph the pane cuts: some of their texts show, some do not
CUT_ITEMS = """() => {
  const pane = document.querySelector('.gs-graph-canvas').getBoundingClientRect();
  const inside = (r) => r.width > 0 && r.left >= pane.left && r.right <= pane.right && r.top >= pane.top && r.bottom <= pane.bottom;
  return [...document.querySelectorAll('g.gs-item')].filter((g) => {
    const texts = [...g.querySelectorAll('text')].filter((t) => t.textContent.trim());
    const shown = texts.filter((t) => inside(t.getBoundingClientRect())).length;
    return shown > 0 && shown < texts.length;
  }).length;
}"""


def _phone(browser, server) -> Page:
    return Page(browser, server, reduced_motion="reduce", viewport={"width": 390, "height": 844})


def test_graph_items_the_pane_cuts_are_named_by_what_they_show_on_a_phone(browser, server):
    app = _phone(browser, server)
    try:
        app.open()
        trace = app.run_code(NAN_MODULES)
        assert trace["status"] == "ok"
        app.press("End")
        app.page.wait_for_timeout(300)
        app.page.locator(".gs-graph-canvas").scroll_into_view_if_needed()
        assert serious(app.page) == []
        for _ in range(2):  # nodes larger than the pane: it cuts some (they slide under the toolbar too)
            app.page.get_by_role("button", name="Zoom in").click()
        app.page.wait_for_timeout(400)
        assert app.page.evaluate(CUT_ITEMS) > 0
        assert mismatched_names(app.page) == []
        # a leaf with its nan .grad is named by its texts, its details described
        leaf = app.page.locator("g.gs-leaf[data-node-id]").first
        assert leaf.get_attribute("aria-label") is None
        assert leaf.get_attribute("aria-description").startswith("Leaf ")
        assert app.errors == []
    finally:
        app.close()


@pytest.mark.parametrize("model", ["gpt12", "lstm"])
def test_a_big_models_module_boxes_have_no_serious_accessibility_violation_on_a_phone(browser, server, model):
    code = catalog.gpt(12) if model == "gpt12" else catalog.lstm(100)
    app = _phone(browser, server)
    try:
        app.open()
        assert app.run_code(code)["status"] == "ok"
        app.press("End")
        app.page.wait_for_timeout(400)
        app.page.locator(".gs-graph-canvas").scroll_into_view_if_needed()
        boxes = app.page.locator("g.gs-group[data-group]")
        assert boxes.count() >= 12, "the summary's collapsed boxes (blocks, or the loop's steps)"
        assert serious(app.page) == []
        assert app.errors == []
    finally:
        app.close()
