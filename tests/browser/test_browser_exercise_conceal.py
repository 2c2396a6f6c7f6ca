"""The exercise gives no answer away before its reveal: while a call's questions are open, nothing on
the page (diagnoses and their Apply fix, the timeline, the saved-bytes chart, the status line, the
editor) says how that call or any later one goes; each comes back once the questions are answered or
skipped. Which call fails comes from plain torch run on the same code (testkit.truth.run_plain)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gradstep.permalink import encode_code
from testkit.browser_support import Page, needs_chromium
from testkit.truth import run_plain

pytestmark = needs_chromium

SNIPPET = "exercise_retain_graph"
RETAIN = (Path(__file__).resolve().parents[2] / "snippets" / f"{SNIPPET}.py").read_text()

# the run ends in the error of its last call (uncaught): the status line would name it, and the run
# gets a diagnosis (with a verified fix) of that call
FAILS = (
    "import torch\n"
    "\n"
    "x = torch.tensor([1.0, 2.0], requires_grad=True)\n"
    "y = (x**3).sum()\n"
    "y.backward()  # predict: freed\n"
    "y.backward()  # predict: error\n"
)

# What on the page tells how a call went: run in the page, a dict of what it finds.
OUTCOME = """() => {
  const visible = (e) => e && !e.closest('[hidden]') && e.getClientRects().length > 0;
  const chips = [...document.querySelectorAll('.gs-tl-step button')];
  const steps = Number(document.querySelector('.gs-stepper').dataset.steps);
  const bars = [...document.querySelectorAll('.gs-chart-svg .gs-bar')];
  return {
    diagnoses: [...document.querySelectorAll('.gs-diag')].filter(visible).length,
    applyFix: [...document.querySelectorAll('.gs-apply-fix')].filter(visible).length,
    diagnosisLines: document.querySelectorAll('.gs-line-diagnosis').length,
    errorChips: document.querySelectorAll('.gs-tl-error, .gs-tl-crash, .gs-tl-x').length,
    chipWords: chips.map((b) => `${b.title} ${b.getAttribute('aria-label')}`).join(' | '),
    inlineErrors: [...document.querySelectorAll('.gs-inline-error')].filter(visible).map((e) => e.textContent),
    status: (document.querySelector('#gs-run-status') || {}).textContent || '',
    steps,
    barHeights: bars.map((b) => Number(b.getAttribute('height'))),
  };
}"""


def failing_call(code: str) -> dict:
    """The error of the call that fails under plain torch (the test is void without one)."""
    errors = [c.error for c in run_plain(code).calls if c.error]
    assert errors, "the code must have a failing call"
    return errors[0]


def assert_nothing_tells_it_fails(found: dict, error: dict) -> None:
    assert found["diagnoses"] == 0 and found["applyFix"] == 0 and found["diagnosisLines"] == 0
    assert found["errorChips"] == 0
    for word in (error["type"], "✕", "failed"):
        assert word not in found["chipWords"]
        assert word not in found["status"]
    assert found["inlineErrors"] == []


def step_of(page) -> int:
    return int(page.get_attribute(".gs-stepper", "data-step"))


def card_open(page) -> None:
    page.wait_for_selector(".gs-ex-card:not([hidden]) .gs-ex-form", timeout=10_000)


def skip_every_question(page) -> None:
    """Skip each question card on the way to the last step."""
    steps = int(page.get_attribute(".gs-stepper", "data-steps"))
    for _ in range(steps):
        if step_of(page) == steps - 1:
            return
        page.click(".gs-stepper button[aria-label^='Last step']")
        if step_of(page) == steps - 1:
            return
        card_open(page)
        page.click(".gs-ex-skip")
    raise AssertionError("the last step was never reached")


@pytest.fixture
def app(browser, server):
    p = Page(browser, server, reduced_motion="reduce", viewport={"width": 1400, "height": 900})
    yield p
    assert p.errors == []
    p.close()


def open_app(app, server, code: str) -> None:
    app.page.goto(f"{server}/#code={encode_code(code)}")
    app.wait_runs(1)
    app.page.click(".gs-stepper button[aria-label^='Last step']")
    card_open(app.page)


def open_embed(tab, server, code: str) -> None:
    tab.page.goto(f"{server}/embed#code={encode_code(code)}&predict=code")
    tab.page.wait_for_function("document.body.dataset.state === 'ready'", timeout=60_000)
    tab.page.click(".gs-stepper button[aria-label^='Last step']")
    card_open(tab.page)


@pytest.mark.parametrize("code", [RETAIN, FAILS], ids=[SNIPPET, "uncaught"])
def test_the_app_shows_no_diagnosis_or_error_mark_of_a_call_before_its_question(app, server, code):
    error = failing_call(code)
    open_app(app, server, code)
    assert_nothing_tells_it_fails(app.page.evaluate(OUTCOME), error)


def test_the_app_draws_no_saved_bytes_of_a_call_before_its_question(app, server):
    open_app(app, server, RETAIN)
    held = step_of(app.page)
    found = app.page.evaluate(OUTCOME)
    assert found["barHeights"][held] > 0  # the bytes so far are drawn
    assert found["barHeights"][held + 1 :] == [0] * (found["steps"] - held - 1)


def test_the_status_line_does_not_name_the_error_the_run_ends_in_before_its_question(app, server):
    error = failing_call(FAILS)
    open_app(app, server, FAILS)
    assert_nothing_tells_it_fails(app.page.evaluate(OUTCOME), error)
    skip_every_question(app.page)
    assert error["type"] in app.page.inner_text("#gs-run-status")


def test_the_app_shows_the_diagnoses_and_error_marks_once_every_question_is_skipped(app, server):
    failing_call(FAILS)
    open_app(app, server, FAILS)
    skip_every_question(app.page)
    found = app.page.evaluate(OUTCOME)
    assert found["diagnoses"] > 0 and found["applyFix"] > 0 and found["diagnosisLines"] > 0
    assert found["errorChips"] > 0


def test_the_saved_bytes_of_every_step_are_drawn_once_every_question_is_skipped(app, server):
    open_app(app, server, RETAIN)
    skip_every_question(app.page)
    found = app.page.evaluate(OUTCOME)
    assert found["barHeights"][1] > 0  # the first call keeps the graph: its bytes are drawn
    assert len(found["barHeights"]) == found["steps"]


def test_an_error_mark_comes_back_with_its_own_question(app, server):
    """Answering the first call's questions shows nothing of the failing third call yet."""
    error = failing_call(RETAIN)
    open_app(app, server, RETAIN)
    app.page.click(".gs-ex-skip")  # the first call is shown; the second and third still ask
    assert_nothing_tells_it_fails(app.page.evaluate(OUTCOME), error)


