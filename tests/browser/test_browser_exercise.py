"""The exercise mode ("predict, then see") in Chromium: the /embed page with `predict`, the app with
`# predict:` comments. Every truth a test expects comes from plain torch run on the same code
(testkit.truth.run_plain); the trace is read only to know which step is which call."""

from __future__ import annotations

import functools
import http.server
import math
import threading

import httpx
import pytest
from gradstep.columns import rows_of
from gradstep.permalink import encode_code
from test_browser_page_a11y import serious
from testkit.browser_support import Page, needs_chromium
from testkit.truth import run_plain

pytestmark = needs_chromium

# three calls: the first keeps the graph, the second frees it, the third fails
CODE = (
    "import torch\n"
    "\n"
    "x = torch.tensor([1.0, 2.0], requires_grad=True)\n"
    "y = (x**3).sum()\n"
    "y.backward(retain_graph=True)  # predict: x.grad, freed\n"
    "y.backward()  # predict: x.grad, freed\n"
    "y.backward()  # predict: error\n"
)
CALL_LINES = (5, 6, 7)


@pytest.fixture(scope="module")
def plain():
    return run_plain(CODE)


@pytest.fixture(scope="module")
def call_steps(server):
    r = httpx.post(f"{server}/api/trace", json={"code": CODE}, timeout=60)
    r.raise_for_status()
    steps = rows_of(r.json())["steps"]
    return [s["index"] for s in steps if s["kind"] in ("backward", "grad")]


@pytest.fixture
def tab(browser, server):
    p = Page(browser, server, reduced_motion="reduce", viewport={"width": 1100, "height": 900})
    yield p
    assert p.errors == []
    p.close()


def x_grad(plain, call: int) -> list[float]:
    """x.grad after call `call` under plain torch."""
    (grad,) = [g for names, g in plain.calls[call].grads.items() if "x" in names]
    return grad.tolist()


def freed_ops(plain, call: int) -> list[str]:
    """The ops of the nodes whose saved tensors call `call` freed (freed after it, not before)."""
    before = {k for k, n in plain.calls[call - 1].nodes.items() if n.freed} if call else set()
    return sorted(n.op for k, n in plain.calls[call].nodes.items() if n.freed and k not in before)


def open_embed(tab, server, predict: str = "1", width: int | None = None, code: str = CODE):
    if width:
        tab.page.set_viewport_size({"width": width, "height": 844})
    tab.page.goto(f"{server}/embed#code={encode_code(code)}&predict={predict}")
    tab.page.wait_for_function("document.body.dataset.state === 'ready'", timeout=60_000)


def step_of(page) -> int:
    return int(page.get_attribute(".gs-stepper", "data-step"))


def next_step(page) -> None:
    page.click(".gs-next")


def card_open(page) -> None:
    page.wait_for_selector(".gs-ex-card:not([hidden]) .gs-ex-form", timeout=10_000)


def check(page) -> list[dict]:
    page.click(".gs-ex-check")
    page.wait_for_selector(".gs-ex-results")
    return page.evaluate(
        "[...document.querySelectorAll('.gs-ex-results tbody tr')].map((tr) => ({kind: tr.dataset.kind,"
        " correct: tr.dataset.correct === 'true', cells: [...tr.children].map((c) => c.textContent)}))"
    )


def numbers(text: str) -> list[float]:
    return [float(t) for t in text.replace("[", " ").replace("]", " ").replace(",", " ").split()]


def answer_first_call(page, value: str) -> list[dict]:
    next_step(page)
    card_open(page)
    page.fill(".gs-ex-input", value)
    return check(page)


# ---------------------------------------------------------------- what the learner sees


def test_a_call_with_questions_is_not_shown_before_the_card_is_answered(tab, server, call_steps):
    open_embed(tab, server)
    next_step(tab.page)
    card_open(tab.page)
    assert step_of(tab.page) == call_steps[0] - 1
    assert tab.page.evaluate("document.activeElement.classList.contains('gs-ex-card')")


def test_a_wrong_grad_is_marked_wrong_beside_torchs_value(tab, server, plain, call_steps):
    open_embed(tab, server)
    truth = x_grad(plain, 0)
    rows = answer_first_call(tab.page, str([2 * v + 1 for v in truth]))
    grad = next(r for r in rows if r["kind"] == "grad")
    assert not grad["correct"]
    assert numbers(grad["cells"][2]) == pytest.approx(truth, rel=1e-3)
    assert "wrong" in grad["cells"][3]
    assert step_of(tab.page) == call_steps[0]  # the step is shown after Check


