"""/embed in a real cross-origin <iframe> (Chromium): what a course page gets.

The course page is served from another origin (another port) than gradstep, so framing headers and
postMessage origins are exercised as on a real site. What the frame shows is checked against the
trace the API returns for the same code (the tracer is checked against PyTorch elsewhere).
"""

from __future__ import annotations

import functools
import http.server
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

import httpx
import pytest
from gradstep import snippets
from gradstep.columns import rows_of
from gradstep.permalink import MAX_ENCODED, encode_code
from playwright.sync_api import expect
from testkit.browser_support import (
    EMBED_BOXES,
    Page,
    assert_step_matches,
    assert_stepper_on_one_screen,
    fmt_grad,
    needs_chromium,
    running_server,
)

pytestmark = needs_chromium

SNIPPET = "two_outputs_retain_graph"  # six steps
CODE = (
    "import torch\n"
    "w = torch.tensor([1.0, 2.0], requires_grad=True)\n"
    "y = (w * w).sum()\n"
    "z = (w * 3).sum()\n"
    "y.backward(retain_graph=True)\n"
    "y.backward()\n"
    "z.backward()\n"
)
MESSAGE_LOG = """
<script>
  window.got = [];
  addEventListener("message", (ev) => {
    const f = document.getElementById("f");
    if (f && ev.source === f.contentWindow) window.got.push({ origin: ev.origin, data: ev.data });
  });
</script>
"""


