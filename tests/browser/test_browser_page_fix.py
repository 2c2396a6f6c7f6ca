"""Apply fix as a student uses it (issue 24, point 5): the student's own code stays restorable,
the lines the fix changed are marked in the editor, the side-by-side view opens at the first step
where the runs differ, its narration is never cut mid-sentence, and "Back to my code" brings the
student's code and run back."""

from __future__ import annotations

from gradstep import snippets
from test_browser_explain import apply_first_fix
from testkit.browser_support import Page, assert_step_matches, needs_chromium

pytestmark = needs_chromium

SNIPPETS = snippets.load_all()


def banners_whole(app: Page) -> bool:
    return app.page.evaluate(
        "[...document.querySelectorAll('#gs-compare .gs-banner')].every(b => b.scrollHeight <= b.clientHeight + 1)"
    )


def test_apply_fix_keeps_the_students_code_marks_the_fix_and_back_restores_it(app):
    app.open("?snippet=backward_twice_fails")
    # the student's own version of the example (their comment, their print)
    mine = SNIPPETS["backward_twice_fails"].code + 'print("mine:", x.grad)\n'
    original = app.run_code(mine)
    fix, fixed = apply_first_fix(app, original, "backward_through_freed_graph")
    assert app.page.evaluate("window.gradstep.editor.getCode()") == fix["code"]
    # the changed lines are marked, and only they
    before = {line.strip() for line in mine.splitlines()}
    want = {
        i for i, line in enumerate(fix["code"].splitlines(), 1) if line.strip() and line.strip() not in before
    }
    assert want
    marked = app.page.locator(".cm-line[data-changed-line]").evaluate_all(
        "els => els.map(e => Number(e.dataset.changedLine))"
    )
    assert set(marked) == want
    # opened at the first row where the runs differ, not at "No difference at this step"
    row = int(app.page.locator("#gs-compare").get_attribute("data-row"))
    assert app.page.locator(".gs-cmp-diff li[data-diff-kind]").count() > 0
    for r in range(row):
        app.page.evaluate(f"window.gradstep.compare.go({r})")
        assert app.page.locator(".gs-cmp-diff li[data-diff-kind]").count() == 0, f"row {r} differs already"
    # every row's narration is whole in both columns
    rows = int(app.page.locator("#gs-compare").get_attribute("data-rows"))
    for r in range(rows):
        app.page.evaluate(f"window.gradstep.compare.go({r})")
        assert banners_whole(app), f"a narration is cut at row {r}"
    app.shot("page_fix_compare")
    # back to the student's code and its run
    app.page.click(".gs-cmp-back")
    assert app.page.locator("#gs-compare").is_hidden()
    assert app.page.evaluate("window.gradstep.editor.getCode()") == mine
    assert app.page.locator(".cm-line[data-changed-line]").count() == 0
    last = len(original["steps"]) - 1
    app.page.evaluate(f"window.gradstep.viewer.setStep({last})")
    assert_step_matches(app.graph_state(), original, last)
    assert app.page.locator('.gs-diag[data-kind="backward_through_freed_graph"]').count() == 1
    assert app.errors == []


def test_keep_the_fix_goes_on_with_the_fixed_run(app):
    original = app.open("?snippet=backward_twice_fails")
    fix, fixed = apply_first_fix(app, original, "backward_through_freed_graph")
    app.page.click(".gs-cmp-keep")
    assert app.page.evaluate("window.gradstep.editor.getCode()") == fix["code"]
    last = len(fixed["steps"]) - 1
    app.page.evaluate(f"window.gradstep.viewer.setStep({last})")
    assert_step_matches(app.graph_state(), fixed, last)
    assert app.errors == []


def test_escape_in_the_side_by_side_view_is_back_to_my_code(app):
    original = app.open("?snippet=backward_twice_fails")
    apply_first_fix(app, original, "backward_through_freed_graph")
    app.press("Escape")
    assert app.page.locator("#gs-compare").is_hidden()
    assert app.page.evaluate("window.gradstep.editor.getCode()") == original["code"]
    assert app.errors == []