def test_a_right_grad_is_marked_right(tab, server, plain):
    open_embed(tab, server)
    rows = answer_first_call(tab.page, str(x_grad(plain, 0)))
    assert next(r for r in rows if r["kind"] == "grad")["correct"]


def test_none_is_right_for_a_grad_torch_leaves_none(tab, server):
    code = CODE.replace("y = (x**3).sum()\n", "w = torch.tensor(3.0, requires_grad=True)\ny = (x**3).sum()\n")
    code = code.replace("# predict: x.grad, freed\ny.backward()", "# predict: w.grad\ny.backward()", 1)
    plain = run_plain(code)
    assert [g for names, g in plain.calls[0].grads.items() if "w" in names] == [None]
    open_embed(tab, server, code=code)
    next_step(tab.page)
    card_open(tab.page)
    tab.page.fill(".gs-ex-input", "None")
    (row,) = check(tab.page)
    assert row["correct"] and row["cells"][2] == "None"


def test_freed_chosen_wrong_then_right_after_try_again(tab, server, plain, call_steps):
    open_embed(tab, server)
    answer_first_call(tab.page, "0")
    tab.page.click(".gs-ex-continue")
    next_step(tab.page)
    card_open(tab.page)
    assert step_of(tab.page) == call_steps[1] - 1
    truth = freed_ops(plain, 1)
    assert truth, "the second call frees the graph"
    tab.page.fill(".gs-ex-input", str(x_grad(plain, 1)))
    rows = check(tab.page)  # nothing chosen
    freed = next(r for r in rows if r["kind"] == "freed")
    assert not freed["correct"]
    assert sorted(freed["cells"][2].split(", ")) == truth
    tab.page.click(".gs-ex-retry")
    card_open(tab.page)
    assert step_of(tab.page) == call_steps[1] - 1  # hidden again
    for label in tab.page.locator(".gs-ex-picks label").all():
        if label.inner_text().split(" (")[0] in truth:
            label.click()
    rows = check(tab.page)
    assert next(r for r in rows if r["kind"] == "freed")["correct"]


def test_an_error_predicted_wrong_then_right(tab, server, plain, call_steps):
    assert plain.calls[2].error and "second time" in plain.calls[2].error["message"]
    open_embed(tab, server, predict="error@7", code=CODE.replace("  # predict:", "  # note:"))
    tab.page.evaluate(f"window.gradstepEmbed.viewer.setStep({call_steps[2]})")
    card_open(tab.page)
    tab.page.locator(".gs-ex-q[data-kind=error] label", has_text="It runs without an error").click()
    wrong = next(r for r in check(tab.page) if r["kind"] == "error")
    assert not wrong["correct"]
    assert plain.calls[2].error["type"] in wrong["cells"][2]
    tab.page.click(".gs-ex-retry")
    card_open(tab.page)
    tab.page.locator(
        ".gs-ex-q[data-kind=error] label", has_text="backward through the graph a second time"
    ).click()
    right = next(r for r in check(tab.page) if r["kind"] == "error")
    assert right["correct"]


def test_a_jump_to_the_end_stops_at_the_first_question(tab, server, call_steps):
    open_embed(tab, server)
    tab.page.click(".gs-stepper button[aria-label^='Last step']")
    card_open(tab.page)
    assert step_of(tab.page) == call_steps[0] - 1


def test_skip_shows_the_step_and_counts_its_questions_as_not_answered(tab, server, call_steps):
    open_embed(tab, server)
    next_step(tab.page)
    card_open(tab.page)
    tab.page.click(".gs-ex-skip")
    tab.page.wait_for_function(f"document.querySelector('.gs-stepper').dataset.step === '{call_steps[0]}'")
    badge = tab.page.inner_text(".gs-ex-badge")
    assert "0 of 5 right" in badge and "2 not answered" in badge


def test_the_badge_counts_right_answers(tab, server, plain):
    open_embed(tab, server)
    answer_first_call(tab.page, str(x_grad(plain, 0)))  # x.grad right, freed (nothing) right
    assert tab.page.get_attribute(".gs-ex-badge", "data-correct") == str(1 + (freed_ops(plain, 0) == []))
    assert tab.page.get_attribute(".gs-ex-badge", "data-total") == "5"


