"""Shared pieces of the browser tests and the render benchmark: Chromium and its flags, a real
`gradstep serve` on a free port, the `browser` / `server` fixtures, a watched `Page`, and the texts
the page must show (the front end's number formatting, in Python).

Test modules import the helpers (`from testkit.browser_support import Page, needs_chromium, fmt_grad`) and
simply request the `browser` / `server` fixtures: tests/conftest.py provides them to every module.
(Importing the fixtures into a test module also works with pytest, but ruff then reports F811 on
each test that takes them as arguments.)
A test that needs a server with other settings starts its own:
    with running_server(GRADSTEP_WALL_SECONDS="2") as base: ...

Playwright is imported only when a browser is launched, so this module imports without it.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from gradstep.columns import rows_of
from gradstep.printing import fmt_number, fmt_values

from testkit.sandbox_guard import uid_base

CHROMIUM = os.environ.get("GRADSTEP_CHROMIUM", "/usr/bin/chromium")
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(
    os.environ.get("GRADSTEP_ARTIFACTS", Path(__file__).resolve().parents[2] / "build" / "browser")
)
HAVE_CHROMIUM = Path(CHROMIUM).exists()

# A drawn node element's data-* state and grad texts (a JS function expression, for probes).
NODE_STATE = """(el) => ({
    op: el.dataset.op, freed: el.dataset.freed, stale: el.dataset.stale,
    executed: el.dataset.executed, failed: el.dataset.failed, alive: el.dataset.alive,
    // in the graph's view (a virtual graph paints only those; others keep their hooks current)
    inView: (() => {
        const svg = el.closest('svg'), a = el.getBoundingClientRect(), b = svg ? svg.getBoundingClientRect() : a;
        return a.right > b.left && a.left < b.right && a.bottom > b.top && a.top < b.bottom;
    })(),
    grads: Object.fromEntries([...el.querySelectorAll('[data-grad-for]')].map(g => [g.dataset.gradFor, g.textContent])),
})"""

# The step a stepper shows and, per drawn node, its NODE_STATE (page.evaluate).
GRAPH_STATE = (
    """() => {
    const nodeState = """
    + NODE_STATE
    + """;
    const root = document.querySelector('.gs-stepper');
    const nodes = {};
    for (const el of document.querySelectorAll('[data-node-id]')) nodes[el.dataset.nodeId] = nodeState(el);
    return { step: Number(root.dataset.step), steps: Number(root.dataset.steps), nodes };
}"""
)

# mark a browser test module with `pytestmark = needs_chromium`
needs_chromium = pytest.mark.skipif(not HAVE_CHROMIUM, reason=f"no Chromium at {CHROMIUM}")


def launch(playwright):
    """Chromium launched with the flags every test and benchmark uses."""
    _csp_proof_waits()
    return playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)


def _csp_proof_waits() -> None:
    """Page/Frame.wait_for_function that works on our pages. Playwright's compiles the predicate with
    eval in the page, which their Content-Security-Policy refuses (no 'unsafe-eval'); evaluate() is
    not subject to it, so poll that. Same arguments, same truthiness test; returns the value."""
    from playwright.sync_api import Error, Frame, TimeoutError
    from playwright.sync_api import Page as PlaywrightPage

    def wait_for_function(self, expression: str, *, arg=None, timeout: float | None = None, polling=None):
        end = time.monotonic() + (30_000 if timeout is None else timeout) / 1000
        last_error = ""
        while True:
            try:
                value, last_error = self.evaluate(expression, arg), ""
            except Error as e:
                # a navigation replaced the document under the poll, or the frame's document is not
                # parsed yet (no body: the predicate read document.body): poll again
                if "context was destroyed" not in str(e) and not _still_loading(self):
                    raise
                value, last_error = None, f" (last poll: {e.message})"
            if value:
                return value
            if time.monotonic() > end:
                raise TimeoutError(
                    f"wait_for_function: {timeout} ms exceeded waiting for {expression}{last_error}"
                )
            time.sleep(0.03)

    def _still_loading(self) -> bool:
        try:
            return bool(self.evaluate("document.body === null"))
        except Error:
            return True

    PlaywrightPage.wait_for_function = wait_for_function
    Frame.wait_for_function = wait_for_function


# ---------------------------------------------------------------- server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(**env: str) -> tuple[subprocess.Popen, str]:
    """Start `gradstep serve` on a free loopback port; `env` adds/overrides GRADSTEP_* variables.

    The rate limit is off unless `env` sets it (tests make many runs from one address).
    Returns the process and its base URL once /healthz answers.
    """
    port = free_port()
    full_env = {**os.environ, "GRADSTEP_RATE": "0", **env}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gradstep", "serve", "--port", str(port), "--log-level", "warning"],
        env=full_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120  # a busy machine starts the sandbox zygote slowly
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"server did not start: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.2)


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


@contextlib.contextmanager
def running_server(**env: str) -> Iterator[str]:
    """A server for the length of a `with` block; yields its base URL."""
    proc, base = start_server(**env)
    try:
        yield base
    finally:
        stop_server(proc)


SHARED_UID_OFFSET = 2450  # see uid_base: the shared server lives on beside other tests' sandboxes


@pytest.fixture(scope="session")
def server() -> Iterator[str]:
    """A real server shared by the page's tests, two sandbox workers: started once (each start
    is ~10 s of the suite), on uids of its own. Tests that need other settings start their own."""
    with running_server(GRADSTEP_WORKERS="2", GRADSTEP_UID_BASE=str(uid_base(SHARED_UID_OFFSET))) as base:
        yield base


@pytest.fixture(scope="module")
def browser():
    if not HAVE_CHROMIUM:
        pytest.skip(f"no Chromium at {CHROMIUM}")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


# ---------------------------------------------------------------- a page of the app


class Page:
    """A page of the app with its console watched: `errors` collects console errors and page errors."""

    def __init__(self, browser, base, **context):
        self.ctx = browser.new_context(
            viewport=context.pop("viewport", {"width": 1440, "height": 900}), **context
        )
        self.page = self.ctx.new_page()
        self.base = base
        self.errors: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, query: str = "") -> dict:
        """Load the page; it runs its default snippet. Returns that trace."""
        with self.page.expect_response(lambda r: r.url.endswith("/api/trace")) as resp:
            self.page.goto(f"{self.base}/{query}")
        self.wait_runs(1)
        return self.trace_of(resp.value)

    def wait_runs(self, n: int, ok: bool = True) -> None:
        """Wait until the page has finished `n` runs; with `ok`, the last one must have reached the server."""
        self.page.wait_for_function(f"Number(document.body.dataset.runs || 0) >= {n}", timeout=30_000)
        if ok:
            status = self.page.locator("#gs-run-status").inner_text()
            assert not status.startswith("Could not run"), status

    def runs(self) -> int:
        return int(self.page.evaluate("document.body.dataset.runs || 0"))

    def pick(self, name: str) -> dict:
        """Pick a snippet in the picker (which runs it); returns the trace the API sent."""
        n = self.runs()
        self.page.click("#gs-picker summary")
        with self.page.expect_response(lambda r: r.url.endswith("/api/trace")) as resp:
            self.page.click(f'[data-snippet="{name}"]')
        self.wait_runs(n + 1)
        return self.trace_of(resp.value)

    def type_code(self, code: str) -> None:
        """Replace the editor's text as a user would (one paste-like input: no auto-indent)."""
        self.page.click(".cm-content")
        self.page.keyboard.press("Control+A")
        self.page.keyboard.press("Delete")
        self.page.keyboard.insert_text(code)

    def run_code(self, code: str) -> dict:
        """Type code into the editor and run it with Ctrl+Enter; returns the trace the API sent."""
        n = self.runs()
        self.type_code(code)
        with self.page.expect_response(lambda r: r.url.endswith("/api/trace")) as resp:
            self.page.keyboard.press("Control+Enter")
        self.wait_runs(n + 1)
        return self.trace_of(resp.value)

    def trace_of(self, response) -> dict:
        """The trace a /api/trace response carried, its tables as rows.

        Chromium sometimes no longer holds a finished response's body ("No data found for
        resource"); the same request then gets the same trace from the server's cache.
        """
        from playwright.sync_api import Error as PlaywrightError

        try:
            return rows_of(response.json())
        except PlaywrightError:
            again = httpx.post(
                response.url,
                content=response.request.post_data,
                headers={"content-type": "application/json"},
                timeout=60,
            )
            again.raise_for_status()
            return rows_of(again.json())

    def press(self, key: str) -> None:
        self.page.evaluate("document.activeElement && document.activeElement.blur()")
        self.page.keyboard.press(key)

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.page.wait_for_timeout(120)
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"))

    def graph_state(self) -> dict:
        """The step shown and, per drawn node, its data-* state and the grad texts it shows (a
        virtual graph's off-screen nodes: their hooks once written; the texts of those in view)."""
        self.page.wait_for_function("() => !document.querySelector('[data-hooks-pending]')")
        return self.page.evaluate(GRAPH_STATE)

    def close(self) -> None:
        self.ctx.close()


