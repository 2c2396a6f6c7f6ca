"""An exercise exported as the docs say (`gradstep export snippets/exercise_retain_graph.py --predict
code`), opened from file:// in Chromium with every network request refused: it asks, checks wrong and
right answers against plain torch run on the same code (testkit.truth.run_plain), and its
Content-Security-Policy refuses nothing it does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_browser_export import FilePage
from testkit.browser_support import needs_chromium
from testkit.truth import run_plain

pytestmark = needs_chromium

SNIPPET = Path(__file__).resolve().parents[2] / "snippets" / "exercise_retain_graph.py"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("exercise-export") / "retain_graph.html"
    r = subprocess.run(
        [sys.executable, "-m", "gradstep", "export", str(SNIPPET), "--predict", "code", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def plain():
    return run_plain(SNIPPET.read_text())


@pytest.fixture
def page(browser, exported):
    p = FilePage(browser, exported)
    p.open()
    yield p
    assert p.violations() == []
    assert p.network() == []
    assert p.errors == []
    p.close()


def card_open(p: FilePage) -> None:
    p.page.wait_for_selector(".gs-ex-card:not([hidden]) .gs-ex-form", timeout=10_000)


def check(p: FilePage) -> dict[str, dict]:
    """Press Check; the result rows by question kind."""
    p.page.click(".gs-ex-check")
    p.page.wait_for_selector(".gs-ex-results")
    rows = p.page.evaluate(
        "[...document.querySelectorAll('.gs-ex-results tbody tr')].map((tr) => ({kind: tr.dataset.kind,"
        " correct: tr.dataset.correct === 'true', cells: [...tr.children].map((c) => c.textContent)}))"
    )
    return {r["kind"]: r for r in rows}


def try_again(p: FilePage) -> None:
    p.page.click(".gs-ex-retry")
    card_open(p)


def choose(p: FilePage, text: str) -> None:
    p.page.locator(".gs-ex-q[data-kind=error] label", has_text=text).click()


def numbers(text: str) -> list[float]:
    return [float(t) for t in text.replace("[", " ").replace("]", " ").replace(",", " ").split()]


def test_an_exported_exercise_asks_before_the_first_call_and_checks_a_grad_wrong_then_right(page, plain):
    (truth,) = [g for names, g in plain.calls[0].grads.items() if "x" in names]
    page.press("End")
    card_open(page)
    assert page.page.locator(".gs-ex-q[data-kind=grad] label").inner_text().startswith("x.grad")
    page.page.fill(".gs-ex-input", str(truth.item() + 1))
    wrong = check(page)["grad"]
    assert not wrong["correct"]
    assert numbers(wrong["cells"][2]) == pytest.approx([truth.item()], rel=1e-4)
    try_again(page)
    page.page.fill(".gs-ex-input", str(truth.item()))
    assert check(page)["grad"]["correct"]


def test_an_exported_exercise_checks_whether_a_call_fails_wrong_then_right(page, plain):
    assert plain.calls[1].error is None and plain.calls[2].error is not None
    page.press("End")
    card_open(page)
    page.page.click(".gs-ex-skip")  # the first call
    page.press("End")
    card_open(page)
    choose(page, "It runs without an error")
    assert check(page)["error"]["correct"]  # the second call runs (it frees the graph)
    page.page.click(".gs-ex-continue")
    page.press("End")
    card_open(page)
    choose(page, "It runs without an error")
    wrong = check(page)["error"]
    assert not wrong["correct"]
    assert plain.calls[2].error["type"] in wrong["cells"][2]
    try_again(page)
    choose(page, "backward through the graph a second time")
    assert check(page)["error"]["correct"]