def marked_asking(page) -> list[int]:
    """The steps whose timeline chip carries the "?" of a question still waiting."""
    return page.eval_on_selector_all(
        ".gs-tl-step.gs-tl-asks", "els => els.map((e) => Number(e.dataset.index))"
    )


def test_a_calls_question_mark_goes_once_its_question_is_skipped(app, server):
    open_app(app, server, FAILS)
    before = marked_asking(app.page)
    asked = step_of(app.page) + 1  # held on the step before the call the card asks about
    assert asked in before
    app.page.click(".gs-ex-skip")
    assert marked_asking(app.page) == [s for s in before if s != asked]


def test_the_embed_shows_no_diagnosis_or_error_mark_before_the_question_and_both_after(browser, server):
    error = failing_call(FAILS)
    tab = Page(browser, server, reduced_motion="reduce", viewport={"width": 1100, "height": 900})
    try:
        open_embed(tab, server, FAILS)
        assert_nothing_tells_it_fails(tab.page.evaluate(OUTCOME), error)
        skip_every_question(tab.page)
        found = tab.page.evaluate(OUTCOME)
        assert found["diagnoses"] > 0 and found["errorChips"] > 0
        assert tab.errors == []
    finally:
        tab.close()


def test_the_result_of_an_error_question_fits_a_phone_without_horizontal_scrolling(browser, server):
    """torch's message (long words such as retain_graph=True) wraps inside the result table."""
    error = failing_call(RETAIN)
    tab = Page(browser, server, reduced_motion="reduce", viewport={"width": 390, "height": 844})
    try:
        tab.page.goto(f"{server}/?snippet={SNIPPET}")
        tab.wait_runs(1)
        for _ in range(2):  # the first two calls
            tab.page.click(".gs-stepper button[aria-label^='Last step']")
            card_open(tab.page)
            tab.page.click(".gs-ex-skip")
        tab.page.click(".gs-stepper button[aria-label^='Last step']")
        card_open(tab.page)
        tab.page.locator(
            ".gs-ex-q[data-kind=error] label", has_text="backward through the graph a second time"
        ).click()
        tab.page.click(".gs-ex-check")
        tab.page.wait_for_selector(".gs-ex-results")
        assert error["type"] in tab.page.inner_text(".gs-ex-results")
        assert tab.page.evaluate("document.documentElement.scrollWidth") <= 390
        assert tab.errors == []
    finally:
        tab.close()


def test_held_before_a_question_the_panels_and_graph_show_the_step_before_the_call(app, server):
    """x.grad as plain torch has it before the first call, everywhere the page shows it."""
    plain = run_plain(RETAIN)
    (after,) = [g for names, g in plain.calls[0].grads.items() if "x" in names]
    assert after is not None  # the call sets it: a page showing the call would show a number
    app.page.goto(f"{server}/#code={encode_code(RETAIN)}")
    app.wait_runs(1)
    app.page.click(".gs-stepper button[aria-label^='Next step']")
    card_open(app.page)
    texts = app.page.evaluate(
        '[...document.querySelectorAll(\'[data-grad-for="x"], [data-tensor-grad="x"]\')].map((e) => e.textContent.trim())'
    )
    assert texts and all(t == "None" for t in texts)
    printed = app.page.inner_text(".gs-stepper")
    assert "after the first backward" not in printed


# a forward pass long enough for the timeline to fold its steps into one chip, then the question
FOLDED = (
    "import torch\n"
    "x = torch.tensor([1.0, 2.0], requires_grad=True)\n"
    "h = x * 1.0\n" + "h = h * 1.5\n" * 24 + "h.sum().backward()  # predict: x.grad\n"
)


def test_a_fold_the_reader_opened_stays_open_when_the_answer_is_revealed(app, server):
    open_app(app, server, FOLDED)
    fold = app.page.locator(".gs-tl-foldbtn").first
    assert fold.get_attribute("aria-expanded") == "false"  # folded until opened
    fold.click()
    assert fold.get_attribute("aria-expanded") == "true"
    app.page.click(".gs-ex-skip")  # the reveal redraws the timeline
    app.page.wait_for_selector(".gs-ex-card .gs-ex-form", state="detached", timeout=10_000)
    fold = app.page.locator(".gs-tl-foldbtn").first
    assert fold.get_attribute("aria-expanded") == "true"
    hidden = app.page.evaluate(
        "[...document.querySelectorAll('.gs-tl-step[data-index]')].filter((li) => li.hidden).length"
    )
    assert hidden == 0  # each forward step's chip shows
