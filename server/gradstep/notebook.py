"""Notebooks: ``gradstep.show(code)`` and the ``%%gradstep`` cell magic draw the stepper inline.

The code runs here, in the notebook's own process, through the in-process tracer (no server, no
sandbox: it is the user's own code, as with any other cell). What is shown is the static export
page in an ``<iframe srcdoc>``: it needs no extension and no network, and works alike in
JupyterLab, the classic notebook and VS Code, with the page's styles kept out of the notebook's.
With anywidget installed, ``.widget()`` gives the same stepper as a widget whose step follows
Python and the page both ways; its saved state holds the trace and a small loader, not the front
end. In marimo the output is the same page in marimo's own iframe, at the stepper's height.
"""

from __future__ import annotations

import argparse
import html
import shlex
from functools import cache
from pathlib import Path
from typing import Any

from gradstep.export import (
    FRAME_RESIZER_JS,
    ExportError,
    check_options,
    clamp_step,
    export_html,
    fixes_json,
    predict_option,
    trace_json,
)
from gradstep.schema import Trace
from gradstep.trace_dicts import typed

DEFAULT_HEIGHT = 760
MARIMO_HEIGHT = 480  # marimo's iframe grows from here to its page's height (never shrinks)

# Shown above the stepper until the output's script runs: a notebook opened with saved outputs it
# does not trust (JupyterLab: not run by you) keeps this text and drops the iframe and the script.
TRUST_HINT = (
    "gradstep: if no stepper shows here, this notebook's outputs are not trusted. "
    "Run jupyter trust NOTEBOOK.ipynb (or File > Trust Notebook), or re-run the cell."
)
_HINT_REMOVER = (
    "(() => { const s = document.currentScript; const h = s && s.parentElement"
    " && s.parentElement.querySelector('.gradstep-trust-hint'); if (h) h.remove(); })();"
)


def _check(step: int, theme: str, height: int | None, predict: str | bool | None = None) -> str | None:
    """Refuse a bad option with a ValueError; the exercise's questions as pages carry them."""
    try:
        check_options(step, theme)
        spec = predict_option(predict)
    except ExportError as e:
        raise ValueError(str(e)) from None
    if height is not None and (isinstance(height, bool) or not isinstance(height, int) or height < 120):
        raise ValueError(f"height must be a whole number of pixels, at least 120, not {height!r}")
    return spec


