"""The stale-graph training loop on the page: the diagnosis card lists moving the forward into the
loop before retain_graph=True, each with what its run computed, and Apply fix runs the first one;
at the desktop size and on a phone."""

from __future__ import annotations

import pytest
from test_browser_explain import apply_first_fix, diagnosis_of
from testkit.browser_support import Page, needs_chromium

pytestmark = needs_chromium

KIND = "stale_graph_in_loop"


@pytest.mark.parametrize("size", [(1400, 900), (390, 844)], ids=["desktop", "phone"])
def test_the_card_offers_the_fix_that_keeps_the_loop_first_with_what_each_computes(browser, server, size):
    app = Page(browser, server, reduced_motion="reduce", viewport={"width": size[0], "height": size[1]})
    try:
        original = app.open("?snippet=stale_graph_training_loop_fails")
        card = app.page.locator(f'.gs-diag[data-kind="{KIND}"]')
        fixes = diagnosis_of(original, KIND)["fixes"]
        assert app.page.locator(f'.gs-diag[data-kind="{KIND}"] .gs-fix-title').all_inner_texts() == [
            f["title"] for f in fixes
        ]
        assert "into the loop" in fixes[0]["title"] and "retain_graph=True" in fixes[1]["title"]
        shown = card.locator(".gs-fix-outcome").all_inner_texts()
        assert len(shown) == 2 and all("model.weight.grad" in t for t in shown)
        assert "the same every iteration" in shown[1]
        card.locator(".gs-fix").first.scroll_into_view_if_needed()
        app.shot(f"stale_graph_card_{size[0]}")
        fix, fixed = apply_first_fix(app, original, KIND)
        assert fixed["code"] == fix["code"] and fixed["status"] == "ok" and not fixed.get("diagnoses")
        assert app.errors == []
    finally:
        app.close()