def test_a_freed_question_is_answered_with_the_keyboard_alone(tab, server, plain, call_steps):
    open_embed(tab, server, predict="freed@6", code=CODE.replace("  # predict:", "  # note:"))
    page = tab.page
    page.locator(".gs-embed").focus()
    for _ in range(call_steps[1]):
        page.keyboard.press("ArrowRight")
    card_open(page)
    assert step_of(page) == call_steps[1] - 1
    truth = freed_ops(plain, 1)
    # Tab from the card to each node the call frees, in the graph, and choose it with Enter
    chosen = []
    for _ in range(80):
        page.keyboard.press("Tab")
        focused = page.evaluate(
            "(() => { const e = document.activeElement; return e && e.dataset.nodeId !== undefined"
            " ? {op: e.dataset.op, offered: e.dataset.picked !== undefined} : null })()"
        )
        if focused and focused["offered"] and focused["op"] in truth and focused["op"] not in chosen:
            page.keyboard.press("Enter")
            chosen.append(focused["op"])
        if sorted(chosen) == truth:
            break
    assert sorted(chosen) == truth
    assert page.locator("[data-node-id][data-picked=true]").count() == len(truth)
    # then back to Check, and Enter
    for _ in range(80):
        page.keyboard.press("Shift+Tab")
        if page.evaluate("document.activeElement.classList.contains('gs-ex-check')"):
            break
    page.keyboard.press("Enter")
    page.wait_for_selector(".gs-ex-results")
    assert page.get_attribute(".gs-ex-results tbody tr", "data-correct") == "true"


def test_a_bad_spec_is_said_and_the_embed_steps_as_usual(tab, server):
    open_embed(tab, server, predict="w.grad,fred", code=CODE.replace("  # predict:", "  # note:"))
    text = tab.page.inner_text(".gs-ex-errors")
    assert "“fred” is not a question" in text
    assert "no tensor named “w”" in text
    next_step(tab.page)
    next_step(tab.page)
    assert step_of(tab.page) == 2
    assert tab.page.locator(".gs-ex-card:not([hidden])").count() == 0


# ---------------------------------------------------------------- the host page hears the answers


