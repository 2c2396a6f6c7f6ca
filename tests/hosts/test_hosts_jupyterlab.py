"""JupyterLab, for real: a `jupyter lab` server (installed from PyPI when missing) opened in
Chromium; its notebook runs `gradstep.show(code)` and `.widget()`, and the steppers step, follow
JupyterLab's light and dark themes, sync the widget's step both ways, and a notebook handed out
with saved outputs says how to see them. Grads shown are those of plain torch."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from testkit.browser_support import fmt_values, free_port, needs_chromium
from testkit.hosts_support import (
    CODE,
    PAGE_STATE,
    WIDGET_STATE,
    ensure_packages,
    is_dark,
    plain_grads,
    shot,
    started,
)

pytestmark = [pytest.mark.hosts, needs_chromium]

WIDGET_CELL = "w = gradstep.show(CODE).widget()\nw"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    versions = ensure_packages("jupyterlab", "anywidget", "ipykernel", "nbformat", "nbclient")
    home = tmp_path_factory.mktemp("lab")
    settings = home / "settings"
    for plugin, value in {
        "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
        "@jupyter-widgets/jupyterlab-manager/plugin": {"saveState": True},
    }.items():
        (settings / plugin).parent.mkdir(parents=True, exist_ok=True)
        (settings / f"{plugin}.jupyterlab-settings").write_text(json.dumps(value))
    root = home / "notebooks"
    root.mkdir()
    env = {
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),  # its notebook signatures: what this "user" trusts
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "IPYTHONDIR": str(home / "ipython"),
    }
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = [sys.executable, "-m", "jupyter", "lab", "--allow-root", "--no-browser", "--ip", "127.0.0.1"]
    args += [f"--port={port}", "--IdentityProvider.token=", "--ServerApp.password="]
    args += [f"--ServerApp.root_dir={root}", "--ServerApp.disable_check_xsrf=True"]
    with started(args, f"{base}/api/status", home / "lab.log", env, home):
        yield {"base": base, "root": root, "env": env, "versions": versions}


def set_theme(lab, name: str) -> None:
    r = httpx.put(
        f"{lab['base']}/lab/api/settings/@jupyterlab/apputils-extension:themes",
        json={"raw": json.dumps({"theme": name})},
        timeout=30,
    )
    assert r.status_code in (200, 204), r.text


def write_notebook(path: Path, sources: list[str]) -> Path:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def setup_cell() -> str:
    return f"import gradstep\nCODE = {CODE!r}"


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="light")
    p = ctx.new_page()
    p.errors = []
    p.on("pageerror", lambda e: p.errors.append(str(e)))
    yield p
    ctx.close()


def open_notebook(page, lab, name: str) -> None:
    page.goto(f"{lab['base']}/lab/tree/{name}?reset")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    # the kernel is up
    page.wait_for_function(
        "() => /\\| Idle/.test(document.querySelector('#jp-main-statusbar')?.innerText || '')", timeout=90_000
    )


def run_all(page) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()


def show_frame(page):
    """The Frame of the first gradstep.show() output, once its stepper is drawn."""
    page.wait_for_selector("iframe.gradstep-frame", timeout=90_000)
    handle = page.query_selector("iframe.gradstep-frame")
    frame = handle.content_frame()
    frame.wait_for_function("document.body.dataset.ready === 'true'", timeout=60_000)
    return handle, frame


def wait_widget(page) -> dict:
    page.wait_for_function(f"(({WIDGET_STATE})() || {{}}).steps > 0", timeout=90_000)
    return page.evaluate(WIDGET_STATE)


def cell_output_text(page, index: int) -> str:
    return page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-OutputArea").inner_text()


# ---------------------------------------------------------------- a notebook run in the lab


def test_lab_show_output_steps_to_the_grads_of_plain_torch_and_is_not_cut(lab, page):
    set_theme(lab, "JupyterLab Light")
    write_notebook(lab["root"] / "show.ipynb", [setup_cell(), "gradstep.show(CODE)"])
    open_notebook(page, lab, "show.ipynb")
    run_all(page)
    handle, frame = show_frame(page)
    # no hint in a notebook you ran yourself (its outputs are trusted, their script removed it)
    page.wait_for_function("!document.querySelector('.gradstep-trust-hint')", timeout=10_000)
    frame.get_by_role("button", name="Last step (End)").click()
    frame.wait_for_function("Number(document.querySelector('.gs-stepper').dataset.step) > 0")
    assert frame.locator('[data-grad-for="w"]').first.text_content() == fmt_values(plain_grads()[-1])
    # the output grows to the stepper's height: nothing is cut
    page.wait_for_function(
        "() => { const f = document.querySelector('iframe.gradstep-frame');"
        " return Math.abs(f.getBoundingClientRect().height - f.contentDocument.documentElement.scrollHeight) <= 1; }",
        timeout=20_000,
    )
    shot(page, "jupyterlab-show")
    assert page.errors == []


def test_lab_widget_step_syncs_both_ways_with_python(lab, page):
    set_theme(lab, "JupyterLab Light")
    write_notebook(
        lab["root"] / "widget.ipynb", [setup_cell(), WIDGET_CELL, "print('STEP', w.step)", "w.step = 2"]
    )
    open_notebook(page, lab, "widget.ipynb")
    run_all(page)
    page.wait_for_function(f"(({WIDGET_STATE})() || {{}}).step === 2", timeout=90_000)  # Python -> page
    host = page.locator(".gradstep-widget-host")
    host.get_by_role("button", name="Next step (→)").click()  # page -> Python
    page.wait_for_function(f"(({WIDGET_STATE})() || {{}}).step === 3")
    cell = page.locator(".jp-Notebook .jp-Cell").nth(2)
    cell.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    page.wait_for_function(
        "() => /STEP 3/.test(document.querySelectorAll('.jp-Notebook .jp-Cell')[2].innerText)", timeout=30_000
    )
    shot(page, "jupyterlab-widget")
    assert page.errors == []


def test_lab_widget_auto_theme_follows_jupyterlab_not_the_system(lab, page):
    set_theme(lab, "JupyterLab Dark")
    write_notebook(lab["root"] / "theme.ipynb", [setup_cell(), WIDGET_CELL, "gradstep.show(CODE)"])
    open_notebook(page, lab, "theme.ipynb")
    assert page.evaluate("document.body.dataset.jpThemeLight") == "false"
    run_all(page)
    state = wait_widget(page)
    # Chromium's system scheme is light here: "auto" follows JupyterLab's dark theme
    assert (state["theme"], is_dark(state["bg"])) == ("dark", True), state
    _, frame = show_frame(page)
    page.wait_for_function(
        "() => { const f = document.querySelector('iframe.gradstep-frame');"
        " return f.contentDocument.getElementById('gradstep').dataset.theme === 'dark'; }",
        timeout=20_000,
    )
    assert is_dark(frame.evaluate(PAGE_STATE)["bg"])
    shot(page, "jupyterlab-dark")
    # switching JupyterLab's theme in the page switches the widget's, with no re-run
    page.locator(".lm-MenuBar-itemLabel", has_text="Settings").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Theme").first.hover()
    page.locator(".lm-Menu-itemLabel", has_text="JupyterLab Light").first.click()
    page.wait_for_function(f"(({WIDGET_STATE})() || {{}}).theme === 'light'", timeout=30_000)
    assert not is_dark(page.evaluate(WIDGET_STATE)["bg"])
    shot(page, "jupyterlab-light")
    assert page.errors == []


# ---------------------------------------------------------------- saved notebooks


def execute_with_nbclient(lab, path: Path) -> Path:
    """Run a notebook headless as an author would before handing it out: outputs and widget
    state saved in the file, not signed as trusted by the reader."""
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", store_widget_state=True).execute()
    nbformat.write(nb, path)
    return path


def test_saved_widget_state_keeps_the_front_end_out_of_the_notebook(lab):
    from gradstep.notebook import widget_esm

    path = write_notebook(lab["root"] / "saved-widget.ipynb", [setup_cell(), WIDGET_CELL])
    execute_with_nbclient(lab, path)
    text = path.read_text()
    nb = json.loads(text)
    states = nb["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    esms = [s["state"].get("_esm", "") for s in states.values() if "_esm" in s["state"]]
    assert esms, "the widget's state is saved"
    print(f"saved notebook with one widget: {len(text.encode())} bytes; front end {len(widget_esm())} bytes")
    assert all(len(e) < 10_000 for e in esms), [len(e) for e in esms]
    assert len(text.encode()) < len(widget_esm()) / 4


def test_lab_saves_widget_state_without_the_front_end(lab, page):
    from gradstep.notebook import widget_esm

    set_theme(lab, "JupyterLab Light")
    path = write_notebook(lab["root"] / "lab-saved.ipynb", [setup_cell(), WIDGET_CELL])
    open_notebook(page, lab, "lab-saved.ipynb")
    run_all(page)
    wait_widget(page)
    page.locator(".jp-Notebook").click()
    page.keyboard.press("Control+s")
    page.wait_for_function("() => !document.querySelector('.jp-mod-dirty')", timeout=30_000)
    text = path.read_text()
    assert "application/vnd.jupyter.widget-state+json" in text, "JupyterLab saved the widget state"
    print(f"notebook saved by JupyterLab with one widget: {len(text.encode())} bytes")
    assert len(text.encode()) < len(widget_esm()) / 4


def test_lab_notebook_with_untrusted_saved_outputs_says_how_to_see_them(lab, page):
    set_theme(lab, "JupyterLab Light")
    path = write_notebook(lab["root"] / "handout.ipynb", [setup_cell(), "gradstep.show(CODE)", WIDGET_CELL])
    execute_with_nbclient(lab, path)
    open_notebook(page, lab, "handout.ipynb")  # not run: the outputs as saved
    hint = page.locator(".gradstep-trust-hint")
    hint.wait_for(timeout=30_000)
    assert "jupyter trust" in hint.inner_text()
    assert page.locator("iframe.gradstep-frame").count() == 0  # JupyterLab dropped it
    page.wait_for_function(
        "() => /run the cell/i.test(document.querySelectorAll('.jp-Notebook .jp-Cell')[2].innerText)",
        timeout=30_000,
    )
    shot(page, "jupyterlab-untrusted")
    # after `jupyter trust`, the same saved outputs show the stepper
    r = subprocess.run(
        [sys.executable, "-m", "jupyter", "trust", str(path)],
        env={**__import__("os").environ, **lab["env"]},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    page.reload()
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    _, frame = show_frame(page)
    assert frame.evaluate(PAGE_STATE)["ready"]
    page.wait_for_function("!document.querySelector('.gradstep-trust-hint')", timeout=10_000)
    assert re.search(r"\d", frame.locator(".gs-stepper").inner_text())
