"""The static export in Chromium, opened from file:// with every network request refused.

What the page shows at each step is checked against the trace it carries (the trace itself is
checked against plain PyTorch in test_export.py and test_tracer_truth.py), as test_browser.py does
for the app.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from gradstep import snippets
from gradstep.export import export_html
from gradstep.tracer import record
from testkit.browser_support import (
    EMBED_BOXES,
    GRAPH_STATE,
    assert_step_matches,
    assert_stepper_on_one_screen,
    needs_chromium,
)

pytestmark = needs_chromium

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


# Every securitypolicyviolation event of a page (and of its frames), from before its first script.
RECORD_VIOLATIONS = """
window.gsViolations = [];
document.addEventListener("securitypolicyviolation", (e) => window.gsViolations.push({
  directive: e.effectiveDirective, blocked: e.blockedURI, sample: e.sample,
}));
"""


class FilePage:
    """A page opened from a file: any request but the file itself is aborted and recorded."""

    def __init__(self, browser, path: Path, also: tuple[Path, ...] = (), **context):
        self.ctx = browser.new_context(**{"viewport": {"width": 1280, "height": 900}, **context})
        self.url = path.resolve().as_uri()
        self.allowed = {self.url, *(p.resolve().as_uri() for p in also)}
        self.refused: list[str] = []
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.ctx.route("**/*", self._route)
        self.ctx.add_init_script(RECORD_VIOLATIONS)
        self.page = self.ctx.new_page()
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def _route(self, route):
        if route.request.url in self.allowed:
            route.continue_()
        else:
            self.refused.append(route.request.url)
            route.abort()

    def _console(self, m):
        if m.type == "error":
            self.errors.append(m.text)
        elif m.type == "warning":
            self.warnings.append(m.text)

    def open(self) -> None:
        self.page.goto(self.url)
        self.page.wait_for_function(
            "document.body.dataset.ready === 'true' || document.querySelector('.gs-export-failed')",
            timeout=30_000,
        )
        failed = self.page.locator(".gs-export-failed")
        assert failed.count() == 0, failed.first.inner_text()

    def press(self, key: str) -> None:
        self.page.focus("#gradstep")
        self.page.keyboard.press(key)

    def graph_state(self) -> dict:
        return self.page.evaluate(GRAPH_STATE)

    def violations(self) -> list[dict]:
        """What the page's Content-Security-Policy refused, as the page saw it."""
        return self.page.evaluate("window.gsViolations")

    def network(self) -> list[str]:
        """Requests that would have left the page: everything but the file and its own Blob/data URLs
        (the layout worker's script, the widget's stylesheet)."""
        return self.refused + [
            u for u in self.requests if u not in self.allowed and not u.startswith(("blob:", "data:"))
        ]

    def close(self) -> None:
        self.ctx.close()


