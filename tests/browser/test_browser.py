"""The browser front end, end to end: the real server, real Chromium (Playwright).

Every claim on screen is checked against the trace the API returned to the page
(the tracer itself is checked against plain PyTorch in test_tracer_truth.py):
for each curated snippet, stepping with the keyboard through every step, each
node's data-freed / data-stale / data-executed and each grad text equal the
trace. Screenshots of key steps go to build/browser/ (gitignored) for a human
to look at.

Needs Chromium at /usr/bin/chromium (or $GRADSTEP_CHROMIUM): `apt-get install chromium`.
"""

from __future__ import annotations

import pytest
from gradstep import snippets
from testkit.browser_support import (
    Page,
    assert_step_matches,
    expected_at,
    fmt_grad,
    needs_chromium,
    running_server,
)
from testkit.torch_print import torch_elements

SNIPPETS = snippets.load_all()
# A grad spanning magnitudes (torch prints it in sci mode) and a complex one.
PRINTS_SCI = """import torch
x = torch.tensor([0.016021, 0.0012345, 1.09, 3209.9], requires_grad=True)
(x * x / 2).sum().backward()
"""
PRINTS_COMPLEX = """import torch
z = torch.tensor([1+2j, 3-1j], requires_grad=True)
(z * z.conj()).real.sum().backward()
"""

pytestmark = needs_chromium


@pytest.fixture
def app(browser, server):
    p = Page(browser, server, reduced_motion="reduce")
    yield p
    p.close()


# ---------------------------------------------------------------- tests

KEY_STEPS = {
    "backward_twice_fails": "last",
    "shared_trunk_partial_grads": "last",
    "retain_graph_accumulates": "last",
    "inplace_modified_saved_tensor_fails": "last",
    "create_graph_second_derivative": 2,
    "two_outputs_retain_graph": "last",
}


def test_every_snippet_steps_through_with_the_keyboard_and_matches_its_trace(browser, server):
    """One page, every curated snippet picked in turn, every step reached with ←/→/Home/End."""
    app = Page(browser, server, reduced_motion="reduce")
    try:
        app.open()
        for name in SNIPPETS:
            trace = app.pick(name)
            steps = len(trace["steps"])
            assert steps > 0, name
            if "# predict:" in trace["code"]:
                # an exercise: the app asks before each call is shown; its switch turns that off, so the
                # keys step through every step as in any snippet
                app.page.uncheck(".gs-ex-switch")
            if app.page.locator("g.gs-group").count():
                # a real model opens at a summary of module boxes: Expand all draws every node
                app.page.click(".gs-expand-all")
                app.page.wait_for_function("() => !document.querySelector('g.gs-group')")
            state = app.graph_state()
            assert_step_matches(state, trace, 0)
            for i in range(1, steps):
                app.press("ArrowRight")
                state = app.graph_state()
                assert_step_matches(state, trace, i)
            app.press("ArrowRight")  # past the end: stays
            assert app.graph_state()["step"] == steps - 1
            app.press("Home")
            assert app.graph_state()["step"] == 0
            app.press("End")
            assert_step_matches(app.graph_state(), trace, steps - 1)
            if steps > 1:
                app.press("ArrowLeft")
                assert_step_matches(app.graph_state(), trace, steps - 2)
            key = KEY_STEPS.get(name)
            if key is not None:
                app.press("End")
                if key != "last":
                    app.press("Home")
                    for _ in range(key):
                        app.press("ArrowRight")
                app.shot(f"{name}")
        assert app.errors == [], app.errors
    finally:
        app.close()


