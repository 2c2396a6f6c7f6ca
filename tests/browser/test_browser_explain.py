"""The narration panel, the diagnoses and "Apply fix" with the side-by-side view, end to end:
the real server, real Chromium.

What the page shows is checked against the traces the API returned to it: the narration is the
step's `explanation` with its `links` pointing at the nodes and tensors they name, and the
side-by-side view marks exactly the nodes whose freed state or grads differ between the original
run and the fixed run, step by aligned step.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from gradstep.columns import rows_of
from testkit.browser_support import NODE_STATE, Page, assert_step_matches, fmt_grad, needs_chromium

pytestmark = needs_chromium

# ---------------------------------------------------------------- traces


def narrated(trace: dict) -> bool:
    """The server narrates every step of a version-2 trace."""
    return bool(trace["steps"]) and all(s.get("explanation") for s in trace["steps"])


def diagnosis_of(trace: dict, kind: str) -> dict:
    return next(d for d in trace.get("diagnoses", []) if d["kind"] == kind)


def serve_with(page, *edits) -> None:
    """Let /api/trace answer as the server does, with `edits` applied to each trace it returns."""

    def handle(route):
        response = route.fetch()
        trace = rows_of(response.json())  # the edits read rows; the page reads either
        for edit in edits:
            edit(trace)
        route.fulfill(response=response, body=json.dumps(trace), headers={"content-type": "application/json"})

    page.route("**/api/trace", handle)


@pytest.fixture
def app(browser, server):
    p = Page(browser, server, reduced_motion="reduce")
    yield p
    p.close()


# ---------------------------------------------------------------- what the page shows


def narration(app) -> dict:
    return app.page.evaluate(
        """() => {
          const p = document.querySelector('#gs-graph .gs-narration');
          if (!p) return null;
          return {
            step: Number(p.dataset.step),
            text: p.textContent,
            links: [...p.querySelectorAll('.gs-narr-link')].map(a => ({
              text: a.textContent,
              node: a.dataset.linkNode === undefined ? null : Number(a.dataset.linkNode),
              tensor: a.dataset.linkTensor === undefined ? null : a.dataset.linkTensor,
            })),
          };
        }"""
    )


def side_state(app, side: str) -> dict:
    """One column of the side-by-side view: its step, its nodes' data-* state, and which nodes it
    marks as differing (per kind)."""
    return app.page.evaluate(
        """(side) => {
          const nodeState = """
        + NODE_STATE
        + """;
          const col = document.querySelector(`.gs-cmp-col[data-side="${side}"]`);
          const root = col.querySelector('.gs-stepper');
          const nodes = {};
          const diff = {};
          for (const el of col.querySelectorAll('[data-node-id]')) {
            nodes[el.dataset.nodeId] = nodeState(el);
            for (const k of (el.dataset.diff || '').split(' ').filter(Boolean)) (diff[k] ||= []).push(el.dataset.nodeId);
          }
          return { step: Number(root.dataset.step), steps: Number(root.dataset.steps), shown: col.dataset.step,
                   held: col.dataset.held, nodes, diff };
        }""",
        side,
    )


def node_keys(trace: dict) -> dict[int, tuple]:
    """The matching rule of frontend/align.js for two codes with the same lines: same op on the same
    line, the k-th with the k-th; a leaf by its tensor's name."""
    seen: Counter = Counter()
    keys = {}
    for n in trace["nodes"]:
        base = (
            ("leaf", n["tensor"])
            if n["op"] == "AccumulateGrad" and n.get("tensor")
            else (n["op"], n.get("line"))
        )
        keys[n["id"]] = (*base, seen[base])
        seen[base] += 1
    return keys


