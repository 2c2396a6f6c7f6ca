"""MyST: the `{anywidget}` recipe of docs/notebooks.md.

mystmd 1.8 (npm) builds a site only with its theme template, which it downloads from
api.mystmd.org: where that cannot be reached the site build is skipped, saying so. What a MyST
page does with the module does not need the site: MyST's own model class (`MystAnyModel`, from
the npm package `@myst-theme/anywidget` the themes use) drives the exported module in Chromium
the way MyST's renderer does (a shadow root, the directive's JSON as the model, the render's
cleanup on re-render), with the page in MyST's dark mode (a `dark` class on <html>)."""

from __future__ import annotations

import http.server
import shutil
import subprocess
import tarfile
import threading
from functools import partial
from pathlib import Path

import gradstep
import pytest
from gradstep.export import export_widget
from testkit.browser_support import fmt_values, needs_chromium
from testkit.hosts_support import CODE, WIDGETS, ensure_packages, is_dark, plain_grads, shot, wait_widgets

pytestmark = [pytest.mark.hosts, needs_chromium]

MYSTMD = "mystmd@1.8.3"
MYST_ANYWIDGET = "@myst-theme/anywidget@1.4.1"


def npm(args: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: the MyST packages come from the npm registry")
    return subprocess.run(["npm", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_mystmd_builds_the_recipe_site_where_its_theme_can_be_downloaded(tmp_path):
    r = npm(["install", "--no-audit", "--no-fund", MYSTMD], tmp_path)
    if r.returncode != 0:
        pytest.skip(f"could not install {MYSTMD} from npm: {r.stderr[-300:]}")
    site = tmp_path / "site"
    site.mkdir()
    (site / "myst.yml").write_text("version: 1\nproject:\n  title: course\nsite:\n  template: book-theme\n")
    (site / "cube.mjs").write_text(export_widget(gradstep.trace(CODE)))
    (site / "index.md").write_text('# Cube\n\n```{anywidget} ./cube.mjs\n{ "step": 1 }\n```\n')
    r = subprocess.run(
        [str(tmp_path / "node_modules" / ".bin" / "myst"), "build", "--html"],
        cwd=site,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if r.returncode != 0 and ("ENOTFOUND" in r.stdout + r.stderr or "EAI_AGAIN" in r.stdout + r.stderr):
        pytest.skip("mystmd downloads its site template from api.mystmd.org, which cannot be reached here")
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    built = list((site / "_build" / "html").rglob("*.mjs"))
    assert built, "the site carries the widget module"


# MyST's renderer (renderers.js of @myst-theme/anywidget), minus React: import the module, a
# MystAnyModel of the directive's JSON, render into a div in a shadow root; on re-render, abort
# calls the render's cleanup first.
PAGE = """<!doctype html><html class="dark"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>myst</title></head>
<body><div id="cell"></div>
<script type="module">
import { MystAnyModel } from "./models.js";
let controller = null;
window.cleanedUp = 0;
async function show(json) {
  if (controller) controller.abort();
  controller = new AbortController();
  let cleanup;
  controller.signal.addEventListener("abort", async () => { await cleanup?.(); window.cleanedUp += 1; });
  const widget = (await import("./cube.mjs")).default;
  const model = new MystAnyModel(json);
  const rootEl = document.getElementById("cell");
  const shadow = rootEl.shadowRoot ?? rootEl.attachShadow({ mode: "open" });
  const widgetRoot = document.createElement("div");
  shadow.replaceChildren(widgetRoot);
  window.widgetRoot = widgetRoot;
  cleanup = await widget.render?.({ model, el: widgetRoot });
}
window.show = show;
show({ step: 1 });
</script></body></html>"""


@pytest.fixture(scope="module")
def myst_page(tmp_path_factory):
    ensure_packages("anywidget")
    home = tmp_path_factory.mktemp("myst")
    r = npm(["pack", "--silent", MYST_ANYWIDGET], home)
    if r.returncode != 0:
        pytest.skip(f"could not fetch {MYST_ANYWIDGET} from npm: {r.stderr[-300:]}")
    (tgz,) = home.glob("*.tgz")
    with tarfile.open(tgz) as t:
        t.extractall(home, filter="data")
    shutil.copy(home / "package" / "dist" / "models.js", home / "models.js")
    (home / "cube.mjs").write_text(export_widget(gradstep.trace(CODE)))  # the recipe's module
    (home / "index.html").write_text(PAGE)
    (home / "plain.html").write_text(PAGE.replace('<html class="dark">', "<html>"))  # a page with no theme
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(home))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/index.html"
    httpd.shutdown()


def test_myst_model_drives_the_exported_module_steps_rerenders_and_cleans_up(myst_page, browser):
    ctx = browser.new_context(viewport={"width": 1100, "height": 900}, color_scheme="light")
    page = ctx.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    try:
        page.goto(myst_page)
        (state,) = wait_widgets(page, 1)
        assert state["step"] == 1  # the directive's JSON
        # MyST's dark mode (html.dark), though the system's is light: "auto" follows MyST
        assert (state["theme"], is_dark(state["bg"])) == ("dark", True)
        host = page.locator(".gradstep-widget-host")
        host.get_by_role("button", name="Last step (End)").click()  # save_changes throws in MyST
        page.wait_for_function(f"({WIDGETS})()[0].step === {state['steps'] - 1}")
        assert host.locator('[data-grad-for="w"]').first.text_content() == fmt_values(plain_grads()[-1])
        shot(page, "myst-model")
        # a re-render: the old view's cleanup runs (MyST's model.off throws) and ends its view
        page.evaluate("window.oldRoot = window.widgetRoot; show({ step: 0 })")
        page.wait_for_function("window.cleanedUp === 1")
        assert page.evaluate("window.oldRoot.childElementCount") == 0  # its view was destroyed
        page.wait_for_function(
            f"(() => {{ const w = ({WIDGETS})(); return w.length === 1 && w[0] && w[0].step === 0; }})"
        )
        assert errors == []
    finally:
        ctx.close()


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_widget_auto_theme_follows_the_system_where_the_page_says_none(myst_page, browser, scheme):
    ctx = browser.new_context(viewport={"width": 1100, "height": 900}, color_scheme=scheme)
    page = ctx.new_page()
    try:
        page.goto(myst_page.replace("index.html", "plain.html"))
        (state,) = wait_widgets(page, 1)
        assert (state["theme"], is_dark(state["bg"])) == (scheme, scheme == "dark")
    finally:
        ctx.close()