def test_second_backward_through_a_freed_graph_shows_its_error_at_its_line(app):
    trace = app.open("?snippet=backward_twice_fails")
    app.press("End")
    line = trace["error"]["line"]
    widget = app.page.locator(f'.gs-inline-error[data-error-line="{line}"]')
    assert widget.count() == 1
    assert "Trying to backward through the graph a second time" in widget.inner_text()
    # the widget sits right under its line: the line before it in the editor is that line of code
    prev_line = app.page.evaluate(
        """(line) => {
          const w = document.querySelector(`.gs-inline-error[data-error-line="${line}"]`);
          const block = w.closest('.cm-widgetBuffer, .cm-line') || w;
          let el = block.previousElementSibling;
          while (el && !el.classList.contains('cm-line')) el = el.previousElementSibling;
          return el ? el.textContent : null;
        }""",
        line,
    )
    assert prev_line == trace["code"].splitlines()[line - 1]
    banner = app.page.locator(".gs-banner").inner_text()
    assert "Trying to backward through the graph a second time" in banner
    assert "freed by the backward call at line" in banner
    failed = app.page.locator('[data-node-id][data-failed="true"]')
    assert failed.count() == 1
    assert failed.get_attribute("data-freed") == "true"
    app.shot("error_backward_twice")
    assert app.errors == []


def test_syntax_error_is_shown_inline_at_its_line(app):
    app.open("?snippet=retain_graph_accumulates")
    trace = app.run_code("import torch\nx = torch.ones(2, requires_grad=True)\ny = (x * 2\nprint(y)\n")
    assert trace["status"] == "error" and trace["error"]["type"] == "SyntaxError"
    line = trace["error"]["line"]
    widget = app.page.locator(f'.gs-inline-error[data-error-line="{line}"]')
    widget.wait_for()
    assert "SyntaxError" in widget.inner_text()
    assert app.page.locator(".gs-graph-empty").inner_text().startswith("No graph")
    assert "SyntaxError" in app.page.locator("#gs-run-status").inner_text()
    assert app.graph_state()["steps"] == 0
    app.shot("error_syntax")
    assert app.errors == []


def test_hovering_a_line_highlights_its_nodes_and_hovering_a_node_its_line(app):
    trace = app.open("?snippet=shared_trunk_partial_grads")
    app.press("End")
    line = next(n["line"] for n in trace["nodes"] if n["op"] == "TanhBackward0")
    made = {str(n["id"]) for n in trace["nodes"] if n.get("line") == line}
    # the editor line element for `line`
    app.page.locator(".cm-line").nth(line - 1).hover()
    linked = set(
        app.page.eval_on_selector_all(".gs-linked[data-node-id]", "els => els.map(e => e.dataset.nodeId)")
    )
    assert linked == made
    tanh = next(n["id"] for n in trace["nodes"] if n["op"] == "TanhBackward0")
    app.page.hover(f'[data-node-id="{tanh}"]')
    assert app.page.locator(".gs-line-linked").inner_text() == trace["code"].splitlines()[line - 1]


def test_clicking_a_node_opens_the_inspector_with_its_saved_tensors(app):
    trace = app.open("?snippet=retain_graph_accumulates")
    app.press("End")
    pow_id = next(n["id"] for n in trace["nodes"] if n["op"] == "PowBackward0")
    app.page.click(f'[data-node-id="{pow_id}"]')
    text = app.page.locator(".gs-inspector").inner_text()
    assert "PowBackward0" in text and "line" in text
    saved = next(s for s in trace["nodes"][pow_id]["saved"] if s["kind"] == "tensor")
    row = app.page.locator(".gs-inspector tbody tr", has_text=saved["name"]).first.inner_text()
    assert "freed" in row
    assert app.page.locator('.gs-tensors [data-tensor-grad="x"]').inner_text() == fmt_grad(
        next(t for t in trace["steps"][-1]["tensors"] if t["name"] == "x")["grad"]
    )


def test_the_tensors_panel_shows_grads_as_torch_prints_them(app):
    app.open("?snippet=retain_graph_accumulates")
    for code, name in ((PRINTS_SCI, "x"), (PRINTS_COMPLEX, "z")):
        app.run_code(code)
        app.press("End")
        scope: dict = {}
        exec(compile(code, "<plain>", "exec"), scope)  # plain torch, in this process
        want = "[" + ", ".join(torch_elements(scope[name].grad)) + "]"
        assert app.page.locator(f'.gs-tensors [data-tensor-grad="{name}"]').inner_text() == want


