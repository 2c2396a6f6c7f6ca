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