# ---------------------------------------------------------------- the texts the page must show


def fmt_grad(grad) -> str:
    """frontend/model.js fmtGrad, numbers printed by gradstep.printing (the twin of printing.js,
    both checked against torch by tests/trace/test_printing.py)."""
    if not grad:
        return "None"
    shape = grad["shape"]
    numel = math.prod(shape)
    shape_text = "×".join(map(str, shape)) if shape else "scalar"
    if grad.get("values") is not None and numel <= 6:
        return fmt_values(grad["values"], grad.get("dtype"), grad.get("format"))
    if grad.get("norm") is None:
        return f"{shape_text} {grad['dtype']}"
    return f"‖{fmt_number(grad['norm'])}‖ {shape_text}"


# ---------------------------------------------------------------- what the graph must show


def expected_at(trace: dict, i: int) -> dict:
    """What the graph must show at step i, straight from the trace (defaults applied)."""
    trace = rows_of(trace)
    step = trace["steps"][i]
    table = trace["nodes"]
    alive = {}
    for s in step["nodes"]:
        if s.get("dropped"):
            continue
        alive[str(s["id"])] = {
            "op": table[s["id"]]["op"],
            "freed": "true" if s.get("freed") else "false",
            "stale": "true" if s.get("stale") else "false",
            "executed": "true" if s.get("executed") else "false",
            "failed": "true" if s.get("failed") else "false",
            "grads": {},
        }
    for t in step.get("tensors", []):
        node = t.get("node")
        if node is not None and str(node) in alive:
            alive[str(node)]["grads"][t["name"]] = fmt_grad(t.get("grad"))
    return alive