def grad_diff_nodes(a_step: dict, b_step: dict) -> dict[str, set[str]]:
    """The leaves (ids as the page writes them) showing a tensor whose .grad differs between two steps."""
    ta = {t["name"]: t for t in a_step.get("tensors", [])}
    tb = {t["name"]: t for t in b_step.get("tensors", [])}
    alive_a = {s["id"] for s in a_step["nodes"] if not s.get("dropped")}
    alive_b = {s["id"] for s in b_step["nodes"] if not s.get("dropped")}
    out = {"original": set(), "fixed": set()}
    for name in ta.keys() | tb.keys():
        ga, gb = (ta.get(name) or {}).get("grad"), (tb.get(name) or {}).get("grad")
        if fmt_grad(ga) == fmt_grad(gb) and (ga or {}).get("values") == (gb or {}).get("values"):
            continue
        for side, t, alive in (("original", ta.get(name), alive_a), ("fixed", tb.get(name), alive_b)):
            if t and t.get("node") in alive:
                out[side].add(str(t["node"]))
    return out


def expected_diff(a: dict, b: dict, i: int) -> dict[str, dict[str, set[str]]]:
    """Nodes (ids as the page writes them) whose freed / stale state or grad differ at step i of both runs."""
    ka, kb = node_keys(a), node_keys(b)
    by_key_b = {k: nid for nid, k in kb.items()}
    sa = {s["id"]: s for s in a["steps"][i]["nodes"] if not s.get("dropped")}
    sb = {s["id"]: s for s in b["steps"][i]["nodes"] if not s.get("dropped")}
    grads = grad_diff_nodes(a["steps"][i], b["steps"][i])
    out = {side: {"freed": set(), "stale": set(), "grad": grads[side]} for side in ("original", "fixed")}
    for nid, s in sa.items():
        other = by_key_b.get(ka[nid])
        for kind in ("freed", "stale"):
            if other in sb and bool(s.get(kind)) != bool(sb[other].get(kind)):
                out["original"][kind].add(str(nid))
                out["fixed"][kind].add(str(other))
    return out


def step_side_by_side_one_to_one(app, original: dict, fixed: dict) -> Counter:
    """Step through a comparison of two runs with the same steps; at each row, each side shows its
    own step as the trace says, and marks exactly the nodes that differ. Returns the marks seen."""
    steps = len(original["steps"])
    assert len(fixed["steps"]) == steps
    assert app.page.locator("#gs-compare").get_attribute("data-rows") == str(steps)
    seen: Counter = Counter()
    app.press("Home")  # it opens at the first row that differs
    for i in range(steps):
        if i:
            app.press("ArrowRight")
        assert app.page.locator("#gs-compare").get_attribute("data-row") == str(i)
        want = expected_diff(original, fixed, i)
        for side, trace in (("original", original), ("fixed", fixed)):
            state = side_state(app, side)
            assert state["shown"] == str(i) and state["held"] == "false"
            assert_step_matches(state, trace, i)
            for kind, ids in want[side].items():
                assert set(state["diff"].get(kind, [])) == ids, (side, i, kind)
                seen[kind] += len(ids)
    return seen


# ---------------------------------------------------------------- tests


def test_narration_is_each_steps_explanation_with_links_to_what_it_names(app):
    trace = app.open("?snippet=retain_graph_accumulates")
    assert narrated(trace)
    for i, step in enumerate(trace["steps"]):
        if i:
            app.press("ArrowRight")
        shown = narration(app)
        assert shown["step"] == i
        assert shown["text"] == step["explanation"]
        want = [
            {
                "text": step["explanation"][ln["start"] : ln["end"]],
                "node": ln.get("node"),
                "tensor": ln.get("tensor"),
            }
            for ln in sorted(step.get("links", []), key=lambda ln: ln["start"])
        ]
        assert shown["links"] == want
    assert app.errors == []


def test_narration_is_read_out_politely_by_screen_readers(app):
    app.open("?snippet=retain_graph_accumulates")
    live = app.page.evaluate("document.querySelector('#gs-graph .gs-narration').closest('[aria-live]')")
    assert live is not None
    assert app.page.locator("#gs-graph .gs-banner").get_attribute("aria-live") == "polite"