class Site:
    """The course page, served from another origin (127.0.0.2): it frames the embed and logs its messages."""

    def __init__(self, root):
        self.root = root
        handler = functools.partial(Quiet, directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.2", 0), handler)
        self.base = f"http://127.0.0.2:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    s = Site(tmp_path_factory.mktemp("course"))
    yield s
    s.httpd.shutdown()


def test_a_host_page_on_another_origin_receives_each_answer_and_the_score(
    tab, server, site, plain, call_steps
):
    src = f"{server}/embed#code={encode_code(CODE)}&predict=1"
    (site.root / "host.html").write_text(
        "<!doctype html><meta charset=utf-8><link rel=icon href='data:,'><body><script>window.got = [];"
        "addEventListener('message', (ev) => { const f = document.getElementById('f');"
        " if (ev.source === f.contentWindow) window.got.push({origin: ev.origin, data: ev.data}); });</script>"
        f"<iframe id=f src='{src}' width=1000 height=900></iframe></body>",
        encoding="utf-8",
    )
    tab.page.goto(f"{site.base}/host.html")
    frame = tab.page.frame_locator("#f")
    frame.locator("body[data-state=ready]").wait_for(state="attached", timeout=60_000)
    frame.locator(".gs-next").click()
    frame.locator(".gs-ex-input").fill(str([v * 2 for v in x_grad(plain, 0)]))
    frame.locator(".gs-ex-check").click()
    tab.page.wait_for_function("window.got.some((m) => m.data.type === 'gradstep:exercise')", timeout=10_000)
    got = tab.page.evaluate("window.got")
    answers = [m for m in got if m["data"].get("type") == "gradstep:answer"]
    assert {m["origin"] for m in answers} == {server}
    grad = next(m["data"] for m in answers if m["data"]["question"]["kind"] == "grad")
    assert grad["version"] == 1 and grad["step"] == call_steps[0] and grad["line"] == CALL_LINES[0]
    assert grad["question"] == {"kind": "grad", "tensor": "x"}
    assert grad["truth"] == pytest.approx(x_grad(plain, 0), rel=1e-3)
    assert grad["answer"] == pytest.approx([v * 2 for v in x_grad(plain, 0)])
    assert grad["correct"] is False and grad["attempt"] == 1
    freed = next(m["data"] for m in answers if m["data"]["question"]["kind"] == "freed")
    assert freed["answer"] == [] and [n["label"] for n in freed["truth"]] == freed_ops(plain, 0)
    summary = [m["data"] for m in got if m["data"].get("type") == "gradstep:exercise"][-1]
    assert summary == {
        "type": "gradstep:exercise",
        "version": 1,
        "answered": 2,
        "correct": int(freed_ops(plain, 0) == []),
        "skipped": 0,
        "total": 5,
    }


# ---------------------------------------------------------------- the app


def test_the_app_turns_the_exercise_on_for_predict_comments_and_its_switch_turns_it_off(
    browser, server, call_steps
):
    app = Page(browser, server, reduced_motion="reduce", viewport={"width": 1400, "height": 900})
    try:
        app.page.goto(f"{server}/#code={encode_code(CODE)}")
        app.wait_runs(1)
        app.page.click(".gs-stepper button[aria-label^='Last step']")
        card_open(app.page)
        assert step_of(app.page) == call_steps[0] - 1
        assert serious(app.page) == []
        app.page.uncheck(".gs-ex-switch")
        app.page.click(".gs-stepper button[aria-label^='Last step']")
        app.page.wait_for_function(
            "document.querySelector('.gs-stepper').dataset.step === document.querySelector('.gs-stepper').dataset.steps - 1 + ''"
        )
        assert app.page.locator(".gs-ex-card:not([hidden])").count() == 0
        assert app.errors == []
    finally:
        app.close()


# ---------------------------------------------------------------- accessibility


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_question_and_its_result_have_no_serious_accessibility_violation_on_a_phone(
    browser, server, plain, scheme
):
    tab = Page(
        browser, server, reduced_motion="reduce", viewport={"width": 390, "height": 844}, color_scheme=scheme
    )
    try:
        open_embed(tab, server)
        next_step(tab.page)
        card_open(tab.page)
        assert serious(tab.page) == []
        tab.page.fill(".gs-ex-input", str(x_grad(plain, 0)))
        check(tab.page)
        assert serious(tab.page) == []
        assert tab.errors == []
    finally:
        tab.close()


def test_the_card_fits_a_phone_without_horizontal_scrolling(browser, server):
    tab = Page(browser, server, reduced_motion="reduce", viewport={"width": 390, "height": 844})
    try:
        open_embed(tab, server)
        next_step(tab.page)
        card_open(tab.page)
        width = tab.page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390
        box = tab.page.locator(".gs-ex-card").bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390 + 0.5
        assert not math.isnan(box["height"])
    finally:
        tab.close()


# ---------------------------------------------------------------- the notebook widget

WIDGET_HOST = """async ([esm, body]) => {
  const mod = await import(URL.createObjectURL(new Blob([esm], { type: "text/javascript" })));
  const state = { ...body };
  const model = { get: (k) => state[k], set() {}, on() {}, off() {} };
  const el = document.createElement("div");
  document.body.append(el);
  await mod.default.render({ model, el });
  const root = el.querySelector(".gradstep-widget-host").shadowRoot;
  root.querySelector(".gs-next").click();
  await new Promise((r) => setTimeout(r, 100));
  const card = root.querySelector(".gs-ex-card:not([hidden]) .gs-ex-label");
  return [Number(root.querySelector(".gs-stepper").dataset.step), card ? card.textContent : null];
}"""


@pytest.mark.parametrize(("predict", "asks"), [("x.grad", True), ("", False)])
def test_the_widget_asks_when_its_predict_trait_says_so(browser, server, site, predict, asks):
    from gradstep.notebook import widget_esm

    trace = httpx.post(
        f"{server}/api/trace", json={"code": CODE.replace("  # predict:", "  # note:")}, timeout=60
    ).json()
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        (site.root / "notebook.html").write_text("<!doctype html><title>notebook</title>", encoding="utf-8")
        page.goto(f"{site.base}/notebook.html")
        step, label = page.evaluate(WIDGET_HOST, [widget_esm(), {"trace": trace, "predict": predict}])
        if asks:
            assert (step, label) == (0, "x.grad after this call")
        else:
            assert (step, label) == (1, None)
    finally:
        ctx.close()