class Stepper:
    """A traced snippet that displays as the stepper (``_repr_html_``); ``.data`` is its trace as the
    tracer's dicts (rows), ``.trace`` its typed trace; ``.predict`` the exercise's questions (a spec,
    "code" for those of the code's ``# predict:`` comments, or None: no exercise)."""

    def __init__(
        self,
        data: dict,
        *,
        step: int = 0,
        theme: str = "auto",
        height: int | None = None,
        fixes: dict[str, dict] | None = None,
        predict: str | bool | None = None,
    ):
        self.predict = _check(step, theme, height, predict)
        self.data = data
        self.fixes = fixes or {}  # the run of each fix offered, by its code: Apply fix shows it
        self.step = clamp_step(data, step)
        self.theme = theme
        self.height = height

    @property
    def trace(self) -> Trace:
        return typed(self.data)

    def html(self) -> str:
        """The self-contained page (what ``gradstep export`` writes)."""
        return export_html(
            self.data,
            step=self.step,
            theme=self.theme,
            title="gradstep",
            fixes=self.fixes,
            predict=self.predict,
        )

    def save(self, path: str | Path) -> Path:
        """Write the page to `path` (a static export of this trace)."""
        path = Path(path)
        path.write_text(self.html(), encoding="utf-8")
        return path

    def _repr_html_(self) -> str:
        # Without a height, the iframe grows to its page's height where the output may run scripts
        # (DEFAULT_HEIGHT where it may not). The hint is removed by the same script.
        fixed = " data-fixed-height" if self.height is not None else ""
        return (
            f'<div class="gradstep-output"><p class="gradstep-trust-hint">{html.escape(TRUST_HINT)}</p>'
            f'<iframe class="gradstep-frame" title="gradstep: autograd steps" srcdoc="{html.escape(self.html())}"'
            f' style="width: 100%; height: {self.height or DEFAULT_HEIGHT}px; border: 0;"{fixed}></iframe>'
            f"<script>{_HINT_REMOVER}\n{FRAME_RESIZER_JS}</script></div>"
        )

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        # text/plain is what a notebook shows where it will not show the HTML.
        return {"text/html": self._repr_html_(), "text/plain": TRUST_HINT}

    def _display_(self) -> Any:
        """marimo: the page in marimo's own iframe, which grows to the stepper's height (a plain
        HTML output with a script becomes an iframe cut at 400 px there); "auto" follows marimo's
        light or dark setting."""
        import marimo as mo

        page = export_html(
            self.data,
            step=self.step,
            theme=_marimo_theme(self.theme),
            title="gradstep",
            fixes=self.fixes,
            predict=self.predict,
        )
        return mo.iframe(page, height=f"{self.height or MARIMO_HEIGHT}px")

    def widget(self) -> Any:
        """The same stepper as an anywidget (``pip install anywidget``); ``.step`` follows the page
        and moves it. In marimo: ``mo.ui.anywidget(gradstep.show(code).widget())``."""
        fixes = fixes_json(self.data, self.fixes)
        return _widget_class()(
            trace=trace_json(self.data),
            step=self.step,
            theme=self.theme,
            fixes=fixes,
            predict=self.predict or "",
        )

    def __repr__(self) -> str:
        steps = len(self.data.get("steps") or ())
        return f"<gradstep.Stepper: {steps} steps, status {self.data.get('status')!r}>"


def _marimo_theme(theme: str) -> str:
    """ "auto" as marimo's display theme when it is set to light or dark ("system": the page's own
    prefers-color-scheme already follows it)."""
    if theme != "auto":
        return theme
    try:
        from marimo._runtime.context import get_context

        chosen = get_context().marimo_config["display"]["theme"]
    except Exception:
        return theme
    return chosen if chosen in ("light", "dark") else theme


def record_dict(code: str, diagnose: bool = True, fix_runs: dict[str, dict] | None = None) -> dict:
    """Trace `code` in this process, as the plain JSON-able dict the front end reads; with
    `diagnose`, known autograd mistakes come with fixes verified by running them here too
    (as gradstep.trace does), and `fix_runs` receives each offered fix's run by its code."""
    if not isinstance(code, str):
        raise TypeError(f"code must be a string of Python, not {type(code).__name__}")
    from gradstep.pipeline import in_process

    return in_process(code, diagnose=diagnose, fix_runs=fix_runs)


def show(
    code: str,
    step: int = 0,
    theme: str = "auto",
    height: int | None = None,
    diagnose: bool = True,
    predict: str | bool | None = None,
) -> Stepper:
    """Run `code` here and return the stepper for it: the last expression of a cell displays it.
    `height` (pixels) fixes the output's height; by default it fits the stepper. `diagnose=False`
    skips running the fixes of known mistakes. `predict` makes it an exercise, the learner
    predicting before each backward step is shown: True (or "code") asks the questions of the
    code's ``# predict:`` comments (or a default set), a spec such as "x.grad, freed, error" adds
    those (docs/exercises.md)."""
    _check(step, theme, height, predict)
    fixes: dict[str, dict] = {}
    data = record_dict(code, diagnose, fixes)
    return Stepper(data, step=step, theme=theme, height=height, fixes=fixes, predict=predict)


# ---------------------------------------------------------------- anywidget


@cache
def widget_esm() -> str:
    """frontend/widget.js with everything it imports inlined: the one ES module anywidget loads."""
    from gradstep.export import bundle

    return bundle("widget.js")


def widget_loader() -> str:
    """The module a StepperWidget's state holds: it asks the kernel for widget_esm()."""
    return (Path(__file__).resolve().parent / "templates" / "widget-loader.js").read_text(encoding="utf-8")


