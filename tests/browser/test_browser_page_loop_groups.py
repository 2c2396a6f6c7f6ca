"""Loops on the page: the graph groups each iteration of the snippet's loop in a box of its own,
as it groups a module's nodes (an LSTM unrolled over 100 steps, a 20-iteration training loop),
and the timeline folds a model's many forward lines into a few chips (a 12-layer GPT)."""

from __future__ import annotations

import re

from testkit.browser_support import needs_chromium
from testkit.real_models import catalog, loop_iterations

pytestmark = needs_chromium


LSTM = catalog.lstm(100)
LOOP = catalog.training_loop(20)


def _box_labels(page) -> list[str]:
    return page.locator("g.gs-group .gs-group-name").evaluate_all("els => els.map(e => e.textContent)")


def test_an_unrolled_lstm_opens_with_one_box_per_time_step(app):
    app.open()
    trace = app.run_code(LSTM)
    steps = loop_iterations(LSTM, "for x in xs")
    labels = [x for x in _box_labels(app.page) if "t=" in x]
    assert sorted(labels) == sorted(f"▸ cell · t={t}" for t in range(1, steps + 1))
    assert app.page.locator("g.gs-frame", has_text="loop · 100 iterations").count() == 1
    assert app.page.locator("g.gs-item[data-node-id]").count() < 40, "the steps' nodes start folded"
    assert trace["status"] == "ok" and app.errors == []


def test_a_training_loop_opens_with_one_box_per_iteration(app):
    app.open()
    app.run_code(LOOP)
    n = loop_iterations(LOOP, "for epoch in")
    labels = [x for x in _box_labels(app.page) if "iteration" in x]
    assert sorted(labels) == sorted(f"▸ iteration {k}" for k in range(1, n + 1))
    app.shot("loop_groups_training_loop_1400")


def test_expanding_one_time_step_draws_its_nodes_only(app):
    app.open()
    trace = app.run_code(LSTM)
    built = [n for n in trace["nodes"] if n.get("iteration") == 7]
    box = app.page.locator("g.gs-group", has_text=re.compile(r"cell · t=7\s"))
    box.dispatch_event("click")
    app.page.wait_for_function(
        "() => [...document.querySelectorAll('g.gs-frame')].some(f => f.textContent.includes('cell · t=7'))"
    )
    drawn = app.page.locator("g.gs-item[data-node-id]").evaluate_all(
        "els => els.map(e => Number(e.dataset.nodeId))"
    )
    assert {n["id"] for n in built} <= set(drawn)
    assert len([x for x in _box_labels(app.page) if "t=" in x]) == 99, "the other steps stay folded"
    assert app.errors == []


def test_a_gpts_forward_lines_fold_into_few_chips_and_the_keys_visit_every_step(app):
    app.open()
    trace = app.run_code(catalog.gpt(12))
    n = len(trace["steps"])
    chips = app.page.locator("#gs-stepper .gs-timeline > li:not([hidden])")
    assert n > 30 and chips.count() <= 4, chips.all_inner_texts()
    app.press("Home")
    seen = [int(app.page.evaluate("document.querySelector('[data-steps]').dataset.step"))]
    for _ in range(n - 1):
        app.press("ArrowRight")
        seen.append(int(app.page.evaluate("document.querySelector('[data-steps]').dataset.step")))
        current = app.page.locator("#gs-stepper .gs-timeline > li.gs-current:not([hidden])")
        assert current.count() == 1, f"step {seen[-1]}: the current step's chip shows"
    assert seen == list(range(n))
    app.press("Home")
    app.press("ArrowRight")
    app.press("ArrowRight")
    assert re.fullmatch(r"▸\s*forward 3/\d+", app.page.locator(".gs-tl-fold.gs-current").inner_text().strip())
    app.shot("loop_groups_gpt12_timeline_1400")


def test_the_current_steps_chip_is_scrolled_into_the_timelines_view(app):
    app.open()
    trace = app.run_code(LOOP)
    app.press("End")
    for _ in range(len(trace["steps"]) // 2):
        app.press("ArrowLeft")
    app.page.wait_for_timeout(400)  # the timeline scrolls smoothly
    inside = app.page.evaluate(
        """() => {
          const tl = document.querySelector('#gs-stepper .gs-timeline').getBoundingClientRect();
          const chip = document.querySelector('#gs-stepper .gs-timeline > li.gs-current').getBoundingClientRect();
          return chip.top >= tl.top - 1 && chip.bottom <= tl.bottom + 1 && chip.left >= tl.left - 1 && chip.right <= tl.right + 1;
        }"""
    )
    assert inside


# (label, on screen, its box on the page) of each iteration box
_ITERATION_BOXES = """() => [...document.querySelectorAll('g.gs-group')]
  .filter((g) => /iteration \\d+/.test(g.textContent))
  .map((g) => {
    const r = g.querySelector('rect').getBoundingClientRect();
    return [g.querySelector('.gs-group-name').textContent, !g.classList.contains('gs-absent'),
            [Math.round(r.x), Math.round(r.y), Math.round(r.width), Math.round(r.height)]];
  })"""


def test_a_training_loops_iterations_show_one_at_a_time_in_one_place(app):
    # each forward drops the previous iteration's graph (NOTE [iterations share a place]): its box
    # and the next one's are never on screen together, so they take one place, not twenty
    app.open()
    trace = app.run_code(LOOP)
    app.press("Home")
    built = None  # the iteration of the last forward so far: its graph is the one alive
    for i, step in enumerate(trace["steps"]):
        if step["kind"] == "forward":
            built = step["iteration"]
        boxes = app.page.evaluate(_ITERATION_BOXES)
        shown = [label for label, on, _ in boxes if on]
        assert shown == ([] if built is None else [f"▸ iteration {built}"]), (i, shown)
        assert len({tuple(rect) for _, _, rect in boxes}) == 1, "one place for all of them"
        if i < len(trace["steps"]) - 1:
            app.press("ArrowRight")
    assert app.errors == []


def test_the_iterations_of_a_loop_that_keeps_every_graph_keep_a_place_each(app):
    # a running total that holds each iteration's graph: all of them are alive at the end
    keeps = LOOP.replace(
        "loss.backward()", "loss.backward(retain_graph=True)\n    kept.append(loss)"
    ).replace("for epoch in", "kept = []\nfor epoch in")
    app.open()
    app.run_code(keeps)
    app.press("End")
    boxes = app.page.evaluate(_ITERATION_BOXES)
    assert len(boxes) == 20 and all(on for _, on, _ in boxes)
    assert len({tuple(rect) for _, _, rect in boxes}) == 20, "twenty places"
    assert app.errors == []
