"""Shared pieces of the host tests (tests/hosts/test_hosts_*.py): the real hosts a course author uses
(JupyterLab, marimo, Sphinx, MyST) installed from PyPI into this environment when missing, started
on free loopback ports, and opened in Chromium.

They are slow (each host starts in seconds, runs a kernel, renders a page), so they carry the
`hosts` mark and run with `make test-hosts`; `pytest -m hosts tests/hosts` is the same.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
SCREENS = REPO / "build" / "screens"
# The host versions the suite was written against (pip installs them when missing).
HOST_PACKAGES = {
    "jupyterlab": "4.6.6",
    "marimo": "0.25.2",
    "sphinx": "9.0.4",
    "anywidget": "0.11.0",
    "ipykernel": None,
    "nbformat": None,
    "nbclient": None,
}

CODE = """\
import torch
w = torch.tensor([1.0, -2.0], requires_grad=True)
h = (w * 3).tanh()
loss = h.sum()
loss.backward(retain_graph=True)
loss.backward()
"""


def plain_grads() -> list[list[float]]:
    """w.grad after each backward call of CODE, in plain torch."""
    w = torch.tensor([1.0, -2.0], requires_grad=True)
    loss = (w * 3).tanh().sum()
    out = []
    loss.backward(retain_graph=True)
    out.append(w.grad.tolist())
    loss.backward()
    out.append(w.grad.tolist())
    return out


def ensure_packages(*names: str) -> dict[str, str]:
    """Install the named host packages (pinned in HOST_PACKAGES) into this environment where they
    are missing or another version; returns {name: installed version}."""
    want = []
    for name in names:
        pin = HOST_PACKAGES[name]
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            have = None
        if have is None or (pin and have != pin):
            want.append(f"{name}=={pin}" if pin else name)
    if want:
        r = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", *want], capture_output=True, text=True, timeout=900
        )
        if r.returncode != 0:
            pytest.skip(f"could not install {' '.join(want)} from the package index: {r.stderr[-500:]}")
    return {n: importlib.metadata.version(n) for n in names}


def wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=3).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise RuntimeError(f"{url} did not come up: {log.read_text()[-2000:]}")
        time.sleep(0.3)


def stop(proc: subprocess.Popen) -> None:
    """End a host started by start() and everything it started (its own process group)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait(15)


@contextlib.contextmanager
def started(
    args: list[str], url: str, log: Path, env: dict[str, str], cwd: Path
) -> Iterator[subprocess.Popen]:
    """A host process in its own session (so its kernels end with it), until `url` answers."""
    with open(log, "w") as out:
        proc = subprocess.Popen(
            args,
            cwd=cwd,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_http(url, proc, log)
        yield proc
    finally:
        stop(proc)


def shot(page, name: str) -> None:
    SCREENS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENS / f"{name}.png"))


# In a page or frame: every gradstep widget's theme, background and stepper, looking into shadow
# roots (marimo draws each widget inside its own).
WIDGETS = """() => {
  const hosts = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.classList.contains('gradstep-widget-host')) hosts.push(el);
      else if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(document);
  return hosts.map((host) => {
    const box = host.shadowRoot.querySelector('.gs-widget');
    const s = host.shadowRoot.querySelector('.gs-stepper');
    return box && { theme: box.dataset.theme, bg: getComputedStyle(box).backgroundColor,
                    step: s ? Number(s.dataset.step) : null, steps: s ? Number(s.dataset.steps) : null };
  });
}"""
# The first widget's state, or null.
WIDGET_STATE = f"() => ({WIDGETS})()[0] || null"


def wait_widgets(page, n: int) -> list[dict]:
    """The states of the page's first `n` widgets once each has drawn its stepper."""
    page.wait_for_function(
        f"() => {{ const w = ({WIDGETS})(); return w.length >= {n} && w.every((x) => x && x.steps > 0); }}",
        timeout=90_000,
    )
    return page.evaluate(WIDGETS)


# Inside an exported page: its theme and background, and the heights that show whether it is cut.
PAGE_STATE = """() => ({
  ready: document.body.dataset.ready === 'true',
  bg: getComputedStyle(document.querySelector('.gs-embed') || document.body).backgroundColor,
  scroll: document.documentElement.scrollHeight,
  step: Number((document.querySelector('.gs-stepper') || {dataset: {}}).dataset.step),
})"""


def is_dark(rgb: str) -> bool:
    """A computed colour 'rgb(r, g, b)' that is dark (luma below half)."""
    r, g, b = (float(v) for v in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3])
    return 0.299 * r + 0.587 * g + 0.114 * b < 128