def test_big_model_collapses_by_module_and_expands_on_click(app):
    app.open("?snippet=retain_graph_accumulates")
    code = (
        "import torch\nfrom torch import nn\ntorch.manual_seed(0)\n"
        "layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)\n"
        "model = nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False)\n"
        "out = model(torch.randn(2, 3, 16))\nloss = out.pow(2).mean()\nloss.backward()\n"
    )
    trace = app.run_code(code)
    assert trace["status"] == "ok" and len(trace["nodes"]) > 150
    groups = app.page.locator("g.gs-group[data-group]")
    assert groups.count() >= 4
    assert app.page.locator("[data-node-id]").count() < len(trace["nodes"])
    app.press("End")
    app.shot("big_collapsed")
    target = groups.nth(1).get_attribute("data-group")
    app.page.click(f'g.gs-group[data-group="{target}"]')
    app.page.wait_for_selector(f'g.gs-frame[data-group="{target}"]')
    inside = [n for n in trace["nodes"] if (n.get("module") or "").startswith(target)]
    # every node created in that module (not in a still-collapsed submodule) is drawn now
    shown = set(app.page.eval_on_selector_all("[data-node-id]", "els => els.map(e => e.dataset.nodeId)"))
    direct = [n for n in inside if n.get("module") == target]
    assert direct and all(str(n["id"]) in shown for n in direct)
    app.shot("big_expanded_one")
    assert app.errors == []


def test_narrow_column_and_dark_theme_have_no_horizontal_overflow(browser, server):
    p = Page(
        browser, server, viewport={"width": 420, "height": 900}, color_scheme="dark", reduced_motion="reduce"
    )
    try:
        p.open("?snippet=two_outputs_without_retain_fails")
        p.press("End")
        overflow = p.page.evaluate("document.scrollingElement.scrollWidth - window.innerWidth")
        assert overflow <= 1
        assert p.page.evaluate("getComputedStyle(document.body).backgroundColor") != "rgb(246, 247, 249)"
        p.shot("narrow_dark")
        assert p.errors == []
    finally:
        p.close()


def test_controls_are_labelled_for_assistive_technology(app):
    app.open("?snippet=retain_graph_accumulates")
    unlabelled = app.page.evaluate(
        """() => [...document.querySelectorAll('button, [role=button], input, [tabindex="0"]')]
             .filter(el => el.offsetParent !== null || el instanceof SVGElement)
             .filter(el => !(el.getAttribute('aria-label') || el.textContent.trim() || el.getAttribute('title')))
             .map(el => el.outerHTML.slice(0, 80))"""
    )
    assert unlabelled == []
    assert (
        app.page.locator("[data-node-id][aria-description]").count()
        == app.page.locator("[data-node-id]").count()
    )


def test_embed_render_draws_a_trace_without_the_app(app):
    """frontend/embed.js: render({trace, el, step, theme}) — what course pages and static exports use."""
    trace = app.open("?snippet=two_outputs_retain_graph")
    app.page.evaluate(
        """async (trace) => {
          document.querySelector('main').remove();
          document.querySelector('header').remove();
          const el = document.createElement('div');
          el.id = 'embed';
          el.style.width = '720px';
          document.body.append(el);
          const { render } = await import('/static/embed.js');
          window.embedded = await render({ trace, el, step: 1, theme: 'dark' });
        }""",
        trace,
    )
    assert_step_matches(app.graph_state(), trace, 1)
    app.page.focus("#embed")
    app.page.keyboard.press("End")
    assert_step_matches(app.graph_state(), trace, len(trace["steps"]) - 1)
    assert app.page.locator("#embed .cm-content").get_attribute("contenteditable") == "false"
    app.shot("embed_dark")
    assert app.errors == []


