"""The gradient-flow panel: at a backward call, a row per module with its parameters' .grad norm, as
plain torch computes it; a nan gradient, a vanishing one, the earlier calls of a training loop; a
row picks its module in the graph, by click and by keyboard; the panel in an embed; axe finds no
serious violation in it. Also the narration's full list of .grad changes, opened on demand."""

from __future__ import annotations

import math

import pytest
from gradstep.permalink import encode_code
from test_browser_page_a11y import AXE, TAGS
from testkit.browser_support import Page, needs_chromium
from testkit.truth import run_plain

pytestmark = needs_chromium

MLP = """import torch
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(3, 4),
    torch.nn.Tanh(),
    torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()),
    torch.nn.Linear(4, 1),
)
x = torch.randn(5, 3)
loss = model(x).pow(2).mean()
loss.backward()
"""

# sqrt at 0 inside a module: d sqrt(u)/du = inf at u = 0, times the 0 of the square: nan in model.0.x.grad
NAN = """import torch
import torch.nn as nn
torch.manual_seed(0)


class Distance(nn.Module):
    def __init__(self):
        super().__init__()
        self.x = nn.Parameter(torch.tensor([0.0, 3.0, 4.0]))

    def forward(self, y):
        return torch.sqrt((self.x - y) ** 2)


model = nn.Sequential(Distance(), nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 1))
loss = model(torch.zeros(3)).sum()
loss.backward()
"""

# sigmoids squash the gradient at every layer: the first layers' .grad is ~1e-10 of the last's
DEEP_SIGMOID = """import torch
import torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(*[m for _ in range(16) for m in (nn.Linear(8, 8), nn.Sigmoid())], nn.Linear(8, 1))
loss = model(torch.randn(4, 8)).pow(2).mean()
loss.backward()
"""

LOOP = """import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 4)
y = torch.randint(0, 3, (64,))
for epoch in range(20):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
"""

ROWS = ".gs-gradflow li[data-module]"


def serious_in(page, selectors: list[str]) -> list[str]:
    """axe-core's serious and critical violations inside these parts of the page, one line each."""
    page.evaluate(AXE + "\n;true")
    result = page.evaluate(
        "([sel, tags]) => axe.run({ include: sel.map((s) => [s]) },"
        " { runOnly: { type: 'tag', values: tags }, resultTypes: ['violations'] })",
        [selectors, TAGS],
    )
    return [
        f"{v['id']} ({v['impact']}): {n['target']}"
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
        for n in v["nodes"]
    ]


def plain_module_norms(code: str) -> list[dict[str, float]]:
    """Per backward call of plain torch: each module path's L2 norm over its parameters' .grad
    (nan when one holds a nan or an inf)."""
    out = []
    for call in run_plain(code).calls:
        grads: dict[str, float] = {}
        for names, grad in call.grads.items():
            name = next((n for n in names if n.startswith("model.")), None)
            if name is None or grad is None:
                continue
            sq = float(grad.double().norm()) ** 2
            parts = name.split(".")[:-1]  # the parameter's module and its parents
            for k in range(1, len(parts) + 1):
                path = ".".join(parts[:k])
                grads[path] = grads.get(path, 0.0) + sq
        out.append({p: math.sqrt(v) for p, v in grads.items()})
    return out


def rows(app: Page) -> dict[str, dict]:
    return app.page.eval_on_selector_all(
        ROWS,
        "els => Object.fromEntries(els.map(e => [e.dataset.module, {status: e.dataset.status,"
        " norm: e.dataset.norm === '' ? null : Number(e.dataset.norm), text: e.innerText,"
        " past: e.querySelectorAll('.gs-gf-past').length}]))",
    )


def at_last_step(app: Page) -> None:
    """Go to the last backward call (a training loop's last step is its optimizer's) and wait for
    the panel to draw it."""
    last = app.page.evaluate(
        "(() => { const v = window.gradstep.viewer, s = v.model.steps;"
        " v.setStep(s.findLastIndex((x) => x.kind === 'backward' || x.kind === 'grad')); return v.step; })()"
    )
    app.page.locator(".gs-gradflow").scroll_into_view_if_needed()
    app.page.wait_for_function(f"document.querySelector('.gs-gradflow').dataset.call === '{last}'")


