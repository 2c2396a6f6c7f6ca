"""Notebooks: gradstep.trace, gradstep.show, the %%gradstep cell magic, the anywidget module.

The cell magic runs in IPython's own InteractiveShell; what a notebook displays (the iframe of
_repr_html_, the anywidget module with a model) is rendered in Chromium and checked against the
trace, whose values are checked against plain PyTorch.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import gradstep
import orjson
import pytest
import torch
from gradstep.columns import pack
from gradstep.notebook import Stepper, widget_esm
from testkit.browser_support import GRAPH_STATE, assert_step_matches, fmt_values, needs_chromium

REPO = Path(__file__).resolve().parents[2]
from testkit.hosts_support import CODE, plain_grads  # noqa: E402  (the hosts run the same cell)


def srcdoc_of(markup: str) -> str:
    m = re.search(r'srcdoc="([^"]*)"', markup)
    assert m, markup[:200]
    return html.unescape(m.group(1))


def trace_in_page(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="gradstep-trace">(.*?)</script>', page, re.S)
    return json.loads(m.group(1))


# ---------------------------------------------------------------- Python side


def test_importing_gradstep_and_its_notebook_module_does_not_import_torch():
    r = subprocess.run(
        [sys.executable, "-c", "import sys, gradstep, gradstep.notebook; print('torch' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.stdout.strip() == "False", r.stderr


def test_trace_returns_a_typed_trace_whose_grads_match_plain_torch():
    t = gradstep.trace(CODE)
    assert isinstance(t, gradstep.Trace)
    calls = [s for s in t.steps if s.kind == "backward"]
    got = [next(x.grad.values for x in s.tensors.rows() if x.name == "w") for s in calls]
    want = plain_grads()
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        # values are rounded to the digits torch prints: at least 4 significant digits of their own
        assert g == pytest.approx(w, rel=1e-3, abs=1e-3 * max(map(abs, w)))


def test_show_displays_an_iframe_holding_the_exported_page_of_the_code():
    shown = gradstep.show(CODE)
    page = srcdoc_of(shown._repr_html_())
    assert trace_in_page(page)["code"] == CODE
    assert '<script type="module">' in page


def test_show_carries_the_same_verified_diagnoses_as_trace():
    code = (REPO / "snippets" / "backward_twice_fails.py").read_text()
    shown = gradstep.show(code)
    assert shown.trace.diagnoses, "a second backward through a freed graph is a known mistake"
    assert shown.trace.diagnoses == gradstep.trace(code).diagnoses


def test_show_opens_at_a_step_past_the_end_as_the_last_step():
    shown = gradstep.show(CODE, step=500)
    assert shown.step == len(shown.data["steps"]) - 1


def test_show_refuses_an_unknown_theme_by_name():
    with pytest.raises(ValueError, match="theme must be one of light, dark, auto, not 'sepia'"):
        gradstep.show(CODE, theme="sepia")


def test_show_refuses_a_height_too_small_to_see():
    with pytest.raises(ValueError, match="height must be a whole number of pixels, at least 120"):
        gradstep.show(CODE, height=10)


def test_show_refuses_code_that_is_not_a_string():
    with pytest.raises(TypeError, match="code must be a string of Python, not int"):
        gradstep.show(42)


def test_a_stepper_saves_the_same_page_gradstep_export_writes(tmp_path):
    shown = gradstep.show(CODE, step=1, theme="dark")
    path = shown.save(tmp_path / "s.html")
    assert path.read_text() == shown.html()
    assert trace_in_page(path.read_text()) == orjson.loads(orjson.dumps(pack(shown.data)))


# ---------------------------------------------------------------- %%gradstep


@pytest.fixture(scope="module")
def shell():
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell

    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "gradstep")
    yield sh


def test_load_ext_registers_the_gradstep_cell_magic(shell):
    assert "gradstep" in shell.magics_manager.magics["cell"]


def test_cell_magic_traces_the_cell_and_displays_the_stepper(shell):
    result = shell.run_cell(f"%%gradstep --step 2 --theme light\n{CODE}")
    assert result.success, result.error_in_exec
    shown = result.result
    assert isinstance(shown, Stepper)
    assert (shown.step, shown.theme) == (2, "light")
    formatted, _ = shell.display_formatter.format(shown)
    assert trace_in_page(srcdoc_of(formatted["text/html"]))["code"].strip() == CODE.strip()


def test_cell_magic_with_an_unknown_option_is_a_usage_error(shell):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match=r"%%gradstep: unrecognized arguments: --colour"):
        shell.run_cell_magic("gradstep", "--colour red", CODE)


def test_cell_magic_with_a_bad_theme_is_a_usage_error_naming_the_themes(shell):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="theme must be one of light, dark, auto"):
        shell.run_cell_magic("gradstep", "--theme pink", CODE)


# ---------------------------------------------------------------- anywidget


def test_stepper_widget_is_an_anywidget_carrying_the_trace():
    anywidget = pytest.importorskip("anywidget")
    shown = gradstep.show(CODE, step=1)
    w = shown.widget()
    assert isinstance(w, anywidget.AnyWidget)
    assert (w.trace, w.step, w.theme) == (pack(shown.data), 1, "auto")
    assert "export default" in w._esm


# ---------------------------------------------------------------- in Chromium


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1200, "height": 900})
    p = ctx.new_page()
    p.errors = []
    p.on("console", lambda m: m.type == "error" and p.errors.append(m.text))
    p.on("pageerror", lambda e: p.errors.append(str(e)))
    yield p
    ctx.close()


@needs_chromium
def test_notebook_output_shows_the_stepper_with_the_grads_of_plain_torch(page):
    shown = gradstep.show(CODE, step=100)
    page.set_content(f"<h1>a notebook</h1>{shown._repr_html_()}")
    frame = page.frame_locator("iframe.gradstep-frame")
    frame.locator("body[data-ready=true]").wait_for(timeout=30_000)
    inner = next(f for f in page.frames if f != page.main_frame)
    last = len(shown.data["steps"]) - 1
    assert_step_matches(inner.evaluate(GRAPH_STATE), shown.data, last)
    w = inner.locator('[data-grad-for="w"]').first.text_content()
    assert w == fmt_values(plain_grads()[-1])
    assert page.errors == []


WIDGET_HOST = """async ([esm, trace]) => {
  const url = URL.createObjectURL(new Blob([esm], { type: "text/javascript" }));
  const mod = await import(url);
  const state = { trace, step: 1, theme: "dark" };
  const handlers = {};
  window.model = {
    get: (k) => state[k],
    set: (k, v) => { state[k] = v; (handlers["change:" + k] || []).forEach((f) => f()); },
    on: (ev, f) => { (handlers[ev] ||= []).push(f); },
    off: (ev, f) => { handlers[ev] = (handlers[ev] || []).filter((g) => g !== f); },
    save_changes() {},
  };
  const el = document.createElement("div");
  el.id = "out";
  document.body.append(el);
  window.cleanup = await mod.default.render({ model: window.model, el });
}"""

SHADOW_STEP = """() => {
  const root = document.querySelector('.gradstep-widget-host').shadowRoot;
  const s = root.querySelector('.gs-stepper');
  return s ? [Number(s.dataset.step), Number(s.dataset.steps)] : null;
}"""


@needs_chromium
def test_widget_module_renders_the_models_trace_and_follows_its_step(page):
    data = gradstep.show(CODE).data
    page.set_content("<title>host</title>")
    page.evaluate(WIDGET_HOST, [widget_esm(), data])
    assert page.evaluate(SHADOW_STEP) == [1, len(data["steps"])]
    page.evaluate("model.set('step', 1000)")
    page.wait_for_function(f"({SHADOW_STEP})()[0] === {len(data['steps']) - 1}", timeout=10_000)
    # the page's own styles are untouched: ours live in the widget's shadow root
    assert page.evaluate("document.styleSheets.length") == 0
    assert page.errors == []


@needs_chromium
def test_widget_module_without_a_trace_says_so(page):
    page.set_content("<title>host</title>")
    page.evaluate(WIDGET_HOST, [widget_esm(), None])
    text = page.evaluate(
        "document.querySelector('.gradstep-widget-host').shadowRoot.querySelector('[role=alert]').textContent"
    )
    assert 'no "trace"' in text


FRAME_HEIGHTS = """() => {
  const f = document.querySelector('iframe.gradstep-frame');
  return [f.getBoundingClientRect().height, f.contentDocument.documentElement.scrollHeight];
}"""


@needs_chromium
def test_notebook_output_grows_to_the_height_of_the_stepper(page):
    page.set_content(gradstep.show(CODE)._repr_html_())
    page.frame_locator("iframe.gradstep-frame").locator("body[data-ready=true]").wait_for(timeout=30_000)
    page.wait_for_function(
        f"(({FRAME_HEIGHTS})()).every((h, _, a) => Math.abs(h - a[1]) <= 1)", timeout=10_000
    )
    outer, inner = page.evaluate(FRAME_HEIGHTS)
    assert outer > 300 and abs(outer - inner) <= 1


@needs_chromium
def test_notebook_output_with_a_height_keeps_it(page):
    listen = "<script>window.sizes = []; addEventListener('message', (e) => e.data.height && sizes.push(e.data.height));</script>"
    page.set_content(listen + gradstep.show(CODE, height=400)._repr_html_())
    page.wait_for_function("window.sizes.length > 0", timeout=30_000)  # the page did report its height
    outer, inner = page.evaluate(FRAME_HEIGHTS)
    assert outer == 400 < inner


def test_cell_magic_on_a_failing_cell_shows_the_error_plain_torch_raises(shell):
    failing = "import torch\nx = torch.ones(3, requires_grad=True)\n(x * 2).backward()\n"
    with pytest.raises(RuntimeError) as plain:
        x = torch.ones(3, requires_grad=True)
        (x * 2).backward()
    shown = shell.run_cell_magic("gradstep", "", failing)
    assert shown.trace.status == "error"
    assert shown.trace.error.type == "RuntimeError"
    assert shown.trace.error.message == str(plain.value)
    assert shown.trace.error.line == 3


# ---------------------------------------------------------------- what a notebook saves


def test_show_output_says_how_to_see_it_where_the_notebook_will_not_run_it():
    bundle = gradstep.show(CODE)._repr_mimebundle_()
    assert "jupyter trust" in bundle["text/plain"]
    assert 'class="gradstep-trust-hint"' in bundle["text/html"]  # removed by the output's own script


def test_widget_state_holds_a_small_loader_and_the_kernel_sends_the_front_end():
    pytest.importorskip("anywidget")
    w = gradstep.show(CODE).widget()
    assert len(w._esm) < 5_000 < len(widget_esm())
    sent = []
    w.send = sent.append
    w._handle_custom_msg({"type": "gradstep:esm?"}, [])
    assert sent == [{"type": "gradstep:esm", "source": widget_esm()}]
    assert "run the cell" in repr(w)


def test_module_widget_shows_an_exported_module_with_its_step(tmp_path):
    pytest.importorskip("anywidget")
    from gradstep.export import export_widget
    from gradstep.notebook import module_widget

    path = tmp_path / "cube.mjs"
    path.write_text(export_widget(gradstep.trace(CODE)))
    w = module_widget(path, step=2)
    assert (w._esm, w.step, w.theme) == (path.read_text(), 2, None)


FAILING = "import torch\nx = torch.tensor(2.0, requires_grad=True)\ny = x ** 7\ny.backward()\ny.backward()\n"


def test_show_keeps_the_run_of_each_fix_it_offers_and_the_widget_carries_them():
    shown = gradstep.show(FAILING)
    offered = [f["code"] for d in shown.data["diagnoses"] for f in d["fixes"]]
    assert offered and sorted(shown.fixes) == sorted(offered)
    for code, run in shown.fixes.items():
        namespace: dict = {}
        exec(compile(code, "<fix>", "exec"), namespace)  # plain torch runs the fix cleanly
        assert run["status"] == "ok"
    try:
        import anywidget  # noqa: F401
    except ImportError:
        return  # the widget needs it
    assert sorted(shown.widget().fixes) == sorted(offered)


@needs_chromium
@pytest.mark.parametrize(("width", "height"), [(700, 900), (390, 844)])
def test_notebook_output_of_a_failing_cell_shows_its_diagnosis_and_applies_the_fix_offline(
    browser, width, height
):
    from testkit.browser_support import EMBED_BOXES, assert_stepper_on_one_screen

    ctx = browser.new_context(viewport={"width": width, "height": height})
    requests: list[str] = []
    ctx.route("**/*", lambda r: (requests.append(r.request.url), r.abort()))
    p = ctx.new_page()
    try:
        p.set_content(gradstep.show(FAILING)._repr_html_())
        p.frame_locator("iframe.gradstep-frame").locator("body[data-ready=true]").wait_for(timeout=30_000)
        inner = next(f for f in p.frames if f != p.main_frame)
        top = p.evaluate("document.querySelector('iframe.gradstep-frame').getBoundingClientRect().top")
        assert_stepper_on_one_screen(inner.evaluate(EMBED_BOXES, "#gradstep"), -top, height)
        assert (
            inner.locator(".gs-embed-diagnoses .gs-diag").get_attribute("data-kind")
            == "backward_through_freed_graph"
        )
        inner.click(".gs-apply-fix")
        inner.wait_for_function("document.querySelector('.gs-embed-compare').dataset.rows", timeout=15_000)
        assert inner.locator(".gs-cmp-col").count() == 2
        assert requests == []
    finally:
        ctx.close()


# ---------------------------------------------------------------- the exercise option


def options_in_page(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="gradstep-options">(.*?)</script>', page, re.S)
    return json.loads(m.group(1))


def test_show_with_predict_true_makes_the_output_an_exercise_asking_the_comments_questions():
    shown = gradstep.show(CODE, predict=True)
    assert shown.predict == "code"
    assert options_in_page(srcdoc_of(shown._repr_html_()))["predict"] == "code"


def test_show_with_a_spec_carries_it_stripped_into_the_page():
    shown = gradstep.show(CODE, predict="  w.grad, error ")
    assert options_in_page(shown.html())["predict"] == "w.grad, error"


def test_show_without_predict_is_no_exercise():
    shown = gradstep.show(CODE)
    assert shown.predict is None and "predict" not in options_in_page(shown.html())


@pytest.mark.parametrize(
    ("bad", "message"),
    [(1, "predict must be a string .* not int"), ("w.grad\nerror", "predict must be one line")],
)
def test_show_refuses_a_predict_that_cannot_be_a_spec_before_running(bad, message, monkeypatch):
    import gradstep.notebook as nb

    ran = []
    monkeypatch.setattr(nb, "record_dict", lambda *a, **k: ran.append(a) or {})
    with pytest.raises(ValueError, match=message):
        gradstep.show(CODE, predict=bad)
    assert ran == []


def test_the_widget_syncs_the_exercise_as_its_predict_trait():
    pytest.importorskip("anywidget")
    assert gradstep.show(CODE, predict="w.grad").widget().predict == "w.grad"
    assert gradstep.show(CODE, predict=True).widget().predict == "code"
    w = gradstep.show(CODE).widget()
    assert w.predict == ""
    assert "predict" in w.keys  # synced with the page (frontend/widget.js reads it)


def test_the_widgets_predict_trait_refuses_a_spec_of_several_lines():
    pytest.importorskip("anywidget")
    import traitlets

    w = gradstep.show(CODE).widget()
    with pytest.raises(traitlets.TraitError, match="predict must be one line"):
        w.predict = "w.grad\nerror"
    w.predict = " freed "
    assert w.predict == "freed"


def test_cell_magic_predict_alone_asks_the_comments_questions_and_with_a_value_those_too(shell):
    alone = shell.run_cell(f"%%gradstep --predict\n{CODE}")
    assert alone.success, alone.error_in_exec
    assert alone.result.predict == "code"
    spec = shell.run_cell(f"%%gradstep --predict 'w.grad, freed' --step 1\n{CODE}")
    assert spec.success, spec.error_in_exec
    assert (spec.result.predict, spec.result.step) == ("w.grad, freed", 1)


def test_module_widget_takes_the_exercise_option(tmp_path):
    pytest.importorskip("anywidget")
    from gradstep.export import export_widget
    from gradstep.notebook import module_widget

    path = tmp_path / "cube.mjs"
    path.write_text(export_widget(gradstep.trace(CODE)))
    assert module_widget(path, predict="code").predict == "code"