def test_hovering_a_node_link_highlights_that_node_and_clicking_selects_it(app):
    trace = app.open("?snippet=retain_graph_accumulates")
    app.press("End")
    link = app.page.locator("#gs-graph .gs-narr-link[data-link-node]").first
    node = link.get_attribute("data-link-node")
    link.hover()
    linked = app.page.eval_on_selector_all(
        ".gs-linked[data-node-id]", "els => els.map(e => e.dataset.nodeId)"
    )
    assert linked == [node]
    link.click()
    assert (
        app.page.locator(f'[data-node-id="{node}"]').get_attribute("class").split().count("gs-selected") == 1
    )
    assert trace["nodes"][int(node)]["op"] in app.page.locator(".gs-inspector h3").inner_text()


def test_hovering_a_tensor_link_highlights_its_grad(app):
    trace = app.open("?snippet=retain_graph_accumulates")
    app.press("End")
    link = app.page.locator("#gs-graph .gs-narr-link[data-link-tensor]").first
    name = link.get_attribute("data-link-tensor")
    link.hover()
    targets = app.page.eval_on_selector_all(
        ".gs-narr-target", "els => els.map(e => e.dataset.gradFor || e.dataset.tensorGrad)"
    )
    assert targets and set(targets) == {name}
    holder = next(t["node"] for t in trace["steps"][-1]["tensors"] if t["name"] == name)
    linked = app.page.eval_on_selector_all(
        ".gs-linked[data-node-id]", "els => els.map(e => e.dataset.nodeId)"
    )
    assert linked == [str(holder)]


def as_version_1(trace: dict) -> None:
    trace["version"] = 1
    trace.pop("diagnoses", None)
    for step in trace["steps"]:
        step.pop("explanation", None)
        step.pop("links", None)


def test_a_trace_without_narration_shows_each_steps_title_and_torchs_error(browser, server):
    """The server is the one narrator: the page computes no sentences of its own."""
    p = Page(browser, server, reduced_motion="reduce")
    serve_with(p.page, as_version_1)
    try:
        p.open("?snippet=backward_twice_fails")
        p.press("End")
        assert p.page.locator("#gs-graph .gs-narration").count() == 0
        title = p.page.locator("#gs-graph .gs-banner-title").inner_text()
        assert title.startswith("line ") and "backward(" in title and "failed" in title
        message = p.page.locator("#gs-graph .gs-banner-message").inner_text()
        assert message.startswith("RuntimeError: ") and "backward through the graph a second time" in message
        assert p.page.locator("#gs-diagnoses").is_hidden()
        assert p.errors == []
    finally:
        p.close()


def test_diagnosis_shows_severity_message_fixes_and_marks_its_line(app):
    trace = app.open("?snippet=backward_twice_fails")
    d = diagnosis_of(trace, "backward_through_freed_graph")
    card = app.page.locator(f'.gs-diag[data-kind="{d["kind"]}"]')
    assert card.get_attribute("data-severity") == d["severity"]
    # markdown `code` spans are shown as code, without their backticks
    assert card.locator(".gs-diag-message").inner_text() == d["message"].replace("`", "")
    assert card.locator(".gs-diag-line").inner_text() == f"line {d['line']}"
    titles = card.locator(".gs-fix-title").all_inner_texts()
    assert titles == [f["title"].replace("`", "") for f in d["fixes"]]
    assert card.locator(".gs-apply-fix").count() == len(d["fixes"])
    marked = app.page.locator(f'.cm-line[data-diagnosis-line="{d["line"]}"]')
    assert marked.inner_text() == trace["code"].splitlines()[d["line"] - 1]
    app.shot("diagnosis_backward_twice")
    assert app.errors == []