# ---------------------------------------------------------------- stepping vs jumping

SEVERAL_BACKWARDS = """import torch
a = torch.tensor([1.0, 2.0], requires_grad=True)
b = torch.tensor([3.0, -1.0], requires_grad=True)
c = (a * b).sum()
c.backward(retain_graph=True)
d = (a.exp() * b).sum()
d.backward(retain_graph=True)
c.backward()
d.backward()
e = (b ** 3).mean()
e.backward()
"""

# Prints, a warning raised by a line, one raised by a call (create_graph=True) and output after the
# last step: every part of the Output panel changes along the steps.
PRINTS_AND_WARNS = """import torch
import warnings
a = torch.tensor([1.0, 2.0], requires_grad=True)
b = torch.tensor([3.0, -1.0], requires_grad=True)
c = (a * b).sum()
print("c is", c.item())
c.backward(retain_graph=True)
warnings.warn("a's grad was written once")
d = (a.exp() * b).sum()
print("d is", round(d.item(), 3))
d.backward(retain_graph=True)
c.backward()
e = (b ** 3).mean()
e.backward(create_graph=True)
print("done")
"""

# What the step shows, as DOM: the graph (less its zoom transform, the particles and the
# transient animation classes), the narration banner, the stepper and the panels. Serialised with
# attributes and class names sorted (their order carries no meaning). The argument: a selector of
# the viewer to read (default: the page's first).
SNAPSHOT_JS = """(root) => {
  const R = root ? document.querySelector(root) : document;
  const ser = (n) => {
    if (n.nodeType === 3) return n.data;
    if (n.nodeType !== 1) return '';
    const attrs = [...n.attributes]
      .map((a) => [a.name, a.name === 'class' ? a.value.split(/\\s+/).filter(Boolean).sort().join(' ') : a.value])
      .filter(([k, v]) => !((k === 'class' || k === 'style') && v === ''))
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([k, v]) => ` ${k}="${v}"`).join('');
    return `<${n.localName}${attrs}>${[...n.childNodes].map(ser).join('')}</${n.localName}>`;
  };
  const vp = R.querySelector('.gs-graph-svg .gs-viewport').cloneNode(true);
  vp.removeAttribute('transform');
  vp.querySelector('.gs-flow').replaceChildren();
  for (const el of vp.querySelectorAll('.gs-pop, .gs-running, .gs-freeing, .gs-grad-hold')) {
    el.classList.remove('gs-pop', 'gs-running', 'gs-freeing', 'gs-grad-hold');
  }
  const part = (sel) => { const el = R.querySelector(sel); return el ? ser(el) : null; };
  return { graph: ser(vp), banner: part('.gs-banner'), stepper: part('.gs-stepper'), panels: part('.gs-panels') };
}"""


def settled_snapshot(app: Page) -> dict:
    # animations over: no particle left, no transient class on any node
    app.page.wait_for_function(
        "!document.querySelector('.gs-particle, .gs-pop, .gs-running, .gs-freeing, .gs-grad-hold')",
        timeout=15_000,
    )
    return app.page.evaluate(SNAPSHOT_JS)


def jump_to(app: Page, i: int) -> None:
    """Jump to step i from the first step, by its button on the timeline (no animation)."""
    app.press("Home")
    app.page.click(f'.gs-timeline li[data-index="{i}"] button')


# A fresh viewer (embed.js render) of the same trace at step i with the same node selected, over
# the page; its panels are scrolled into view and given a frame to settle before it is read.
FRESH_JS = """async ([trace, step, node]) => {
  const host = document.createElement('div');
  host.id = 'gs-fresh';
  host.style.cssText = 'position: absolute; left: 0; top: 0; width: 1400px; z-index: 50;';
  document.body.append(host);
  const { render } = await import('/static/embed.js');
  window.freshViewer = await render({ trace, el: host, step });
  window.freshViewer.selectNode(node);
  host.querySelector('.gs-panels').scrollIntoView();
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(r, 50))));
}"""