def luminance(css_color: str) -> float:
    """0 (black) to 1 (white), from a computed `rgb(r, g, b)`."""
    r, g, b = (float(v) for v in css_color[css_color.index("(") + 1 : css_color.index(")")].split(",")[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def export(tmp_path: Path, code: str, name: str = "page.html", **options) -> tuple[Path, dict]:
    data = record(code)
    path = tmp_path / name
    path.write_text(export_html(data, **options), encoding="utf-8")
    return path, data


def export_with_fixes(tmp_path: Path, code: str, name: str = "page.html") -> tuple[Path, dict, dict]:
    """What gradstep export, Sphinx and notebooks write: the diagnoses, and the run of each fix."""
    from gradstep.notebook import record_dict

    fixes: dict[str, dict] = {}
    data = record_dict(code, fix_runs=fixes)
    path = tmp_path / name
    path.write_text(export_html(data, fixes=fixes), encoding="utf-8")
    return path, data, fixes


SCREENS = [(700, 900), (390, 844)]  # a course page's content column; a phone


@pytest.fixture
def opened(browser):
    pages: list[FilePage] = []

    def open_(path: Path, also: tuple[Path, ...] = (), **context) -> FilePage:
        p = FilePage(browser, path, also, **context)
        pages.append(p)
        p.open()
        return p

    yield open_
    for p in pages:
        p.close()


def test_exported_page_replays_every_step_from_file_with_no_network_request(tmp_path, opened):
    path, trace = export(tmp_path, snippets.load_all()["shared_trunk_partial_grads"].code)
    page = opened(path)
    assert_step_matches(page.graph_state(), trace, 0)
    for i in range(1, len(trace["steps"])):
        page.press("ArrowRight")
        assert_step_matches(page.graph_state(), trace, i)
    page.press("Home")
    assert page.graph_state()["step"] == 0
    assert page.network() == []
    assert page.errors == []


def test_exported_page_opens_at_the_requested_step(tmp_path, opened):
    path, trace = export(tmp_path, snippets.load_all()["retain_graph_accumulates"].code, step=2)
    page = opened(path)
    assert_step_matches(page.graph_state(), trace, 2)
    assert page.errors == []


def test_exported_page_clamps_a_step_past_the_end_to_the_last(tmp_path, opened):
    path, trace = export(tmp_path, snippets.load_all()["backward_twice_fails"].code, step=1000)
    page = opened(path)
    assert_step_matches(page.graph_state(), trace, len(trace["steps"]) - 1)


def test_exported_page_shows_the_snippets_error_at_its_line(tmp_path, opened):
    path, trace = export(tmp_path, snippets.load_all()["backward_twice_fails"].code, step=1000)
    page = opened(path)
    err = page.page.locator(".gs-inline-error").first
    assert err.get_attribute("data-error-line") == str(trace["error"]["line"])
    assert "backward through the graph a second time" in err.inner_text()


def test_exported_page_in_dark_theme_is_dark_even_when_the_system_is_light(tmp_path, opened):
    path, _ = export(tmp_path, snippets.load_all()["backward_twice_fails"].code, theme="dark")
    page = opened(path, color_scheme="light")
    ink = page.page.evaluate("getComputedStyle(document.querySelector('#gradstep')).color")
    bg = page.page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert page.page.locator("#gradstep").get_attribute("data-theme") == "dark"
    assert luminance(bg) < 0.2 < 0.7 < luminance(ink), f"text {ink} on {bg} is not the dark theme"


def test_exported_big_model_expands_every_node_from_file(tmp_path, opened):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from tracer_overhead import SNIPPET
    finally:
        sys.path.remove(str(BENCHMARKS))
    path, trace = export(tmp_path, SNIPPET, step=1000)
    page = opened(path)
    workers: list[str] = []
    page.page.on("worker", lambda w: workers.append(w.url))
    page.page.click(".gs-expand-all")
    n = len(trace["nodes"])
    page.page.wait_for_function(f"document.querySelectorAll('[data-node-id]').length >= {n}", timeout=60_000)
    assert page.page.locator("[data-node-id]").count() == n
    assert workers  # laid out in the worker, which the page's policy lets it start
    assert page.network() == []
    assert page.errors == [] and page.warnings == []
    assert page.violations() == []


MYST_HOST = """async ([esm, body]) => {
  // what a MyST page does with ```{anywidget} ./file.mjs``` and a JSON body: a model of that body
  const mod = await import(URL.createObjectURL(new Blob([esm], { type: "text/javascript" })));
  const state = { ...body };
  window.model = { get: (k) => state[k], set: (k, v) => { state[k] = v; }, on() {}, off() {} };
  const el = document.createElement("div");
  document.body.append(el);
  await mod.default.render({ model: window.model, el });
  const s = el.querySelector(".gradstep-widget-host").shadowRoot.querySelector(".gs-stepper");
  return [Number(s.dataset.step), Number(s.dataset.steps)];
}"""


def test_widget_export_shows_its_own_trace_at_the_step_a_myst_body_sets(opened, tmp_path):
    from gradstep.export import export_widget

    trace = record(snippets.load_all()["retain_graph_accumulates"].code)
    esm = export_widget(trace, step=0)
    host = tmp_path / "host.html"
    host.write_text('<!doctype html><body data-ready="true"></body>')
    page = opened(host)
    assert page.page.evaluate(MYST_HOST, [esm, {"step": 2}]) == [2, len(trace["steps"])]
    assert page.network() == []
    assert page.errors == []


@pytest.fixture
def http_folder(tmp_path):
    """tmp_path served over http on a free loopback port (a static host)."""
    import functools
    import http.server
    import threading

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


NODE_PLACES = """() => Object.fromEntries([...document.querySelectorAll('[data-node-id]')]
  .map((el) => [el.dataset.nodeId, el.getAttribute('transform')]))"""


def test_big_model_lays_out_in_the_worker_the_same_from_file_as_from_a_static_host(browser, http_folder):
    """The layout worker starts from file:// (a classic worker from a Blob URL) as from a static
    host, and every node lands in the same place either way."""
    folder, base = http_folder
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from tracer_overhead import SNIPPET
    finally:
        sys.path.remove(str(BENCHMARKS))
    path, trace = export(folder, SNIPPET)
    places = {}
    for label, url in (("file", path.as_uri()), ("http", f"{base}/{path.name}")):
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        page = ctx.new_page()
        workers: list[str] = []
        warnings: list[str] = []
        page.on("worker", lambda w, workers=workers: workers.append(w.url))
        page.on("console", lambda m, warnings=warnings: m.type == "warning" and warnings.append(m.text))
        try:
            page.goto(url)
            page.wait_for_function("document.body.dataset.ready === 'true'", timeout=30_000)
            page.click(".gs-expand-all")
            n = len(trace["nodes"])
            page.wait_for_function(
                f"document.querySelectorAll('[data-node-id]').length >= {n}"
                " && !document.querySelector('.gs-laying-out')",
                timeout=60_000,
            )
            places[label] = page.evaluate(NODE_PLACES)
            assert workers, f"{label}: no layout worker started"
            assert not any("layout worker failed" in w for w in warnings), f"{label}: {warnings}"
        finally:
            ctx.close()
    assert len(places["file"]) == len(trace["nodes"])
    assert places["file"] == places["http"]


HOST_FRAME = """<!doctype html><body data-ready="true"><script>
window.got = [];
addEventListener("message", (ev) => window.got.push(ev.data));
</script><iframe id="f" src="%s" style="width: 900px; height: 300px; border: 0"></iframe></body>"""


def test_exported_page_in_a_frame_reports_ready_steps_and_its_height_and_follows_goto(tmp_path, opened):
    path, trace = export(tmp_path, snippets.load_all()["retain_graph_accumulates"].code)
    host = tmp_path / "host.html"
    host.write_text(HOST_FRAME % path.name)
    page = opened(host, also=(path,))
    p = page.page
    p.wait_for_function("window.got.some((m) => m.type === 'gradstep:ready')", timeout=30_000)
    ready = p.evaluate("window.got.find((m) => m.type === 'gradstep:ready')")
    assert ready == {"type": "gradstep:ready", "steps": len(trace["steps"]), "step": 0}
    frame = p.frame_locator("#f")
    height = frame.locator("html").evaluate("(el) => el.scrollHeight")
    p.wait_for_function(f"window.got.some((m) => m.context === 'iframe.resize' && m.height === {height})")
    assert p.evaluate(f"window.got.some((m) => m.subject === 'lti.frameResize' && m.height === {height})")
    last = len(trace["steps"]) - 1
    p.evaluate(
        f"document.getElementById('f').contentWindow.postMessage({{type: 'gradstep:goto', step: {last}}}, '*')"
    )
    frame.locator(f".gs-stepper[data-step='{last}']").wait_for(timeout=10_000)
    p.wait_for_function(f"window.got.some((m) => m.type === 'gradstep:step' && m.step === {last})")
    step = p.evaluate(f"window.got.find((m) => m.type === 'gradstep:step' && m.step === {last})")
    assert step == {"type": "gradstep:step", "step": last, "steps": len(trace["steps"])}
    assert page.network() == []
    assert page.errors == []


URL_HOST = """async ([esm, body]) => {
  const mod = await import(URL.createObjectURL(new Blob([esm], { type: "text/javascript" })));
  const state = { ...body };
  const model = { get: (k) => state[k], set() {}, on() {}, off() {} };
  const el = document.createElement("div");
  document.body.append(el);
  await mod.default.render({ model, el });
  const root = el.querySelector(".gradstep-widget-host").shadowRoot;
  const s = root.querySelector(".gs-stepper");
  const alert = root.querySelector("[role=alert]");
  return s ? [Number(s.dataset.step), Number(s.dataset.steps)] : alert.textContent;
}"""


def test_widget_module_fetches_a_trace_url_next_to_the_page(browser, http_folder):
    from gradstep.export import export_json
    from gradstep.notebook import widget_esm

    folder, base = http_folder
    trace = record(snippets.load_all()["retain_graph_accumulates"].code)
    (folder / "cube.json").write_bytes(export_json(trace))
    (folder / "page.html").write_text("<!doctype html><title>book</title>")
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        page.goto(f"{base}/page.html")
        got = page.evaluate(URL_HOST, [widget_esm(), {"trace_url": "cube.json", "step": 1}])
        assert got == [1, len(trace["steps"])]
        missing = page.evaluate(URL_HOST, [widget_esm(), {"trace_url": "gone.json"}])
        assert (
            missing == "gradstep could not show this trace: could not load the trace from gone.json: HTTP 404"
        )
    finally:
        ctx.close()


# ---------------------------------------------------------------- on a course page: the explanation, one screen


@pytest.mark.parametrize(("width", "height"), SCREENS)
def test_export_of_a_failing_snippet_shows_its_diagnosis_and_fix_under_a_stepper_on_one_screen(
    tmp_path, opened, width, height
):
    path, data, _ = export_with_fixes(tmp_path, snippets.load_all()["backward_twice_fails"].code)
    (diagnosis,) = data["diagnoses"]
    page = opened(path, viewport={"width": width, "height": height})
    boxes = page.page.evaluate(EMBED_BOXES, "#gradstep")
    assert_stepper_on_one_screen(boxes, 0, height)
    card = page.page.locator(".gs-embed-diagnoses .gs-diag")
    assert card.get_attribute("data-kind") == diagnosis["kind"]
    assert diagnosis["fixes"][0]["title"].replace("`", "") in card.inner_text()
    page.page.locator(".gs-apply-fix").scroll_into_view_if_needed()
    assert page.page.locator(".gs-apply-fix").is_visible()
    assert boxes["code"] is None and boxes["codeToggle"] is not None  # folded, a click away
    page.page.click(".gs-embed-code-summary")
    assert page.page.locator(".gs-embed-codebox .cm-editor").is_visible()
    assert page.errors == []


@pytest.mark.parametrize(("width", "height"), SCREENS)
def test_apply_fix_in_an_export_shows_the_fixed_run_beside_the_original_offline(
    tmp_path, opened, width, height
):
    path, data, fixes = export_with_fixes(tmp_path, snippets.load_all()["backward_twice_fails"].code)
    fix = data["diagnoses"][0]["fixes"][0]
    page = opened(path, viewport={"width": width, "height": height})
    page.page.click(".gs-apply-fix")
    page.page.wait_for_function("document.querySelector('.gs-embed-compare').dataset.rows", timeout=15_000)
    cols = page.page.locator(".gs-cmp-col")
    assert cols.count() == 2
    fixed_steps = len(fixes[fix["code"]]["steps"])
    assert f"of {fixed_steps}:" in cols.nth(1).locator(".gs-cmp-col-step").inner_text()
    assert page.page.locator(".gs-cmp-diff li").count() >= 1
    page.page.click(".gs-cmp-back")
    assert page.page.locator(".gs-embed-diagnoses .gs-diag").is_visible()
    assert page.network() == []
    assert page.errors == []


def test_an_export_without_its_fixes_runs_says_so_at_apply_fix(tmp_path, opened):
    from gradstep.notebook import record_dict

    data = record_dict(snippets.load_all()["backward_twice_fails"].code)
    path = tmp_path / "page.html"
    path.write_text(export_html(data), encoding="utf-8")  # no fixes shipped
    page = opened(path)
    page.page.click(".gs-apply-fix")
    expect_text = "not part of this page"
    page.page.wait_for_function(
        f"(document.querySelector('.gs-fix-unavailable') || {{}}).textContent?.includes({expect_text!r})",
        timeout=5_000,
    )
    assert page.errors == []


def test_an_export_opened_on_its_own_takes_the_keys_without_a_click(tmp_path, opened):
    path, trace = export(tmp_path, snippets.load_all()["shared_trunk_partial_grads"].code)
    page = opened(path, viewport={"width": 700, "height": 600})
    page.page.keyboard.press("End")
    assert page.graph_state()["step"] == len(trace["steps"]) - 1
    page.page.keyboard.press("Home")
    page.page.keyboard.press("ArrowRight")
    assert page.graph_state()["step"] == 1
    assert page.page.evaluate("window.scrollY") == 0  # the keys stepped; the page did not scroll


def test_pages_sharing_one_library_replay_from_file_and_apply_fixes_offline(tmp_path, opened):
    from gradstep.export import library_files
    from gradstep.notebook import record_dict

    for name, text in library_files().items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    fixes: dict[str, dict] = {}
    data = record_dict(snippets.load_all()["backward_twice_fails"].code, fix_runs=fixes)
    path = tmp_path / "lesson.html"
    path.write_text(export_html(data, fixes=fixes, library=""), encoding="utf-8")
    page = opened(
        path,
        also=(tmp_path / "gradstep.js", tmp_path / "gradstep.css"),
        viewport={"width": 700, "height": 900},
    )
    assert_step_matches(page.graph_state(), data, 0)
    assert_stepper_on_one_screen(
        page.page.evaluate(EMBED_BOXES, "#gradstep"), 0, 900
    )  # the shared stylesheet applies
    page.page.click(".gs-apply-fix")
    page.page.wait_for_function("document.querySelector('.gs-embed-compare').dataset.rows", timeout=15_000)
    assert page.network() == []
    assert page.errors == []


def test_a_page_whose_shared_library_is_missing_says_so(tmp_path, browser):
    path, _ = tmp_path / "lesson.html", None
    path.write_text(export_html(record("import torch\n"), library=""), encoding="utf-8")
    p = FilePage(browser, path)
    try:
        p.page.goto(p.url)
        p.page.wait_for_function(
            "document.querySelector('#gradstep').textContent.includes('did not load')", timeout=10_000
        )
    finally:
        p.close()


DOCS = Path(__file__).resolve().parents[2] / "docs"


def documented_export_frame() -> str:
    """The iframe and script docs/export.md gives for a page written by gradstep export."""
    text = (DOCS / "export.md").read_text(encoding="utf-8")
    start = text.index("```html\n", text.index("## One HTML file")) + len("```html\n")
    return text[start : text.index("```", start)]


@pytest.mark.parametrize(("width", "height"), SCREENS)
def test_the_documented_frame_of_an_export_shows_the_whole_stepper_in_a_course_page(
    browser, http_folder, width, height
):
    folder, base = http_folder
    snippet = documented_export_frame()
    src = re.search(r'src="([^"]+)"', snippet).group(1)
    export_with_fixes(folder, snippets.load_all()["backward_twice_fails"].code, name=src)
    (folder / "lesson.html").write_text(
        f"<!doctype html><meta charset=utf-8><link rel=icon href='data:,'><body><h1>Lesson</h1><p>Text.</p>{snippet}<p>After.</p>",
        encoding="utf-8",
    )
    ctx = browser.new_context(viewport={"width": width, "height": height})
    try:
        page = ctx.new_page()
        page.goto(f"{base}/lesson.html")
        page.frame_locator("iframe").locator("body[data-ready=true]").wait_for(timeout=30_000)
        frame = page.frames[1]
        # the frame grows to the stepper: nothing is cut or scrolls inside it
        deadline = time.monotonic() + 10
        while True:
            inner = frame.evaluate(
                "Math.ceil(document.querySelector('#gradstep').getBoundingClientRect().bottom)"
            )
            outer = page.evaluate("document.querySelector('iframe').getBoundingClientRect().height")
            if outer >= inner:
                break
            assert time.monotonic() < deadline, f"the frame ({outer} px) cuts the stepper ({inner} px)"
            time.sleep(0.1)
        page.evaluate("document.querySelector('iframe').scrollIntoView()")
        top = page.evaluate("document.querySelector('iframe').getBoundingClientRect().top")
        assert_stepper_on_one_screen(frame.evaluate(EMBED_BOXES, "#gradstep"), -top, height)
        assert frame.locator(".gs-embed-diagnoses .gs-apply-fix").is_visible()
    finally:
        ctx.close()


def test_keep_the_fix_in_an_export_shows_the_fixed_run_and_its_code(tmp_path, opened):
    path, data, fixes = export_with_fixes(tmp_path, snippets.load_all()["backward_twice_fails"].code)
    fix = data["diagnoses"][0]["fixes"][0]
    page = opened(path)
    page.page.click(".gs-apply-fix")
    page.page.wait_for_function("document.querySelector('.gs-embed-compare').dataset.rows", timeout=15_000)
    page.page.click(".gs-cmp-keep")
    page.page.wait_for_function(
        "!document.querySelector('#gradstep').classList.contains('gs-embed-comparing')"
    )
    assert page.graph_state()["steps"] == len(fixes[fix["code"]]["steps"])
    assert page.page.evaluate("window.gradstepViewer.editor.getCode()") == fix["code"]
    assert page.page.locator(".gs-embed-diagnoses").is_hidden()  # the fixed run has no mistake to show
    assert page.errors == []


def test_widget_export_applies_a_fix_in_its_shadow_root_offline(opened, tmp_path):
    from gradstep.export import export_widget
    from gradstep.notebook import record_dict

    fixes: dict[str, dict] = {}
    trace = record_dict(snippets.load_all()["backward_twice_fails"].code, fix_runs=fixes)
    esm = export_widget(trace, fixes=fixes)
    host = tmp_path / "host.html"
    host.write_text('<!doctype html><body data-ready="true"></body>')
    page = opened(host)
    page.page.evaluate(MYST_HOST, [esm, {}])
    shadow = "document.querySelector('.gradstep-widget-host').shadowRoot"
    page.page.evaluate(f"{shadow}.querySelector('.gs-apply-fix').click()")
    page.page.wait_for_function(f"{shadow}.querySelector('.gs-embed-compare').dataset.rows", timeout=15_000)
    assert page.page.evaluate(f"{shadow}.querySelectorAll('.gs-cmp-col').length") == 2
    assert page.network() == []
    assert page.errors == []


# ---------------------------------------------------------------- the page's Content-Security-Policy


@pytest.mark.parametrize("shared", [False, True], ids=["one-file", "shared-library"])
def test_an_export_steps_through_and_applies_its_fix_from_file_with_no_policy_violation(
    tmp_path, opened, shared
):
    from gradstep.export import library_files
    from gradstep.notebook import record_dict

    fixes: dict[str, dict] = {}
    data = record_dict(snippets.load_all()["backward_twice_fails"].code, fix_runs=fixes)
    path = tmp_path / "page.html"
    path.write_text(export_html(data, fixes=fixes, library="" if shared else None), encoding="utf-8")
    for name, text in library_files().items() if shared else ():
        (tmp_path / name).write_text(text, encoding="utf-8")
    page = opened(path, also=(tmp_path / "gradstep.js", tmp_path / "gradstep.css") if shared else ())
    for i in range(len(data["steps"])):
        assert_step_matches(page.graph_state(), data, i)
        page.press("ArrowRight")
    page.page.click(".gs-apply-fix")
    page.page.wait_for_function("document.querySelector('.gs-embed-compare').dataset.rows", timeout=15_000)
    assert page.page.locator(".gs-cmp-col").count() == 2
    assert page.violations() == []
    assert page.errors == [] and page.network() == []


# Markup that found its way into a page, each piece trying to run script its own way.
INJECTED = """
<script>window.ran = [...(window.ran || []), "inline script"];</script>
<script src="data:text/javascript,window.ran=[...(window.ran||[]),'data: script'];"></script>
<script type="module">window.ran = [...(window.ran || []), "inline module"];</script>
<img src="data:," onerror="window.ran = [...(window.ran || []), 'img onerror'];">
<svg onload="window.ran = [...(window.ran || []), 'svg onload'];"></svg>
<a id="injected-link" href="javascript:window.ran=[...(window.ran||[]),'javascript: link'];void 0">x</a>
<iframe srcdoc="<script>parent.ran = [...(parent.ran || []), 'srcdoc script'];</script>"></iframe>
<object data="data:text/html,<script>parent.ran=['object'];</script>"></object>
<base href="https://attacker.invalid/">
"""

BLOB_SCRIPT = """() => new Promise((resolve) => {
  // a Blob URL of script, put in a <script> element: what `blob:` in script-src would let run
  const s = document.createElement("script");
  s.src = URL.createObjectURL(new Blob(["window.ran = [...(window.ran || []), 'blob: script'];"]));
  s.onload = s.onerror = resolve;
  document.body.append(s);
})"""


def test_markup_injected_into_an_export_runs_no_script_and_the_page_still_works(tmp_path, browser):
    path, trace = export(tmp_path, snippets.load_all()["shared_trunk_partial_grads"].code)
    page_html = path.read_text(encoding="utf-8")
    path.write_text(page_html.replace("<body>\n", "<body>\n" + INJECTED, 1), encoding="utf-8")
    page = FilePage(browser, path)
    try:
        page.open()
        page.page.click("#injected-link")
        page.page.evaluate(BLOB_SCRIPT)
        page.page.wait_for_timeout(300)  # any handler or frame that could run has had its turn
        assert page.page.evaluate("window.ran") is None
        refused = {v["directive"] for v in page.violations()}
        # refused by the policy, not failing for another reason
        assert {"script-src-elem", "script-src-attr", "base-uri", "object-src"} <= refused
        assert page.page.evaluate("document.baseURI") == page.url
        assert_step_matches(page.graph_state(), trace, 0)  # the page's own module runs
        page.press("End")
        assert_step_matches(page.graph_state(), trace, len(trace["steps"]) - 1)
    finally:
        page.close()