def apply_first_fix(app, trace: dict, kind: str) -> tuple[dict, dict]:
    """Click the first fix of a diagnosis; returns (the fix, the trace the fixed code produced)."""
    fix = diagnosis_of(trace, kind)["fixes"][0]
    n = app.runs()
    with app.page.expect_response(lambda r: r.url.endswith("/api/trace")) as resp:
        app.page.locator(f'.gs-diag[data-kind="{kind}"] .gs-apply-fix').first.click()
    app.wait_runs(n + 1)
    app.page.wait_for_selector("#gs-compare[data-rows]")
    return fix, rows_of(resp.value.json())


def test_apply_fix_runs_the_fixed_code_and_steps_both_runs_side_by_side(app):
    original = app.open("?snippet=backward_twice_fails")
    fix, fixed = apply_first_fix(app, original, "backward_through_freed_graph")
    assert fixed["code"] == fix["code"]
    assert fixed["status"] == "ok" and original["status"] == "error"
    assert not fixed.get("diagnoses") and app.page.locator("#gs-diagnoses").is_hidden()
    assert app.page.evaluate("window.gradstep.editor.getCode()") == fix["code"]
    # the fix changes one call's arguments: the same steps, row by row
    seen = step_side_by_side_one_to_one(app, original, fixed)
    # the run differs where it should: a node freed in one only, and x.grad (448 vs 896)
    assert seen["freed"] > 0 and seen["grad"] > 0
    app.shot("compare_backward_twice_last")
    assert app.errors == []


def test_a_fix_of_an_inplace_change_marks_the_node_stale_in_the_original_only(app):
    original = app.open("?snippet=inplace_modified_saved_tensor_fails")
    _, fixed = apply_first_fix(app, original, "inplace_modified_saved_tensor")
    seen = step_side_by_side_one_to_one(app, original, fixed)
    assert seen["stale"] > 0 and seen["grad"] > 0
    app.shot("compare_inplace_last")
    assert app.errors == []


def test_side_by_side_lists_the_differences_of_the_step(app):
    original = app.open("?snippet=backward_twice_fails")
    _, fixed = apply_first_fix(app, original, "backward_through_freed_graph")
    app.press("End")
    items = app.page.locator(".gs-cmp-diff li")
    kinds = [items.nth(k).get_attribute("data-diff-kind") for k in range(items.count())]
    assert "error" in kinds
    error = items.nth(kinds.index("error")).inner_text()
    assert error.startswith("Only the original fails here") and original["error"]["message"][:40] in error
    grads = [items.nth(k).inner_text() for k, kind in enumerate(kinds) if kind == "grad"]
    xa = next(t["grad"] for t in original["steps"][-1]["tensors"] if t["name"] == "x")
    xb = next(t["grad"] for t in fixed["steps"][-1]["tensors"] if t["name"] == "x")
    assert grads == [f"x.grad: {fmt_grad(xa)} in the original, {fmt_grad(xb)} in the fix."]


def test_keep_the_fix_shows_the_fixed_run_with_the_fixed_code(app):
    original = app.open("?snippet=backward_twice_fails")
    fix, fixed = apply_first_fix(app, original, "backward_through_freed_graph")
    app.page.click(".gs-cmp-keep")  # "Back to my code" restores the original: test_browser_page_fix.py
    assert app.page.locator("#gs-compare").is_hidden()
    assert app.page.locator("#gs-graph").is_visible()
    assert app.page.evaluate("window.gradstep.editor.getCode()") == fix["code"]
    app.press("End")
    state = app.graph_state()
    assert_step_matches(state, fixed, len(fixed["steps"]) - 1)
    assert app.errors == []