@pytest.fixture
def app(browser, server):
    page = Page(browser, server, reduced_motion="reduce", viewport={"width": 1400, "height": 900})
    page.open()
    yield page
    assert page.errors == []
    page.close()


def test_each_row_is_plain_torchs_grad_norm_of_its_module(app):
    app.run_code(MLP)
    at_last_step(app)
    (want,) = plain_module_norms(MLP)
    got = rows(app)
    # the finest level: the Linear layers (Tanh and ReLU hold no parameter)
    assert set(got) == {"model.0", "model.2.0", "model.3"}
    for path, row in got.items():
        assert row["norm"] == pytest.approx(want[path], rel=1e-5), path


def test_a_coarser_level_sums_the_submodules(app):
    app.run_code(MLP)
    at_last_step(app)
    (want,) = plain_module_norms(MLP)
    app.page.click(".gs-gf-coarser")
    assert list(rows(app)) == ["model.0", "model.2", "model.3"]
    assert rows(app)["model.2"]["norm"] == pytest.approx(want["model.2"], rel=1e-5)
    app.page.click(".gs-gf-coarser")
    assert rows(app)["model"]["norm"] == pytest.approx(want["model"], rel=1e-5)


def test_a_nan_gradient_marks_its_module_non_finite_in_words(app):
    app.run_code(NAN)
    at_last_step(app)
    (want,) = plain_module_norms(NAN)
    assert math.isnan(want["model.0"]) and math.isfinite(want["model.1"])  # plain torch's verdict
    got = rows(app)
    assert got["model.0"]["status"] == "nonfinite"
    assert "nan/inf" in got["model.0"]["text"]
    assert got["model.1"]["status"] == "ok"
    assert got["model.1"]["norm"] == pytest.approx(want["model.1"], rel=1e-5)


def test_a_vanishing_gradient_is_marked_where_torchs_norms_vanish(app):
    app.run_code(DEEP_SIGMOID)
    at_last_step(app)
    (want,) = plain_module_norms(DEEP_SIGMOID)
    layers = {p: n for p, n in want.items() if p.count(".") == 1}
    largest = max(layers.values())
    vanishing = {p for p, n in layers.items() if n < 1e-7 * largest}
    assert vanishing and len(vanishing) < len(layers)  # the snippet does what it is for
    got = rows(app)
    assert {p for p, r in got.items() if r["status"] == "vanishing"} == vanishing
    assert all("↓" in got[p]["text"] for p in vanishing)


def test_a_training_loop_shows_each_module_at_the_earlier_calls(app):
    app.run_code(LOOP)
    at_last_step(app)
    plain = plain_module_norms(LOOP)
    assert len(plain) == 20
    # the earlier calls are drawn a call a task after the current one
    app.page.wait_for_function(f"document.querySelectorAll('{ROWS} .gs-gf-past').length === 2 * 19")
    got = rows(app)
    assert set(got) == {"model.0", "model.2"}
    for path, row in got.items():
        assert row["norm"] == pytest.approx(plain[-1][path], rel=1e-5)
        assert row["past"] == 19  # a dot per earlier call
    assert "call 20 of 20" in app.page.inner_text(".gs-gf-caption")
    # the table on demand gives the previous call's norm: plain torch's at iteration 19
    app.page.click(".gs-gf-table summary")
    app.page.wait_for_selector(".gs-gf-table tbody tr")  # built when opened (the toggle event)
    table = app.page.eval_on_selector_all(
        ".gs-gf-table tbody tr", "trs => trs.map(tr => [...tr.children].map(c => c.textContent))"
    )
    assert [r[0] for r in table] == ["model.0", "model.2"]
    for path, _now, prev, *_ in table:
        assert float(prev) == pytest.approx(plain[-2][path], rel=1e-3)