def fresh_render(app: Page, trace: dict, i: int, node: int) -> dict:
    app.page.evaluate(FRESH_JS, [trace, i, node])
    snap = app.page.evaluate(SNAPSHOT_JS, "#gs-fresh")
    app.page.evaluate("window.freshViewer.destroy(); document.getElementById('gs-fresh').remove()")
    return snap


def inner(html: str) -> str:
    """A serialised element without its own tag."""
    return html[html.index(">") + 1 : html.rindex("<")]


def snapshot_at_panels(app: Page) -> dict:
    app.page.evaluate("document.querySelector('#gs-viewer .gs-panels').scrollIntoView()")
    return app.page.evaluate(SNAPSHOT_JS, "#gs-viewer")


@pytest.mark.parametrize("pick", ["MulBackward0", "AccumulateGrad"])
def test_jumping_stepping_back_and_a_fresh_render_show_the_same_page_as_stepping_forward(app, pick):
    """The page is a function of (trace, step): stepping forward, stepping back, jumping from
    anywhere and a fresh viewer at that step show the same graph, banner and panels (tensors rows
    and grad texts, the inspector of a selected node, output and warnings)."""
    app.open("?snippet=retain_graph_accumulates")
    trace = app.run_code(PRINTS_AND_WARNS)
    n = len(trace["steps"])
    node = next(x["id"] for x in trace["nodes"] if x["op"] == pick)
    app.page.click(f'.gs-graph [data-node-id="{node}"]')
    app.press("Home")
    forward = [snapshot_at_panels(app)]
    for _ in range(1, n):
        app.press("ArrowRight")
        forward.append(snapshot_at_panels(app))
    assert len({str(s) for s in forward}) == n  # every step shows something of its own
    backward = {n - 1: snapshot_at_panels(app)}
    for i in range(n - 2, -1, -1):
        app.press("ArrowLeft")
        backward[i] = snapshot_at_panels(app)
    jumped = {}
    for i in [n - 1, 0, n // 2, 1, n - 2, 2, n - 3, 3]:  # from far and near, both ways
        app.page.click(f'#gs-viewer .gs-timeline li[data-index="{i}"] button')
        jumped[i] = snapshot_at_panels(app)
    for i in range(n):
        for part in ("graph", "banner", "stepper", "panels"):
            assert backward[i][part] == forward[i][part], f"step {i}: the {part} differs after stepping back"
            if i in jumped:
                assert jumped[i][part] == forward[i][part], f"step {i}: the {part} differs after a jump"
        fresh = fresh_render(app, trace, i, node)
        for part in ("graph", "banner", "panels"):
            # the page's slots carry ids an embed's do not: their contents are compared
            assert inner(fresh[part]) == inner(forward[i][part]), (
                f"step {i}: the {part} differs from a fresh render"
            )
    # the panels said something at those steps: what the run printed and warned, the node inspected
    panels = [s["panels"] for s in forward]
    assert "c is 1.0" in panels[1] and "c is 1.0" not in panels[2]
    assert "a's grad was written once" in panels[2] and "a's grad was written once" not in panels[3]
    assert "create_graph=True" in panels[n - 1] and "done" in panels[n - 1] and "done" not in panels[n - 2]
    assert all(f"<dd>{node}</dd>" in p for p in panels)
    assert app.errors == []


# Editor transactions while the viewer shows a step again, then moves to the next step's line.
DISPATCHES_JS = """() => {
  const { viewer, editor } = window.gradstep;
  let n = 0;
  const dispatch = editor.view.dispatch.bind(editor.view);
  editor.view.dispatch = (...a) => { n++; return dispatch(...a); };
  viewer.setStep(viewer.step);
  const same = n;
  viewer.next();
  editor.view.dispatch = dispatch;
  return { same, next: n - same, current: document.querySelector('.cm-line[data-current-line]').textContent };
}"""


def test_showing_the_same_step_again_leaves_the_editor_alone(app):
    """The editor is updated only when the step's line or marks change."""
    app.open("?snippet=retain_graph_accumulates")
    trace = app.run_code(PRINTS_AND_WARNS)
    app.press("Home")
    got = app.page.evaluate(DISPATCHES_JS)
    assert got["same"] == 0
    assert got["next"] == 1
    assert got["current"] == PRINTS_AND_WARNS.splitlines()[trace["steps"][1]["line"] - 1]
    assert app.errors == []


def test_a_panel_away_from_the_screen_is_updated_when_it_comes_into_view(browser, server):
    """Panels far below a small window cost nothing per step; scrolled to, they show the step."""
    p = Page(browser, server, reduced_motion="reduce", viewport={"width": 420, "height": 500})
    try:
        p.open("?snippet=retain_graph_accumulates")
        trace = p.run_code(PRINTS_AND_WARNS)
        last = len(trace["steps"]) - 1
        p.page.evaluate("window.scrollTo(0, 0)")
        p.page.wait_for_timeout(100)  # the panels' visibility observed
        p.press("End")
        assert p.graph_state()["step"] == last
        stdout = p.page.locator(".gs-output pre.gs-stdout").first
        assert stdout.get_attribute("data-stdout-step") != str(last)
        p.page.evaluate("document.querySelector('.gs-output').scrollIntoView()")
        p.page.wait_for_function(
            f"document.querySelector('.gs-output pre.gs-stdout').dataset.stdoutStep === '{last}'",
            timeout=5_000,
        )
        assert "done" in p.page.locator(".gs-output").inner_text()
        assert p.errors == []
    finally:
        p.close()


def test_stepping_with_animations_settles_on_the_same_graph_as_a_jump(browser, server):
    p = Page(browser, server)  # animations on
    try:
        p.open("?snippet=retain_graph_accumulates")
        trace = p.run_code(SEVERAL_BACKWARDS)
        last = len(trace["steps"]) - 1
        for _ in range(last):
            p.press("ArrowRight")
        stepped = settled_snapshot(p)
        jump_to(p, last)
        jumped = settled_snapshot(p)
        assert jumped["graph"] == stepped["graph"]
        assert_step_matches(p.graph_state(), trace, last)
        assert p.errors == []
    finally:
        p.close()


# ---------------------------------------------------------------- failure views, against real limits


def limits_server(cpu_seconds: int, wall_seconds: int):
    """A server with one worker, 512 MB per run and the given CPU and wall-clock limits."""
    return running_server(
        GRADSTEP_CPU_SECONDS=str(cpu_seconds),
        GRADSTEP_WALL_SECONDS=str(wall_seconds),
        GRADSTEP_MEMORY_MB="512",
        GRADSTEP_WORKERS="1",
    )


def opened(browser, base: str) -> Page:
    p = Page(browser, base, reduced_motion="reduce")
    p.open("?snippet=retain_graph_accumulates")
    return p


@pytest.fixture(scope="module")
def limited_server():
    """A server with short limits: 2 s of CPU, 8 s of wall clock, 512 MB per run."""
    with limits_server(2, 8) as base:
        yield base


@pytest.fixture
def limited(browser, limited_server):
    p = opened(browser, limited_server)
    yield p
    p.close()


def assert_not_blank(app: Page) -> None:
    """A failed run still shows words: the run status, and the graph pane says why it is empty."""
    assert app.page.locator("#gs-run-status").inner_text().strip()
    empty = app.page.locator(".gs-graph-empty")
    assert empty.is_visible() and empty.inner_text().startswith("No graph")
    assert app.errors == []


def test_a_snippet_that_loops_forever_says_it_hit_the_time_limit(limited):
    trace = limited.run_code("import torch\nx = torch.ones(2, requires_grad=True)\nwhile True:\n    pass\n")
    # the CPU limit (2 s) or, on a busy machine, the wall clock (8 s) stops it first: the run itself
    # short of either (status limit), or the sandbox at the wall clock
    assert (trace["status"], trace.get("limit")) in (("limit", "cpu"), ("limit", "wall"), ("timeout", "wall"))
    words = "CPU time limit" if trace["limit"] == "cpu" else "wall-clock time limit"
    assert f"Run stopped by the {words}." in limited.page.locator(".gs-banner").inner_text()
    assert "time limit" in limited.page.locator("#gs-run-status").inner_text()
    assert_not_blank(limited)
    limited.shot("failure_time_limit")


def test_a_snippet_that_asks_for_too_much_memory_says_it_hit_the_memory_limit(limited):
    trace = limited.run_code("import torch\nx = torch.ones(10**10)\n")
    # refused by the per-run data limit: torch raises, the run ends as the memory limit, the page says so
    assert (trace["status"], trace["limit"], trace["error"]["type"]) == ("limit", "memory", "RuntimeError")
    banner = limited.page.locator(".gs-banner").inner_text()
    assert "Run stopped by the memory limit. Line 2 needed more memory than a run may use here" in banner
    assert_not_blank(limited)
    limited.shot("failure_memory_refused")


@pytest.fixture(scope="module")
def memory_limited_server():
    """512 MB per run and CPU to spare: in one CI run the 2 s CPU limit stopped the memory hog before
    the memory cgroup's kill did (touching 512 MB of pages, likely slowed by the kernel's reclaim)."""
    with limits_server(20, 30) as base:
        yield base


@pytest.fixture
def memory_limited(browser, memory_limited_server):
    p = opened(browser, memory_limited_server)
    yield p
    p.close()


def test_a_snippet_killed_for_its_memory_use_says_it_hit_the_memory_limit(memory_limited):
    app = memory_limited
    # shared pages are not data: only the memory cgroup stops this one (SIGKILL)
    trace = app.run_code(
        "import mmap\nm = mmap.mmap(-1, 2**31)\nfor i in range(0, 2**31, 4096):\n    m[i] = 1\n"
    )
    assert (trace["status"], trace["limit"]) == ("limit", "memory")
    assert "Run stopped by the memory limit." in app.page.locator(".gs-banner").inner_text()
    assert "memory limit" in app.page.locator("#gs-run-status").inner_text()
    assert "512 MB" in app.page.locator(".gs-inline-error").inner_text()
    assert_not_blank(app)


def test_a_snippet_that_prints_too_much_says_its_output_was_capped(limited):
    code = "import torch\nx = torch.ones(2, requires_grad=True)\nfor i in range(100000):\n    print(i)\ny = (x * 2).sum()\ny.backward()\n"
    trace = limited.run_code(code)
    assert trace["status"] == "ok" and "stdout" in trace["truncated"]
    banner = limited.page.locator(".gs-banner").inner_text()
    assert "Output capped: the snippet printed more than a run may keep" in banner
    # the run itself is still shown: its graph, and the start of what it printed
    assert limited.page.locator("[data-node-id]").count() == len(trace["nodes"])
    # the step the prints came before shows their beginning in the Output panel, the cap still noted
    printed = next(i for i, st in enumerate(trace["steps"]) if st.get("stdout"))
    jump_to(limited, printed)
    assert "Output capped" in limited.page.locator(".gs-banner").inner_text()
    assert "0\n1\n2\n3\n" in limited.page.locator(".gs-output pre").first.inner_text()
    assert limited.errors == []


def test_a_syntax_error_is_marked_at_its_column(limited):
    trace = limited.run_code("import torch\nx = torch.ones(2, requires_grad=True)\ny = (x * 2\nprint(y)\n")
    err = trace["error"]
    assert err["type"] == "SyntaxError" and err["column"] is not None
    mark = limited.page.locator(f'.gs-error-col[data-error-column="{err["column"]}"]')
    assert mark.count() == 1
    code_line = trace["code"].splitlines()[err["line"] - 1]
    # the mark covers the character Python points at, on the error's line
    assert mark.inner_text() == code_line[err["column"] - 1]
    where = mark.evaluate(
        """el => { const line = el.closest('.cm-line');
                   const r = document.createRange(); r.setStart(line, 0); r.setEndBefore(el);
                   return { line: line.textContent, before: r.toString() }; }"""
    )
    assert where == {"line": code_line, "before": code_line[: err["column"] - 1]}
    assert f"column {err['column']}" in limited.page.locator(".gs-inline-error").inner_text()
    assert_not_blank(limited)
    limited.shot("error_syntax_column")


def test_a_syntax_error_past_the_end_of_its_line_gets_a_caret_there(limited):
    trace = limited.run_code("import torch\nif True\n    x = torch.ones(2)\n")
    err = trace["error"]
    code_line = trace["code"].splitlines()[err["line"] - 1]
    assert err["type"] == "SyntaxError" and err["column"] == len(code_line) + 1
    caret = limited.page.locator(f'.gs-error-col-end[data-error-column="{err["column"]}"]')
    assert caret.count() == 1
    line_text = caret.evaluate("el => el.closest('.cm-line').textContent.replace(/\\u200b/g, '')")
    assert line_text == code_line
    assert_not_blank(limited)


def test_editing_an_example_says_its_explanation_is_about_the_original_code(app):
    app.open("?snippet=retain_graph_accumulates")
    note = app.page.locator(".gs-snippet-info .gs-info-edited")
    assert not note.is_visible()
    # a small edit keeps the example's card (pasted code drops it: test_browser_page_examples.py)
    edited = app.page.evaluate("window.gradstep.editor.getCode()") + "print(x.grad)\n"
    app.run_code(edited)
    assert note.is_visible() and "about the original" in note.inner_text()
    assert (
        app.page.evaluate("getComputedStyle(document.querySelector('#gs-picker-current'), '::after').content")
        == '" (edited)"'
    )
    app.pick("retain_graph_accumulates")
    assert not note.is_visible()
    assert app.errors == []


def test_a_virtual_graph_keeps_the_hooks_of_off_screen_nodes_current(app):
    """Big graphs build and paint only what is in view; every node's data-* hooks still follow the step."""
    app.open("?snippet=retain_graph_accumulates")
    code = (
        "import torch\nfrom torch import nn\ntorch.manual_seed(0)\n"
        "layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)\n"
        "model = nn.TransformerEncoder(layer, num_layers=8, enable_nested_tensor=False)\n"
        "out = model(torch.randn(2, 3, 16))\nloss = out.pow(2).mean()\nloss.backward(retain_graph=True)\n"
        "loss.backward()\n"
    )
    trace = app.run_code(code)
    app.page.evaluate("window.gradstep.viewer.expandAll()")
    app.page.wait_for_function(
        f"document.querySelectorAll('[data-node-id]').length === {len(trace['nodes'])}", timeout=60_000
    )
    assert (
        app.page.evaluate("document.querySelectorAll('[data-node-id][style*=\"display: none\"]').length") > 0
    )
    hooks = ("freed", "stale", "executed", "failed")
    for i in range(len(trace["steps"])):
        jump_to(app, i)
        want = {k: {h: v[h] for h in hooks} for k, v in expected_at(trace, i).items()}
        app.page.wait_for_function(
            """(want) => Object.entries(want).every(([id, hooks]) => {
                 const el = document.querySelector(`[data-node-id="${id}"]`);
                 return el && el.dataset.alive === 'true'
                   && Object.entries(hooks).every(([k, v]) => el.dataset[k] === v);
               })""",
            arg=want,
            timeout=15_000,
        )
    assert app.errors == []
