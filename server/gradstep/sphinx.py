"""Sphinx extension: a ``.. gradstep::`` directive that puts a stepper in the built docs.

In ``conf.py``: ``extensions = ["gradstep.sphinx"]``, then::

    .. gradstep::
       :step: 2
       :theme: light

       import torch
       x = torch.tensor(2.0, requires_grad=True)
       (x ** 3).backward()

``:predict:`` makes the stepper an exercise: the reader predicts before each backward step is
shown. With no value it asks the questions of the body's ``# predict:`` comments (or a default
set); with a value, those questions too, e.g. ``:predict: x.grad, freed, error``
(docs/exercises.md).

The body is traced at build time by the in-process tracer (docs are trusted code, like any code
Sphinx runs; nothing is sandboxed), each one written as a static export page to
``_gradstep/<docname>-<n>.html`` in the HTML output and shown in an iframe that grows to the
stepper's height (``:height:`` fixes it; the stepper then scrolls inside it). The front end is
written once, ``_gradstep/gradstep.js`` and ``gradstep.css``, for all of them
(``gradstep_shared_library = False`` in conf.py inlines it in each page instead). Each page ships
the runs of its diagnoses' fixes: built pages need no server, host them anywhere. Other builders (LaTeX, text, ...) show the code as a literal block.
"""

from __future__ import annotations

import hashlib
import posixpath
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

from gradstep.export import FRAME_RESIZER_JS, THEMES, export_html, predict_option

OUT_DIR = "_gradstep"
DEFAULT_HEIGHT = 720  # pixels, until the page reports its own height


class gradstep_frame(nodes.General, nodes.Element):
    """An iframe to one exported page (its `page` name under _gradstep/) of a given height."""


def _pages(env) -> dict[str, dict[str, str]]:
    """docname -> {page name: html}, kept in the environment (pickled between builds)."""
    if not hasattr(env, "gradstep_pages"):
        env.gradstep_pages = {}
    return env.gradstep_pages


def predict_spec(arg: str | None) -> str:
    """``:predict:`` alone: the questions of the code's comments ("code"); else the spec, as given
    (the page reads it; only what cannot be one is refused, as an invalid option value)."""
    return predict_option(arg if arg and arg.strip() else True) or "code"


class GradstepDirective(SphinxDirective):
    has_content = True
    required_arguments = 0
    option_spec = {
        "step": directives.nonnegative_int,
        "theme": lambda arg: directives.choice(arg, THEMES),
        "height": directives.positive_int,
        "predict": predict_spec,
    }

    def run(self) -> list[nodes.Node]:
        code = "\n".join(self.content)
        if not code.strip():
            raise self.error("gradstep: the directive needs the code to trace as its body")
        from gradstep.notebook import record_dict

        fixes: dict[str, dict] = {}
        data = record_dict(code, fix_runs=fixes)
        page = export_html(
            data,
            step=self.options.get("step", 0),
            theme=self.options.get("theme", "auto"),
            title=f"gradstep: {self.env.docname}",
            fixes=fixes,  # Apply fix shows their runs: the built pages need no server
            # the front end once in _gradstep/, beside the pages (gradstep_shared_library = False: in each)
            library="" if self.config.gradstep_shared_library else None,
            predict=self.options.get("predict"),
        )
        pages = _pages(self.env).setdefault(self.env.docname, {})
        digest = hashlib.sha256(code.encode()).hexdigest()[:8]
        name = f"{self.env.docname.replace('/', '-')}-{len(pages)}-{digest}.html"
        pages[name] = page
        node = gradstep_frame(page=name, height=self.options.get("height"))
        # what non-HTML builders show instead
        node += nodes.literal_block(code, code, language="python")
        self.set_source_info(node)
        return [node]


def visit_frame_html(self, node: gradstep_frame) -> None:
    here = posixpath.dirname(self.builder.get_target_uri(self.builder.current_docname))
    src = posixpath.relpath(f"{OUT_DIR}/{node['page']}", here or ".")
    height = node["height"]
    fixed = " data-fixed-height" if height else ""  # else it grows to its page's height
    self.body.append(
        f'<iframe class="gradstep-frame" src="{self.encode(src)}" title="gradstep: autograd steps"'
        f' loading="lazy" style="width: 100%; height: {int(height or DEFAULT_HEIGHT)}px; border: 0;"{fixed}>'
        "</iframe>\n"
    )
    raise nodes.SkipNode


def visit_frame_other(self, node: gradstep_frame) -> None:
    pass  # its child, the code as a literal block, is rendered


def depart_frame_other(self, node: gradstep_frame) -> None:
    pass


def purge_doc(app: Sphinx, env, docname: str) -> None:
    _pages(env).pop(docname, None)


def merge_info(app: Sphinx, env, docnames, other) -> None:
    mine = _pages(env)
    for docname, pages in _pages(other).items():
        if docname in docnames:
            mine[docname] = pages


def write_pages(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir) / OUT_DIR
    wrote = False
    for pages in _pages(app.env).values():
        for name, page in pages.items():
            out.mkdir(parents=True, exist_ok=True)
            (out / name).write_text(page, encoding="utf-8")
            wrote = True
    if wrote and app.config.gradstep_shared_library:
        from gradstep.export import library_files

        for name, text in library_files().items():
            (out / name).write_text(text, encoding="utf-8")


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_node(
        gradstep_frame,
        html=(visit_frame_html, None),
        latex=(visit_frame_other, depart_frame_other),
        text=(visit_frame_other, depart_frame_other),
        man=(visit_frame_other, depart_frame_other),
        texinfo=(visit_frame_other, depart_frame_other),
    )
    app.add_directive("gradstep", GradstepDirective)
    # one copy of the front end for every stepper of the site (False: each page carries its own)
    app.add_config_value("gradstep_shared_library", True, "env")
    app.add_js_file(None, body=FRAME_RESIZER_JS)  # frames grow to their page's height
    app.connect("env-purge-doc", purge_doc)
    app.connect("env-merge-info", merge_info)
    app.connect("build-finished", write_pages)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
