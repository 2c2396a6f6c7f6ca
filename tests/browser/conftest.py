"""What the page's browser tests share."""

from __future__ import annotations

import pytest
from testkit.browser_support import Page


@pytest.fixture
def app(browser, server):
    """The app at a desktop size (1400x900), animations off. test_browser.py and
    test_browser_explain.py keep their own, at Page's default size."""
    p = Page(browser, server, reduced_motion="reduce", viewport={"width": 1400, "height": 900})
    yield p
    p.close()
