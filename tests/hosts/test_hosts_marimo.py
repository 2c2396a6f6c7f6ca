"""marimo, for real: `marimo run` (installed from PyPI when missing) serving a notebook that shows
`gradstep.show(code)`, `mo.ui.anywidget(gradstep.show(code).widget())` and an exported widget
module through `gradstep.notebook.module_widget`, opened in Chromium with marimo set to light and
to dark. The show() output is not cut, the widget steps and its step reaches Python, "auto"
follows marimo's theme; grads shown are those of plain torch."""

from __future__ import annotations

import sys

import pytest
from testkit.browser_support import fmt_values, free_port, needs_chromium
from testkit.hosts_support import (
    CODE,
    PAGE_STATE,
    ensure_packages,
    is_dark,
    plain_grads,
    shot,
    started,
    wait_widgets,
)

pytestmark = [pytest.mark.hosts, needs_chromium]

NOTEBOOK = """\
import marimo

app = marimo.App(width="medium")


@app.cell
def _():
    import marimo as mo
    import gradstep
    from gradstep.export import export_widget
    from gradstep.notebook import module_widget

    CODE = {code!r}
    with open("cube.mjs", "w") as f:
        f.write(export_widget(gradstep.trace(CODE), theme="light"))
    return CODE, gradstep, mo, module_widget


@app.cell
def _(CODE, gradstep):
    gradstep.show(CODE)
    return


@app.cell
def _(CODE, gradstep, mo):
    w = mo.ui.anywidget(gradstep.show(CODE).widget())
    w
    return (w,)


@app.cell
def _(mo, w):
    mo.md(f"python sees step {{w.value['step']}}")
    return


@app.cell
def _(mo, module_widget):
    mo.ui.anywidget(module_widget("cube.mjs", step=1))
    return


if __name__ == "__main__":
    app.run()
"""


@pytest.fixture(scope="module", params=["light", "dark"])
def marimo_app(request, tmp_path_factory):
    versions = ensure_packages("marimo", "anywidget")
    theme = request.param
    home = tmp_path_factory.mktemp(f"marimo-{theme}")
    (home / "config" / "marimo").mkdir(parents=True)
    (home / "config" / "marimo" / "marimo.toml").write_text(f'[display]\ntheme = "{theme}"\n')
    (home / "steps.py").write_text(NOTEBOOK.format(code=CODE))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = [sys.executable, "-m", "marimo", "run", "steps.py", "--headless", "--host", "127.0.0.1"]
    args += ["--port", str(port)]
    env = {"XDG_CONFIG_HOME": str(home / "config")}
    with started(args, base, home / "marimo.log", env, home):
        yield {"base": base, "theme": theme, "versions": versions}


@pytest.fixture
def page(browser, marimo_app):
    # the system's scheme is the other one: "auto" must follow marimo's
    other = "light" if marimo_app["theme"] == "dark" else "dark"
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=other)
    p = ctx.new_page()
    p.errors = []
    p.on("pageerror", lambda e: p.errors.append(str(e)))
    p.goto(marimo_app["base"])
    yield p
    ctx.close()


def show_frame(page):
    page.wait_for_selector("iframe", timeout=90_000)
    for _ in range(600):
        for f in page.frames:
            if f != page.main_frame and f.evaluate("!!document.getElementById('gradstep')"):
                f.wait_for_function("document.body.dataset.ready === 'true'", timeout=60_000)
                return f
        page.wait_for_timeout(100)
    raise AssertionError("no gradstep.show() frame in the page")


def test_marimo_show_output_is_not_cut_follows_the_theme_and_steps_to_plain_torch_grads(marimo_app, page):
    frame = show_frame(page)
    frame.get_by_role("button", name="Last step (End)").click()
    assert frame.locator('[data-grad-for="w"]').first.text_content() == fmt_values(plain_grads()[-1])
    # marimo's iframe grew to the whole stepper (it was cut at 400 px)
    page.wait_for_function(
        "() => [...document.querySelectorAll('iframe')].some((f) => { const d = f.contentDocument;"
        " return d && d.getElementById('gradstep') && d.body.dataset.ready === 'true'"
        " && f.getBoundingClientRect().height >= d.documentElement.scrollHeight - 1; })",
        timeout=30_000,
    )
    state = frame.evaluate(PAGE_STATE)
    assert state["scroll"] > 600
    assert is_dark(state["bg"]) == (marimo_app["theme"] == "dark")
    shot(page, f"marimo-show-{marimo_app['theme']}")
    assert page.errors == []


def test_marimo_widget_follows_the_theme_and_its_step_reaches_python(marimo_app, page):
    first, exported = wait_widgets(page, 2)
    assert first["theme"] == marimo_app["theme"]
    assert is_dark(first["bg"]) == (marimo_app["theme"] == "dark")
    assert exported["step"] == 1  # module_widget(..., step=1) over the module's own step 0
    assert exported["theme"] == "light"  # the module was exported with theme="light"
    page.locator(".gradstep-widget-host").first.get_by_role("button", name="Next step (→)").click()
    page.get_by_text("python sees step 1").wait_for(timeout=30_000)
    page.locator(".gradstep-widget-host").first.get_by_role("button", name="Last step (End)").click()
    last = first["steps"] - 1
    page.get_by_text(f"python sees step {last}").wait_for(timeout=30_000)
    host = page.locator(".gradstep-widget-host").first
    assert host.locator('[data-grad-for="w"]').first.text_content() == fmt_values(plain_grads()[-1])
    shot(page, f"marimo-widget-{marimo_app['theme']}")
    assert page.errors == []