def test_before_the_first_call_the_panel_says_so(app):
    app.run_code(LOOP)
    app.page.evaluate("window.gradstep.viewer.setStep(0)")
    app.page.locator(".gs-gradflow").scroll_into_view_if_needed()
    app.page.wait_for_selector(".gs-gradflow .gs-gf-chart[hidden]", state="attached")
    assert "No backward call yet" in app.page.inner_text(".gs-gradflow")


def test_clicking_a_row_marks_its_module_in_the_graph(app):
    app.run_code(MLP)
    at_last_step(app)
    app.page.click('.gs-gradflow li[data-module="model.2.0"] button')
    app.page.wait_for_selector('.gs-graph-canvas [data-group="model.2.0"][data-chosen]', state="attached")
    assert app.page.get_attribute('.gs-gradflow li[data-module="model.2.0"] button', "aria-pressed") == "true"
    # another row moves the mark
    app.page.click('.gs-gradflow li[data-module="model.0"] button')
    assert app.page.eval_on_selector_all(
        ".gs-graph-canvas [data-chosen]", "els => els.map(e => e.dataset.group)"
    ) == ["model.0"]


def test_a_row_is_reached_and_picked_with_the_keyboard(app):
    app.run_code(MLP)
    at_last_step(app)
    app.page.focus(".gs-gf-coarser")
    for _ in range(3):
        app.page.keyboard.press("Tab")
        if app.page.evaluate("document.activeElement.classList.contains('gs-gf-row')"):
            break
    focused = app.page.evaluate("document.activeElement.closest('li').dataset.module")
    assert focused == "model.0"
    app.page.keyboard.press("Enter")
    app.page.wait_for_selector('.gs-graph-canvas [data-group="model.0"][data-chosen]', state="attached")


def test_the_narration_opens_the_full_list_of_grad_changes(app):
    app.run_code(DEEP_SIGMOID)
    app.page.evaluate("(() => { const v = window.gradstep.viewer; v.setStep(v.model.steps.length - 1); })()")
    (call,) = run_plain(DEEP_SIGMOID).calls
    want = {
        next(n for n in names if n.startswith("model.")) for names, g in call.grads.items() if g is not None
    }
    summary = app.page.locator(".gs-banner .gs-narr-all summary")
    assert summary.inner_text() == f"All {len(want)} .grad changes"
    summary.click()
    names = app.page.eval_on_selector_all(".gs-narr-all-list li", "els => els.map(e => e.dataset.tensor)")
    assert set(names) == want and len(names) == len(want)


def test_the_panel_shows_in_an_embed(browser, server):
    frame = Page(browser, server, viewport={"width": 700, "height": 900})
    try:
        frame.page.goto(f"{server}/embed#code={encode_code(MLP)}&step=999")
        frame.page.wait_for_selector("body[data-state='ready']")
        frame.page.locator(".gs-gradflow").scroll_into_view_if_needed()
        frame.page.wait_for_selector(f"{ROWS}[data-status='ok']")
        assert frame.page.locator(ROWS).count() == 3
        assert frame.errors == []
    finally:
        frame.close()


@pytest.mark.parametrize(
    "size,scheme",
    [((1400, 900), "light"), ((1400, 900), "dark"), ((390, 844), "light"), ((390, 844), "dark")],
)
def test_the_panel_has_no_serious_accessibility_violation(browser, server, size, scheme):
    app = Page(
        browser,
        server,
        reduced_motion="reduce",
        viewport={"width": size[0], "height": size[1]},
        color_scheme=scheme,
    )
    try:
        app.open()
        app.run_code(NAN)
        at_last_step(app)
        app.page.click(".gs-gf-table summary")
        app.page.click(".gs-narr-all summary")  # 7 .grad changed: the narration counts them
        app.page.wait_for_selector(".gs-narr-all-list")
        assert serious_in(app.page, [".gs-gradflow", ".gs-banner"]) == []
        assert app.errors == []
    finally:
        app.close()