def assert_step_matches(state: dict, trace: dict, i: int) -> None:
    assert state["step"] == i
    assert state["steps"] == len(trace["steps"])
    want = expected_at(trace, i)
    for node_id, exp in want.items():
        got = state["nodes"].get(node_id)
        assert got is not None, f"step {i}: node {node_id} ({exp['op']}) is not drawn"
        assert got["alive"] == "true", f"step {i}: node {node_id} should be alive"
        for key in ("op", "freed", "stale", "executed", "failed"):
            assert got[key] == exp[key], (
                f"step {i}: node {node_id} {exp['op']} {key}={got[key]}, trace says {exp[key]}"
            )
        for name, text in exp["grads"].items() if got.get("inView", True) else ():
            assert got["grads"].get(name) == text, (
                f"step {i}: {name}.grad shows {got['grads'].get(name)!r}, trace {text!r}"
            )
    for node_id, got in state["nodes"].items():
        if node_id not in want:
            assert got["alive"] == "false", (
                f"step {i}: node {node_id} is drawn alive but the step does not list it"
            )


# ---------------------------------------------------------------- an embed on a course page

# The boxes of an embed's parts in its document's viewport (a JS function expression taking the
# selector of the embed): what a reader sees without scrolling inside it.
EMBED_BOXES = """(sel) => {
  const root = document.querySelector(sel);
  const box = (e) => {
    if (!e || !e.checkVisibility()) return null; // a folded <details> keeps its box, unseen
    const r = e.getBoundingClientRect();
    return r.width && r.height ? { top: r.top, bottom: r.bottom, left: r.left, right: r.right } : null;
  };
  const q = (s) => box(root.querySelector(s));
  const canvas = root.querySelector('.gs-embed-right .gs-graph-canvas').getBoundingClientRect();
  const nodes = [...root.querySelectorAll('.gs-embed-right [data-node-id]')].map((e) => e.getBoundingClientRect());
  return {
    controls: q('.gs-embed-stepper .gs-controls'), narration: q('.gs-embed-right .gs-banner'),
    graph: q('.gs-embed-right .gs-graph-canvas'), diagnosis: q('.gs-embed-diagnoses .gs-diag'),
    fix: q('.gs-embed-diagnoses .gs-apply-fix'), fixTitle: q('.gs-embed-diagnoses .gs-fix-title'),
    code: q('.gs-embed-codebox .cm-editor'), codeToggle: q('.gs-embed-code-summary'),
    nodes: nodes.length,
    nodesInside: nodes.every((n) => n.left >= canvas.left - 1 && n.right <= canvas.right + 1 && n.top >= canvas.top - 1 && n.bottom <= canvas.bottom + 1),
    smallestNode: Math.min(...nodes.map((n) => n.height)),
  };
}"""


def assert_stepper_on_one_screen(boxes: dict, top: float, height: float) -> None:
    """The narration, the fitted graph and the step controls within one screen of `height` px from
    `top` (the viewport's coordinates), the graph's nodes inside it and big enough to read."""
    for part in ("narration", "graph", "controls"):
        b = boxes[part]
        assert b is not None, f"the {part} is not shown"
        assert b["top"] >= top - 1 and b["bottom"] <= top + height + 1, f"the {part} is off screen: {b}"
    assert boxes["nodes"] > 0 and boxes["nodesInside"], "the graph is not fitted to its box"
    assert boxes["smallestNode"] >= 28, (
        f"the graph's nodes are too small to read ({boxes['smallestNode']} px)"
    )
