"""The examples as a learner meets them (issue 24, points 6, 8, 9 and the card/editor of point 10):
a picker ordered as a course, grouped and filterable; pasted code that is no longer the example
says "Your code"; the create_graph example separates the first and second derivative (checked
against plain torch); the card's whole text reachable by keyboard; the editor opening on the code."""

from __future__ import annotations

import torch
from gradstep import snippets
from gradstep.printing import fmt_number
from testkit.browser_support import needs_chromium

pytestmark = needs_chromium

SNIPPETS = snippets.load_all()
COURSE_ORDER = ["retain_graph", "accumulation", "create_graph", "autograd.grad", "retain_grad", "mistakes"]


def test_the_picker_is_ordered_as_a_course_grouped_and_filterable(app):
    app.open("?snippet=backward_twice_fails")
    app.page.click("#gs-picker summary")
    titles = app.page.locator(".gs-pick-group-title").all_inner_texts()
    # the course's topics, in the course's order
    where = []
    for topic in COURSE_ORDER:
        hit = [i for i, t in enumerate(titles) if topic.lower() in t.lower()]
        assert hit, f"no group for {topic}: {titles}"
        where.append(hit[0])
    assert where == sorted(where), titles
    names = app.page.locator(".gs-pick").evaluate_all("els => els.map(e => e.dataset.snippet)")
    assert sorted(names) == sorted(SNIPPETS)  # every example, once
    # an example comes before its fix ("The fix for the previous example")
    assert names.index("two_outputs_without_retain_fails") < names.index("two_outputs_retain_graph")
    assert names.index("backward_twice_fails") < names.index("retain_graph_accumulates")
    assert names.index("retain_graph_accumulates") < names.index("create_graph_second_derivative")
    # filtering: the filter has focus when the menu opens
    assert app.page.evaluate("document.activeElement.id") == "gs-picker-filter"
    app.page.keyboard.type("retain_grad")
    shown = app.page.locator(".gs-pick:visible").evaluate_all("els => els.map(e => e.dataset.snippet)")
    assert shown and "retain_grad_before_or_after" in shown and len(shown) < len(names)
    for name in shown:
        s = SNIPPETS[name]
        assert (
            "retain_grad" in f"{s.title} {s.summary} {name}".lower()
            or "retain_grad" in " ".join(titles).lower()
        )
    app.page.keyboard.type(" zzzz-nothing")
    assert app.page.locator(".gs-picker-none").is_visible()
    app.page.keyboard.press("Control+A")
    app.page.keyboard.type(SNIPPETS["create_graph_second_derivative"].title)
    n = app.runs()
    app.page.keyboard.press("Enter")  # picks the first match
    app.wait_runs(n + 1)
    assert "snippet=create_graph_second_derivative" in app.page.url
    assert app.errors == []


def test_pasted_code_is_your_code_not_the_example(app):
    app.open("?snippet=backward_twice_fails")
    info = app.page.locator("#gs-snippet-info")
    assert info.is_visible() and SNIPPETS["backward_twice_fails"].title in info.inner_text()
    app.run_code("import torch\nw = torch.ones(1, 2, requires_grad=True)\n(w * 3).sum().backward()\n")
    assert app.page.locator("#gs-picker-current").inner_text() == "Your code"
    assert not info.is_visible()
    assert SNIPPETS["backward_twice_fails"].title not in app.page.locator(".gs-header").inner_text()
    assert "(edited)" not in app.page.locator("#gs-picker summary").inner_text()
    assert app.errors == []


def test_the_create_graph_example_separates_the_first_and_second_derivative(app):
    s = SNIPPETS["create_graph_second_derivative"]
    trace = app.open("?snippet=create_graph_second_derivative")
    # plain torch on the example's own x: the first and second derivative differ
    ns: dict = {}
    exec(compile(s.code.split("# The clean way")[0], "snippet", "exec"), ns)  # noqa: S102
    x = ns["x"]
    x0 = torch.tensor(float(x.detach()), requires_grad=True)
    (first,) = torch.autograd.grad(x0**3, x0, create_graph=True)
    (second,) = torch.autograd.grad(first, x0)
    assert float(first) != float(second), "the example must pick x where the derivatives differ"
    assert float(x.grad) == float(first) + float(second)
    # the card says in words that the added part is the second derivative
    card = app.page.locator("#gs-snippet-info").inner_text().lower()
    assert "second derivative" in card
    # at the second backward, x's node shows the total as first + second
    calls = [i for i, st in enumerate(trace["steps"]) if st["kind"] != "forward"]
    app.page.evaluate(f"window.gradstep.viewer.setStep({calls[1]})")
    node_text = app.page.locator('[data-grad-for="x"]').first.evaluate(
        "el => el.closest('g.gs-item').textContent"
    )
    assert fmt_number(float(x.grad)) in node_text
    assert fmt_number(float(first)) in node_text and fmt_number(float(second)) in node_text
    assert app.errors == []


def test_the_whole_explanation_opens_by_keyboard_and_the_editor_opens_on_the_code(app):
    app.open("?snippet=backward_twice_fails")
    more = app.page.locator("#gs-snippet-info button.gs-info-more")
    assert more.get_attribute("aria-expanded") == "false"
    more.focus()
    app.page.keyboard.press("Enter")
    assert more.get_attribute("aria-expanded") == "true"
    watch = app.page.locator("#gs-snippet-info .gs-watch")
    assert watch.evaluate("el => el.scrollHeight <= el.clientHeight + 1"), "Watch: is cut off"
    # the editor opens on the code: its first visible line is past the docstring
    code = SNIPPETS["backward_twice_fails"].code
    doc_end = next(i for i, line in enumerate(code.splitlines()[1:], 2) if '"""' in line)
    top = app.page.evaluate(
        """() => { const s = document.querySelector('#gs-editor .cm-scroller').getBoundingClientRect();
        const nums = [...document.querySelectorAll('#gs-editor .cm-gutterElement')]
          .filter(g => g.getBoundingClientRect().top >= s.top - 2 && g.textContent.trim())
          .map(g => Number(g.textContent)); return Math.min(...nums); }"""
    )
    assert top > doc_end, f"the editor opens at line {top}, inside the docstring (ends at {doc_end})"
    assert app.errors == []