WIDGET_HINT = "<gradstep stepper widget: run the cell to show it>"


@cache
def _widget_class():
    try:
        import anywidget
        import traitlets
    except ImportError:
        raise ImportError("Stepper.widget() needs anywidget: pip install anywidget") from None

    class StepperWidget(anywidget.AnyWidget):
        """The stepper as an anywidget. Its synced state is the trace, step and theme and a small
        loader (what a notebook saves); the front end itself is sent to the page in a custom
        message when the loader asks for it."""

        _esm = widget_loader()
        trace = traitlets.Dict().tag(sync=True)
        fixes = traitlets.Dict().tag(sync=True)  # each fix's run by its code: Apply fix shows it
        step = traitlets.Int(0).tag(sync=True)
        theme = traitlets.Unicode("auto").tag(sync=True)
        # the exercise's questions: "" no exercise, "code" those of the code's comments, or a spec
        predict = traitlets.Unicode("").tag(sync=True)

        @traitlets.validate("predict")
        def _valid_predict(self, proposal):
            try:
                return predict_option(proposal["value"]) or ""
            except ExportError as e:
                raise traitlets.TraitError(str(e)) from None

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.on_msg(_send_front_end)

        def __repr__(self) -> str:  # the text/plain a notebook shows without the widget
            return WIDGET_HINT

    return StepperWidget


def _send_front_end(widget, content, buffers) -> None:
    if isinstance(content, dict) and content.get("type") == "gradstep:esm?":
        widget.send({"type": "gradstep:esm", "source": widget_esm()})


def module_widget(path: str | Path, **state) -> Any:
    """An anywidget for a module written by ``gradstep export --format widget`` (a ``.mjs`` file
    that carries its trace): ``mo.ui.anywidget(module_widget("cube.mjs", step=2))`` in marimo, or
    the last expression of a Jupyter cell. `state` sets ``step``, ``theme`` and ``predict``."""
    try:
        import anywidget
        import traitlets
    except ImportError:
        raise ImportError("module_widget() needs anywidget: pip install anywidget") from None
    source = Path(path).read_text(encoding="utf-8")

    class ExportedStepper(anywidget.AnyWidget):
        _esm = source
        step = traitlets.Int(allow_none=True, default_value=None).tag(sync=True)
        theme = traitlets.Unicode(allow_none=True, default_value=None).tag(sync=True)
        predict = traitlets.Unicode(allow_none=True, default_value=None).tag(sync=True)

    return ExportedStepper(**state)


# ---------------------------------------------------------------- %%gradstep


class _MagicArgs(argparse.ArgumentParser):
    def error(self, message: str):  # a UsageError in the cell, not SystemExit
        raise ValueError(f"%%gradstep: {message} (usage: {self.format_usage().strip()})")


def _magic_parser() -> argparse.ArgumentParser:
    p = _MagicArgs(prog="%%gradstep", add_help=False)
    p.add_argument("--step", type=int, default=0)
    p.add_argument("--theme", default="auto")
    p.add_argument("--height", type=int, default=None)
    p.add_argument("--predict", nargs="?", const="code", default=None)  # alone: the comments' questions
    return p


def gradstep_magic(line: str, cell: str) -> Stepper:
    """``%%gradstep [--step N] [--theme light|dark|auto] [--height PX] [--predict [SPEC]]``: trace the
    cell and show it (``--predict``: as an exercise)."""
    from IPython.core.error import UsageError

    try:
        args = _magic_parser().parse_args(shlex.split(line))
        return show(cell, step=args.step, theme=args.theme, height=args.height, predict=args.predict)
    except ValueError as e:
        raise UsageError(str(e)) from None


def load_ipython_extension(ipython) -> None:
    """``%load_ext gradstep`` registers the ``%%gradstep`` cell magic."""
    ipython.register_magic_function(gradstep_magic, magic_kind="cell", magic_name="gradstep")