def test_a_fix_that_adds_a_line_is_aligned_by_line_and_call_order(app):
    original = app.open("?snippet=training_loop_no_zero_grad")
    _, fixed = apply_first_fix(app, original, "grad_accumulates_without_zero_grad")
    lines = {"original": original["code"].splitlines(), "fixed": fixed["code"].splitlines()}
    calls = {
        side: [i for i, s in enumerate(t["steps"]) if s["kind"] in ("backward", "grad")]
        for side, t in (("original", original), ("fixed", fixed))
    }
    rows = int(app.page.locator("#gs-compare").get_attribute("data-rows"))
    own = {"original": [], "fixed": []}  # the steps each run shows as its own, row by row
    grads_differ = 0
    app.press("Home")  # it opens at the first row that differs
    for r in range(rows):
        if r:
            app.press("ArrowRight")
        state = {side: side_state(app, side) for side in ("original", "fixed")}
        for side, trace in (("original", original), ("fixed", fixed)):
            assert_step_matches(state[side], trace, int(state[side]["shown"]))
            if state[side]["held"] == "false":
                own[side].append(int(state[side]["shown"]))
        i, j = int(state["original"]["shown"]), int(state["fixed"]["shown"])
        a, b = original["steps"][i], fixed["steps"][j]
        if state["original"]["held"] == state["fixed"]["held"] == "false":
            assert a["kind"] == b["kind"]
            if a["kind"] in (
                "forward",
                "update",
            ):  # forward and update steps pair up on the same line of code
                assert lines["original"][a["line"] - 1].strip() == lines["fixed"][b["line"] - 1].strip()
            else:  # calls pair up by their order
                assert calls["original"].index(i) == calls["fixed"].index(j)
        want = grad_diff_nodes(a, b)
        for side in ("original", "fixed"):
            assert set(state[side]["diff"].get("grad", [])) == want[side], (r, side)
        grads_differ += bool(want["original"])
    # every step of each run is shown as its own exactly once, in order
    assert own["original"] == list(range(len(original["steps"])))
    assert own["fixed"] == list(range(len(fixed["steps"])))
    # without zero_grad the grads accumulate from the second iteration on
    assert grads_differ > 0
    app.shot("compare_zero_grad")
    assert app.errors == []


def test_side_by_side_stacks_the_runs_in_a_narrow_column_without_horizontal_overflow(browser, server):
    p = Page(browser, server, viewport={"width": 420, "height": 900}, reduced_motion="reduce")
    try:
        original = p.open("?snippet=backward_twice_fails")
        apply_first_fix(p, original, "backward_through_freed_graph")
        p.press("End")
        boxes = [
            p.page.locator(f'.gs-cmp-col[data-side="{side}"]').bounding_box()
            for side in ("original", "fixed")
        ]
        assert boxes[1]["y"] >= boxes[0]["y"] + boxes[0]["height"] - 1
        assert p.page.evaluate("document.scrollingElement.scrollWidth - window.innerWidth") <= 1
        p.shot("compare_narrow")
        assert p.errors == []
    finally:
        p.close()


def test_escape_leaves_the_side_by_side_view(app):
    original = app.open("?snippet=backward_twice_fails")
    apply_first_fix(app, original, "backward_through_freed_graph")
    app.press("Escape")
    assert app.page.locator("#gs-compare").is_hidden()
    assert app.page.locator("#gs-graph").is_visible()
    app.press("End")  # the single view steps again
    assert app.graph_state()["step"] == app.graph_state()["steps"] - 1


def test_controls_of_diagnoses_and_side_by_side_are_labelled(app):
    original = app.open("?snippet=backward_twice_fails")
    unlabelled = """() => [...document.querySelectorAll('#gs-diagnoses button, #gs-compare button, .gs-narr-link')]
         .filter(el => el.offsetParent !== null)
         .filter(el => !(el.getAttribute('aria-label') || el.textContent.trim() || el.getAttribute('title')))
         .map(el => el.outerHTML.slice(0, 80))"""
    assert app.page.locator("#gs-diagnoses button").count() > 0
    assert app.page.evaluate(unlabelled) == []
    apply_first_fix(app, original, "backward_through_freed_graph")
    assert app.page.locator("#gs-compare button").count() > 0
    assert app.page.evaluate(unlabelled) == []