class Site:
    """A static site on its own origin (127.0.0.1, another port): the course page around the frame."""

    def __init__(self, root):
        self.root = root
        handler = functools.partial(QuietHandler, directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def page(self, name: str, body: str) -> str:
        (self.root / name).write_text(
            f'<!doctype html><meta charset=utf-8><link rel=icon href="data:,"><body>{body}</body>',
            encoding="utf-8",
        )
        return f"{self.base}/{name}"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    s = Site(tmp_path_factory.mktemp("course"))
    yield s
    s.httpd.shutdown()


@pytest.fixture
def tab(browser, server):
    p = Page(browser, server, reduced_motion="reduce", viewport={"width": 1100, "height": 900})
    yield p
    p.close()


def trace_of(server: str, code: str) -> dict:
    r = httpx.post(f"{server}/api/trace", json={"code": code}, timeout=60)
    r.raise_for_status()
    return rows_of(r.json())


def snippet_code(name: str) -> str:
    return snippets.load_all()[name].code


def frame_page(
    tab, site, server, src: str, extra: str = "", name: str = "host.html", height: int = 700, run: bool = True
):
    """Open a page of `site` that frames `src` (a path of the gradstep server); returns the frame.
    ``run``: when the frame asks (a link's code, framed by another origin, not yet cached), the
    reader presses Run."""
    url = site.page(
        name,
        f'{MESSAGE_LOG}<iframe id="f" src="{server}{src}" width="1000" height="{height}"></iframe>{extra}',
    )
    tab.page.goto(url)
    frame = tab.page.frame_locator("#f")
    frame.locator("body[data-state]").wait_for(state="attached", timeout=60_000)
    if run and tab.page.frames[1].evaluate("document.body.dataset.state") == "consent":
        frame.locator("#gs-frame-run").click()
        frame.locator("body[data-state=ready], body[data-state=error]").wait_for(
            state="attached", timeout=60_000
        )
    return tab.page.frames[1]


def graph_state(frame) -> dict:
    return Page.graph_state(SimpleNamespace(page=frame))


def messages(tab, kind: str) -> list[dict]:
    return [
        m["data"]
        for m in tab.page.evaluate("window.got")
        if isinstance(m["data"], dict) and m["data"].get(kind)
    ]


def wait_message(tab, js_condition: str) -> None:
    tab.page.wait_for_function(f"window.got.some((m) => {js_condition})", timeout=30_000)


# ---------------------------------------------------------------- what the frame shows


def test_snippet_embed_starts_at_the_requested_step_and_matches_its_trace(tab, site, server):
    trace = trace_of(server, snippet_code(SNIPPET))
    frame = frame_page(tab, site, server, f"/embed?snippet={SNIPPET}&step=2")
    assert frame.evaluate("document.body.dataset.state") == "ready"
    assert_step_matches(graph_state(frame), trace, 2)
    assert tab.errors == []


def test_step_past_the_end_is_clamped_to_the_last_step(tab, site, server):
    trace = trace_of(server, snippet_code(SNIPPET))
    frame = frame_page(tab, site, server, f"/embed?snippet={SNIPPET}&step=999")
    assert_step_matches(graph_state(frame), trace, len(trace["steps"]) - 1)


def test_code_in_the_fragment_is_run_and_shown_at_its_step(tab, site, server):
    trace = trace_of(server, CODE)
    frame = frame_page(tab, site, server, f"/embed#code={encode_code(CODE)}&step=1")
    assert_step_matches(graph_state(frame), trace, 1)
    assert frame.locator(".cm-content").inner_text().strip() == CODE.strip()


def test_fragment_step_overrides_the_query_step(tab, site, server):
    trace = trace_of(server, CODE)
    frame = frame_page(tab, site, server, f"/embed?step=0#code={encode_code(CODE)}&step=3")
    assert_step_matches(graph_state(frame), trace, 3)


def trace_requests(tab) -> list[dict]:
    """The page's POST /api/trace requests from now on, each as its headers."""
    seen: list[dict] = []
    tab.page.on("request", lambda r: seen.append(r.headers) if r.url.endswith("/api/trace") else None)
    return seen


def test_a_links_code_framed_by_another_origin_runs_only_when_the_reader_presses_run(tab, site, server):
    code = CODE + f"# framed by another origin {time.time_ns()}\n"  # never run before
    sent = trace_requests(tab)
    frame = frame_page(tab, site, server, f"/embed#code={encode_code(code)}", run=False)
    assert frame.evaluate("document.body.dataset.state") == "consent"
    assert code.strip() in frame.locator(".gs-frame-consent-code").inner_text()  # what would run
    # it only asked for a cached trace: nothing was run
    assert [h.get("x-gradstep-cached-only") for h in sent] == ["1"]
    frame.locator("#gs-frame-run").click()
    frame.locator("body[data-state=ready]").wait_for(state="attached", timeout=60_000)
    assert [h.get("x-gradstep-cached-only") for h in sent] == ["1", None]
    assert_step_matches(graph_state(frame), trace_of(server, code), 0)
    assert frame.locator(".gs-frame-consent-code").count() == 0


def test_a_links_code_whose_trace_is_cached_is_shown_at_once(tab, site, server):
    code = CODE + f"# cached already {time.time_ns()}\n"
    trace = trace_of(server, code)
    sent = trace_requests(tab)
    frame = frame_page(tab, site, server, f"/embed#code={encode_code(code)}&step=2", run=False)
    assert frame.evaluate("document.body.dataset.state") == "ready"
    assert [h.get("x-gradstep-cached-only") for h in sent] == ["1"]
    assert_step_matches(graph_state(frame), trace, 2)


def test_a_curated_snippet_framed_by_another_origin_runs_at_once(tab, site, server):
    frame = frame_page(tab, site, server, f"/embed?snippet={SNIPPET}", run=False)
    assert frame.evaluate("document.body.dataset.state") == "ready"


def test_code_in_the_fragment_never_reaches_the_server(tab, site, server):
    seen: list[str] = []
    tab.page.on("request", lambda r: seen.append(r.url))
    frame_page(tab, site, server, f"/embed#code={encode_code(CODE)}")
    embed_requests = [u for u in seen if "/embed" in u]
    assert embed_requests and all("code=" not in u for u in embed_requests)


@pytest.mark.parametrize(
    ("src", "message"),
    [
        ("/embed#code=AAAAnotdeflate", "corrupt"),
        ("/embed#code=%%%", "base64url"),
        ("/embed?snippet=no_such_snippet", "no example snippet named “no_such_snippet”"),
        (f"/embed?snippet={SNIPPET}&theme=purple", "Unknown theme “purple”"),
        (f"/embed?snippet={SNIPPET}&editor=vim", "Unknown editor mode “vim”"),
        (f"/embed?snippet={SNIPPET}&step=two", "not a whole number"),
        ("/embed#code=" + "A" * (MAX_ENCODED + 1), "too long"),
        ("/embed", "names no snippet"),
    ],
    ids=[
        "corrupt-code",
        "not-base64",
        "unknown-snippet",
        "unknown-theme",
        "unknown-editor",
        "bad-step",
        "oversized",
        "nothing",
    ],
)
def test_bad_parameters_get_a_clear_message_in_the_frame(tab, site, server, src, message):
    frame = frame_page(tab, site, server, src)
    status = frame.locator("#gs-frame-status")
    assert frame.evaluate("document.body.dataset.state") == "error"
    assert message in status.inner_text()
    assert status.is_visible() and status.bounding_box()["height"] > 10
    wait_message(tab, "m.data.type === 'gradstep:error'")
    assert message in messages(tab, "type")[-1]["message"]


def test_code_over_the_api_limit_gets_a_clear_message(tab, site, server):
    frame = frame_page(tab, site, server, f"/embed#code={encode_code('#' * (64 * 1024 + 1))}")
    assert "larger than 64 KB" in frame.locator("#gs-frame-status").inner_text()


def test_hidden_editor_folds_the_code_and_a_viewer_can_still_read_it(tab, site, server):
    frame = frame_page(tab, site, server, f"/embed?snippet={SNIPPET}&editor=hidden")
    assert frame.locator(".cm-editor").is_hidden()  # the graph has the room...
    assert frame.locator("[data-node-id]").count() > 0
    frame.get_by_text("The code behind this").click()  # ...and whoever sees the run can read its code
    shown = frame.locator(".cm-content").inner_text()
    assert shown.split() == (snippets.snippets_dir() / f"{SNIPPET}.py").read_text().split()
    assert frame.locator(".cm-content").get_attribute("contenteditable") == "false"


def test_a_run_whose_code_reaches_past_torch_says_at_every_step_that_it_is_the_codes_word(tab, site, server):
    code = CODE + "import os\nprint(os.getpid())\n"
    frame = frame_page(tab, site, server, f"/embed#code={encode_code(code)}")
    for _ in range(3):
        note = frame.locator(".gs-banner .gs-note-reported")
        expect(note).to_contain_text("Reported by the code.")
        expect(note).to_contain_text("line 9: os.getpid")
        frame.get_by_role("button", name="Next step (→)").click()


def test_readonly_editor_cannot_be_edited(tab, site, server):
    frame = frame_page(tab, site, server, f"/embed?snippet={SNIPPET}")
    assert frame.locator(".cm-content").get_attribute("contenteditable") == "false"
    assert frame.locator("#gs-frame-run").is_hidden()


def test_editable_embed_runs_the_edited_code_in_the_frame(tab, site, server):
    frame = frame_page(tab, site, server, f"/embed?snippet={SNIPPET}&editor=editable")
    trace = trace_of(server, CODE)
    frame.click(".cm-content")
    tab.page.keyboard.press("Control+A")
    tab.page.keyboard.press("Delete")
    tab.page.keyboard.insert_text(CODE)
    with tab.page.expect_response(lambda r: r.url.endswith("/api/trace")):
        frame.click("#gs-frame-run")
    frame.wait_for_function(
        f"document.querySelector('.gs-stepper').dataset.steps === '{len(trace['steps'])}'"
    )
    frame.focus(".gs-embed")
    tab.page.keyboard.press("End")
    assert_step_matches(graph_state(frame), trace, len(trace["steps"]) - 1)


def test_dark_theme_is_applied_to_the_frame(tab, site, server):
    bg = "getComputedStyle(document.body).backgroundColor"
    dark = frame_page(tab, site, server, f"/embed?snippet={SNIPPET}&theme=dark")
    assert dark.evaluate("document.documentElement.dataset.theme") == "dark"
    dark_bg = dark.evaluate(bg)
    light = frame_page(tab, site, server, f"/embed?snippet={SNIPPET}&theme=light", name="light.html")
    assert light.evaluate(bg) != dark_bg


def test_autoplay_advances_without_interaction(tab, site, server):
    frame = frame_page(tab, site, server, f"/embed?snippet={SNIPPET}&autoplay=1")
    frame.wait_for_function("Number(document.querySelector('.gs-stepper').dataset.step) >= 2", timeout=30_000)


def test_keys_pressed_outside_the_stepper_do_not_step_the_frame(tab, site, server):
    frame = frame_page(tab, site, server, f"/embed?snippet={SNIPPET}&step=1", extra='<input id="outside">')
    frame.evaluate("document.activeElement && document.activeElement.blur()")
    frame.evaluate(
        "document.body.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowRight', bubbles: true}))"
    )
    tab.page.focus("#outside")
    tab.page.keyboard.press("ArrowRight")
    assert graph_state(frame)["step"] == 1
    frame.focus(".gs-embed")
    tab.page.keyboard.press("ArrowRight")
    assert graph_state(frame)["step"] == 2


def test_the_embed_opened_on_its_own_takes_the_keys_without_a_click(tab, server):
    tab.page.set_viewport_size({"width": 700, "height": 600})
    tab.page.goto(f"{server}/embed?snippet={SNIPPET}")
    tab.page.locator("body[data-state='ready']").wait_for(state="attached", timeout=60_000)
    steps = int(tab.page.evaluate("document.querySelector('.gs-stepper').dataset.steps"))
    tab.page.keyboard.press("End")  # nothing clicked or focused: the page's body has the key
    assert graph_state(tab.page)["step"] == steps - 1
    tab.page.keyboard.press("Home")
    tab.page.keyboard.press("ArrowRight")
    assert graph_state(tab.page)["step"] == 1
    assert tab.page.evaluate("window.scrollY") == 0  # the keys stepped; the page did not scroll


def test_open_in_gradstep_links_to_the_app_at_the_current_step(tab, site, server):
    frame = frame_page(tab, site, server, f"/embed?snippet={SNIPPET}&step=2")
    href = frame.locator("#gs-frame-open").get_attribute("href")
    assert href.startswith(f"{server}/#code=") and href.endswith("&step=2")


# ---------------------------------------------------------------- messages


def test_frame_says_ready_with_its_step_count(tab, site, server):
    trace = trace_of(server, snippet_code(SNIPPET))
    frame_page(tab, site, server, f"/embed?snippet={SNIPPET}&step=1")
    wait_message(tab, "m.data.type === 'gradstep:ready'")
    (ready,) = [m for m in messages(tab, "type") if m["type"] == "gradstep:ready"]
    assert (ready["steps"], ready["step"]) == (len(trace["steps"]), 1)


def test_frame_reports_its_height_in_the_embedly_and_canvas_shapes(tab, site, server):
    frame = frame_page(tab, site, server, f"/embed?snippet={SNIPPET}")
    wait_message(tab, "m.data.context === 'iframe.resize'")
    wait_message(tab, "m.data.subject === 'lti.frameResize'")
    height = frame.evaluate("Math.ceil(document.documentElement.getBoundingClientRect().height)")
    assert messages(tab, "context")[-1]["height"] == height
    assert messages(tab, "subject")[-1]["height"] == height
    assert height > 300


def test_parent_that_sizes_the_frame_to_its_height_gets_a_stable_height(tab, site, server):
    resize = """<script>
      addEventListener("message", (ev) => {
        if (ev.data && ev.data.context === "iframe.resize") document.getElementById("f").height = ev.data.height;
      });
    </script>"""
    frame = frame_page(tab, site, server, f"/embed?snippet={SNIPPET}", extra=resize, height=150)
    tab.page.wait_for_timeout(1500)
    heights = [m["height"] for m in messages(tab, "context")]
    frame_height = tab.page.evaluate("document.getElementById('f').clientHeight")
    assert heights and frame_height == heights[-1]
    assert frame.evaluate("document.documentElement.scrollHeight <= innerHeight + 1")
    assert len(heights) < 10  # no feedback loop of ever-growing heights


def test_parent_moves_the_frame_with_goto_and_hears_the_step(tab, site, server):
    trace = trace_of(server, snippet_code(SNIPPET))
    frame = frame_page(tab, site, server, f"/embed?snippet={SNIPPET}")
    tab.page.evaluate(
        "document.getElementById('f').contentWindow.postMessage({type: 'gradstep:goto', step: 3}, '*')"
    )
    wait_message(tab, "m.data.type === 'gradstep:step' && m.data.step === 3")
    assert_step_matches(graph_state(frame), trace, 3)


def test_panel_just_below_a_short_frame_is_current_before_it_scrolls_in(tab, site, server):
    # Panels off screen are updated when they come within 400 px of it. Inside a cross-origin
    # frame that margin only holds against the frame's own viewport: the tensors panel, just
    # below a short frame, must already show the step the parent moved the frame to.
    trace = trace_of(server, snippet_code(SNIPPET))
    frame = frame_page(tab, site, server, f"/embed?snippet={SNIPPET}", height=250)
    last = len(trace["steps"]) - 1
    below = frame.evaluate("document.querySelector('.gs-tensors').getBoundingClientRect().top - innerHeight")
    assert 0 < below < 400, f"the panel should start just below the frame, {below} px"
    tab.page.evaluate(
        f"document.getElementById('f').contentWindow.postMessage({{type: 'gradstep:goto', step: {last}}}, '*')"
    )
    wait_message(tab, f"m.data.type === 'gradstep:step' && m.data.step === {last}")
    want = fmt_grad(next(t for t in trace["steps"][last]["tensors"] if t["name"] == "a")["grad"])
    assert want != fmt_grad(None)
    # (the panel is not on screen: this checks what it holds, as it will scroll in)
    expect(frame.locator('.gs-tensors [data-tensor-grad="a"]')).to_have_text(want, timeout=5_000)


def test_goto_past_the_end_is_clamped(tab, site, server):
    trace = trace_of(server, snippet_code(SNIPPET))
    frame = frame_page(tab, site, server, f"/embed?snippet={SNIPPET}")
    tab.page.evaluate(
        "document.getElementById('f').contentWindow.postMessage({type: 'gradstep:goto', step: 500}, '*')"
    )
    last = len(trace["steps"]) - 1
    wait_message(tab, f"m.data.type === 'gradstep:step' && m.data.step === {last}")
    assert graph_state(frame)["step"] == last


def test_parent_plays_and_pauses_the_frame(tab, site, server):
    frame = frame_page(tab, site, server, f"/embed?snippet={SNIPPET}")
    post = "(t) => document.getElementById('f').contentWindow.postMessage({type: t}, '*')"
    tab.page.evaluate(post, "gradstep:play")
    wait_message(tab, "m.data.type === 'gradstep:step' && m.data.step >= 1")
    tab.page.evaluate(post, "gradstep:pause")
    tab.page.wait_for_timeout(300)  # the message is delivered asynchronously
    paused_at = graph_state(frame)["step"]
    tab.page.wait_for_timeout(3000)  # longer than a step of play
    assert graph_state(frame)["step"] == paused_at


def test_message_from_a_window_other_than_the_parent_is_ignored(tab, site, server):
    # A sibling frame (another window, another origin) gets hold of the gradstep frame and posts to it.
    sibling = site.page(
        "sibling.html",
        "<script>window.addEventListener('message', (ev) => {"
        " if (ev.data === 'go') parent.frames[0].postMessage({type: 'gradstep:goto', step: 3}, '*'); });</script>",
    )
    sibling_frame = f'<iframe id="s" src="{sibling.replace("127.0.0.1", "localhost")}"></iframe>'
    frame = frame_page(tab, site, server, f"/embed?snippet={SNIPPET}", extra=sibling_frame)
    tab.page.frame_locator("#s").locator("body").wait_for(state="attached")
    tab.page.evaluate("document.getElementById('s').contentWindow.postMessage('go', '*')")
    tab.page.wait_for_timeout(800)
    assert graph_state(frame)["step"] == 0
    # the same message from the parent is obeyed
    tab.page.evaluate(
        "document.getElementById('f').contentWindow.postMessage({type: 'gradstep:goto', step: 3}, '*')"
    )
    wait_message(tab, "m.data.type === 'gradstep:step' && m.data.step === 3")


def test_message_that_is_not_namespaced_is_ignored(tab, site, server):
    frame = frame_page(tab, site, server, f"/embed?snippet={SNIPPET}")
    tab.page.evaluate("document.getElementById('f').contentWindow.postMessage({type: 'goto', step: 3}, '*')")
    tab.page.wait_for_timeout(500)
    assert graph_state(frame)["step"] == 0


# ---------------------------------------------------------------- framing headers


def frame_loaded(tab, site, server, path: str, name: str) -> bool:
    """Whether a page of `site` (another origin) could frame `path`: Chromium blocks it otherwise."""
    url = site.page(name, f'<iframe id="f" src="{server}{path}"></iframe>')
    tab.page.goto(url)
    tab.page.wait_for_timeout(300)
    tab.page.wait_for_load_state("load")
    child = tab.page.frames[1]
    try:
        return child.evaluate("location.pathname") == path.split("?")[0] and child.url.startswith(server)
    except Exception:
        return False


def test_app_page_cannot_be_framed_by_another_origin(tab, site, server):
    assert not frame_loaded(tab, site, server, "/", "app.html")


def test_embed_can_be_framed_by_another_origin(tab, site, server):
    assert frame_loaded(tab, site, server, f"/embed?snippet={SNIPPET}", "embed.html")


@pytest.fixture(scope="module")
def restricted(site):
    """A server whose /embed only `site` may frame (GRADSTEP_FRAME_ANCESTORS)."""
    with running_server(GRADSTEP_WORKERS="1", GRADSTEP_FRAME_ANCESTORS=site.base) as base:
        yield base


@pytest.fixture
def restricted_tab(browser, restricted):
    p = Page(browser, restricted, reduced_motion="reduce")
    yield p
    p.close()


def test_a_page_of_an_origin_allowed_to_run_code_has_a_links_code_run_at_once(browser, site):
    with running_server(GRADSTEP_WORKERS="1", GRADSTEP_EMBED_RUN_ORIGINS=site.base) as base:
        tab = Page(browser, base, reduced_motion="reduce", viewport={"width": 1100, "height": 900})
        try:
            code = CODE + f"# an allowed course page {time.time_ns()}\n"
            frame = frame_page(
                tab, site, base, f"/embed#code={encode_code(code)}", run=False, name="allowed-run.html"
            )
            assert frame.evaluate("document.body.dataset.state") == "ready"
        finally:
            tab.close()


def test_restricted_frame_ancestors_allow_the_named_origin(restricted_tab, site, restricted):
    assert frame_loaded(restricted_tab, site, restricted, f"/embed?snippet={SNIPPET}", "allowed.html")


def test_restricted_frame_ancestors_refuse_other_origins(restricted_tab, site, restricted):
    other = Site(site.root)  # the same page from another origin (another port)
    try:
        assert not frame_loaded(restricted_tab, other, restricted, f"/embed?snippet={SNIPPET}", "denied.html")
    finally:
        other.httpd.shutdown()


def test_restricted_frame_ancestors_accept_messages_from_the_allowed_parent(restricted_tab, site, restricted):
    tab = restricted_tab
    frame = frame_page(tab, site, restricted, f"/embed?snippet={SNIPPET}", name="allowed-msg.html")
    wait_message(tab, "m.data.type === 'gradstep:ready'")
    tab.page.evaluate(
        "document.getElementById('f').contentWindow.postMessage({type: 'gradstep:goto', step: 2}, '*')"
    )
    wait_message(tab, "m.data.type === 'gradstep:step' && m.data.step === 2")
    assert graph_state(frame)["step"] == 2


def test_oembed_html_embeds_a_working_frame(tab, site, server):
    body = httpx.get(f"{server}/oembed", params={"url": f"{server}/?snippet={SNIPPET}"}).json()
    url = site.page("oembed.html", MESSAGE_LOG + body["html"].replace("<iframe ", '<iframe id="f" ', 1))
    tab.page.goto(url)
    wait_message(tab, "m.data.type === 'gradstep:ready'")
    assert messages(tab, "type")[0]["steps"] == len(trace_of(server, snippet_code(SNIPPET))["steps"])


def test_app_permalink_of_the_share_button_opens_the_same_run_at_the_same_step(tab, server):
    trace = tab.open(f"?snippet={SNIPPET}")
    tab.page.focus("#gs-viewer")
    for _ in range(3):
        tab.page.keyboard.press("ArrowRight")
    tab.page.click("#gs-share")
    tab.page.wait_for_selector("#gs-share-dialog[open]")  # the link is made (compressed) before it opens
    link = tab.page.locator("#gs-share-link").input_value()
    assert link == tab.page.url and "#code=" in link and link.endswith("&step=3")
    snippet = tab.page.locator("#gs-share-embed").input_value()
    assert snippet.startswith('<iframe src="') and "/embed#code=" in snippet
    other = Page(tab.page.context.browser, server, reduced_motion="reduce")
    try:
        with other.page.expect_response(lambda r: r.url.endswith("/api/trace")) as resp:
            other.page.goto(link)
        other.wait_runs(1)
        assert resp.value.json()["code"] == trace["code"]
        other.page.wait_for_function("document.querySelector('.gs-stepper').dataset.step === '3'")
        assert_step_matches(other.graph_state(), trace, 3)
    finally:
        other.close()


def test_app_link_with_corrupt_code_says_so(tab, server):
    tab.page.goto(f"{server}/#code={quote('AAAAnotdeflate')}&step=2")
    tab.page.wait_for_function("document.body.dataset.traceStatus === 'link-error'")
    assert "cannot be opened" in tab.page.locator("#gs-run-status").inner_text()


def test_app_opens_a_link_pasted_into_its_address_bar(tab, server):
    tab.open(f"?snippet={SNIPPET}")
    trace = trace_of(server, CODE)
    n = tab.runs()
    with tab.page.expect_response(lambda r: r.url.endswith("/api/trace")):
        tab.page.evaluate("(h) => { location.hash = h; }", f"code={encode_code(CODE)}&step=2")
    tab.wait_runs(n + 1)
    tab.page.wait_for_function("document.querySelector('.gs-stepper').dataset.step === '2'")
    assert_step_matches(tab.graph_state(), trace, 2)


def test_frame_whose_fragment_changes_shows_the_new_code(tab, site, server):
    frame = frame_page(tab, site, server, f"/embed#code={encode_code(CODE)}&step=1")
    other = "import torch\nv = torch.ones(2, requires_grad=True)\n(v * v).sum().backward()\n"
    trace = trace_of(server, other)
    tab.page.evaluate(
        "(src) => { document.getElementById('f').src = src; }",
        f"{server}/embed#code={encode_code(other)}&step=9",
    )
    frame.wait_for_function(
        f"document.querySelector('.gs-stepper')?.dataset.steps === '{len(trace['steps'])}'"
    )
    assert_step_matches(graph_state(tab.page.frames[1]), trace, len(trace["steps"]) - 1)


def test_share_dialog_copies_the_link_and_the_iframe(browser, server):
    tab = Page(browser, server, reduced_motion="reduce", permissions=["clipboard-read", "clipboard-write"])
    try:
        tab.open(f"?snippet={SNIPPET}")
        tab.page.click("#gs-share")
        tab.page.get_by_role("button", name="Copy link").click()
        assert (
            tab.page.evaluate("navigator.clipboard.readText()")
            == tab.page.locator("#gs-share-link").input_value()
        )
        tab.page.get_by_role("button", name="Copy HTML").click()
        copied = tab.page.evaluate("navigator.clipboard.readText()")
        assert copied == tab.page.locator("#gs-share-embed").input_value() and copied.startswith("<iframe")
        tab.page.keyboard.press("Escape")
        assert not tab.page.locator("#gs-share-dialog").is_visible()
    finally:
        tab.close()


# ---------------------------------------------------------------- on a course page's column, and a phone

DOCS = Path(__file__).resolve().parents[2] / "docs"


def documented_iframe(server: str, query: str) -> str:
    """The iframe and resize script of docs/embed.md, as an instructor pastes them, framing `query`."""
    text = (DOCS / "embed.md").read_text(encoding="utf-8")
    section = text[text.index("## The `/embed` page") :]
    block = section[section.index("```html\n") + 8 : section.index("```", section.index("```html\n") + 8)]
    src = re.search(r'src="([^"]+)"', block).group(1)
    return block.replace(src, f"{server}/embed?{query}")


def course_tab(browser, server, width: int, height: int):
    return Page(browser, server, reduced_motion="reduce", viewport={"width": width, "height": height})


@pytest.mark.parametrize(("width", "height"), [(700, 900), (390, 844)])
def test_documented_frame_of_a_failing_snippet_shows_its_diagnosis_and_the_stepper_on_one_screen(
    browser, site, server, width, height
):
    trace = trace_of(server, snippet_code("backward_twice_fails"))
    (diagnosis,) = trace["diagnoses"]
    tab = course_tab(browser, server, width, height)
    try:
        body = f"<h1>Lesson</h1><p>Run this.</p>{documented_iframe(server, 'snippet=backward_twice_fails')}<p>After.</p>"
        tab.page.goto(site.page(f"lesson-{width}.html", body))
        tab.page.frame_locator("iframe").locator("body[data-state=ready]").wait_for(timeout=60_000)
        frame = tab.page.frames[1]
        frame_el = tab.page.locator("iframe")
        # the frame takes its content's height (the documented script): nothing scrolls inside it
        deadline = time.monotonic() + 10
        while (
            abs(frame_el.bounding_box()["height"] - frame.evaluate("document.documentElement.scrollHeight"))
            > 2
        ):
            assert time.monotonic() < deadline, "the frame did not take its content's height"
            time.sleep(0.1)
        tab.page.evaluate("document.querySelector('iframe').scrollIntoView()")
        boxes = frame.evaluate(EMBED_BOXES, "#gs-frame-viewer")
        frame_top = tab.page.evaluate("document.querySelector('iframe').getBoundingClientRect().top")
        assert_stepper_on_one_screen(boxes, -frame_top, height)  # the frame's coordinates
        card = frame.locator(".gs-embed-diagnoses .gs-diag")
        assert card.get_attribute("data-kind") == diagnosis["kind"]
        assert diagnosis["fixes"][0]["title"].replace("`", "") in card.inner_text()
        assert frame.locator(".gs-apply-fix").is_visible()
        # Apply fix: the side-by-side view of the fix's run, which the server kept when it verified it
        frame.click(".gs-apply-fix")
        frame.wait_for_function("document.querySelector('.gs-embed-compare').dataset.rows", timeout=30_000)
        fixed = trace_of(server, diagnosis["fixes"][0]["code"])
        assert f"of {len(fixed['steps'])}:" in frame.locator(".gs-cmp-col").nth(1).inner_text()
        assert tab.errors == []
    finally:
        tab.close()


def test_the_share_dialogs_frame_shows_the_whole_stepper_in_a_course_column(browser, site, server):
    app = Page(browser, server, reduced_motion="reduce")
    try:
        app.open("?snippet=backward_twice_fails")
        app.page.click("#gs-share")
        app.page.wait_for_selector(
            "#gs-share-dialog[open]"
        )  # its fields are filled (compressed) before it opens
        snippet = app.page.locator("#gs-share-embed").input_value()
    finally:
        app.close()
    tab = course_tab(browser, server, 700, 900)
    try:
        tab.page.goto(site.page("shared.html", f"<h1>Lesson</h1>{snippet}<p>After.</p>"))
        frame_el = tab.page.locator("iframe")
        deadline = time.monotonic() + 120
        while True:  # the frame's own state, or what it shows meanwhile
            frame = frame_el.element_handle().content_frame()
            state = frame and frame.evaluate(
                "[location.href, document.body && document.body.dataset.state,"
                " (document.querySelector('#gs-frame-status') || {}).textContent]"
            )
            if state and state[1]:
                break
            assert time.monotonic() < deadline, f"the frame never got ready: {state}"
            time.sleep(0.2)
        assert state[1] == "ready", state
        deadline = time.monotonic() + 10
        while (
            abs(frame_el.bounding_box()["height"] - frame.evaluate("document.documentElement.scrollHeight"))
            > 2
        ):
            assert time.monotonic() < deadline, "the frame did not take its content's height"
            time.sleep(0.1)
        tab.page.evaluate("document.querySelector('iframe').scrollIntoView()")
        top = tab.page.evaluate("document.querySelector('iframe').getBoundingClientRect().top")
        assert_stepper_on_one_screen(frame.evaluate(EMBED_BOXES, "#gs-frame-viewer"), -top, 900)
        assert frame.locator(".gs-embed-diagnoses .gs-apply-fix").is_visible()
        assert tab.errors == []
    finally:
        tab.close()
