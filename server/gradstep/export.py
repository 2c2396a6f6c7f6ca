"""Static export: one self-contained HTML page (trace, JavaScript, CSS inlined) that replays the
stepper from ``file://`` or any static host, with no server and no network request.

The front end is plain ES modules importing each other by relative URLs (``./viewer.js``), which a
single file cannot serve. Instead of a committed bundle that every front-end edit would make stale,
the modules are inlined here, from the sources, at export time: starting from an entry module we
follow its static relative imports (and ``new URL("./x", import.meta.url)`` assets such as the
layout worker), rewrite each specifier to a placeholder, and emit one ES module that turns every
source into a Blob URL (dependencies first) and substitutes those URLs for the placeholders.
Blob URLs are absolute, so the rewritten imports resolve anywhere — ``file://``, a static host, an
iframe ``srcdoc``, a notebook, or the string anywidget loads. Files referred to by
``new URL(…, import.meta.url)`` — the layout worker — become data: URLs instead, with their own
imports as data: URLs: from ``file://`` Chromium starts a module worker from nothing else.
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gradstep.columns import wire_of
from gradstep.schema import Trace

THEMES: tuple[str, ...] = ("light", "dark", "auto")
FORMATS: tuple[str, ...] = ("html", "json", "widget")
TEMPLATES = Path(__file__).resolve().parent / "templates"
_MAIN = TEMPLATES / "export-main.js"  # the page's own code, after the inlined front end

# `import … from "./x.js"`, `export … from "./x.js"`, `import "./x.js"` at the start of a line (our
# modules put top-level statements there; comments quoting an import are indented or prefixed).
_STATIC_IMPORT = re.compile(r"""(?m)^((?:import|export)\b[^;"'`]*?)(["'])(\.\.?/[^"'\n]+)\2""")
_DYNAMIC_IMPORT = re.compile(r"""\bimport\(\s*(["'])(\.\.?/[^"'\n]+)\1\s*\)""")
_ASSET_URL = re.compile(r"""new URL\(\s*(["'])(\.\.?/[^"'\n]+)\1\s*,\s*import\.meta\.url\s*\)""")
# Unlikely in any source (and not the "gradstep:…" prefix of frame messages).
_MARK = "@@gradstep-"
_MIME = {".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css", ".json": "application/json"}


class ExportError(ValueError):
    """A misuse of the exporter (bad option, missing front end), with a message meant for a person."""


@dataclass(frozen=True)
class Module:
    name: str  # path relative to the front end folder, e.g. "vendor/d3.js"
    source: str  # specifiers rewritten to placeholders
    mime: str
    deps: tuple[str, ...]


def frontend_folder() -> Path:
    from gradstep.pages import frontend_dir

    folder = frontend_dir()
    if folder is None:
        raise ExportError(
            "the front end's files were not found (set GRADSTEP_FRONTEND to the frontend/ folder)"
        )
    return folder


def _resolve(importer: str, spec: str) -> str:
    """`spec` relative to `importer`, both relative to the front end folder (no escaping it)."""
    parts = importer.split("/")[:-1]
    for p in spec.split("/"):
        if p == "..":
            if not parts:
                raise ExportError(f"{importer} imports {spec}, outside the front end folder")
            parts.pop()
        elif p not in ("", "."):
            parts.append(p)
    return "/".join(parts)


def _rewrite(name: str, text: str) -> tuple[str, list[str]]:
    deps: list[str] = []

    def mark(spec: str, quote: str, kind: str = "module") -> str:
        target = _resolve(name, spec)
        deps.append(target)
        return f"{quote}{_MARK}{kind}:{target}{quote}"

    text = _ASSET_URL.sub(lambda m: f"new URL({mark(m.group(2), m.group(1), 'asset')})", text)
    text = _DYNAMIC_IMPORT.sub(lambda m: f"import({mark(m.group(2), m.group(1))})", text)
    text = _STATIC_IMPORT.sub(lambda m: m.group(1) + mark(m.group(3), m.group(2)), text)
    return text, deps


def collect(entries: list[str], folder: Path | None = None, stub: tuple[str, ...] = ()) -> list[Module]:
    """The modules reachable from `entries`, each after everything it refers to; files in `stub`
    become empty (a stylesheet the page already inlines)."""
    folder = folder or frontend_folder()
    modules: dict[str, Module] = {}
    order: list[Module] = []
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in modules:
            return
        if name in visiting:
            cycle = " -> ".join([*visiting[visiting.index(name) :], name])
            raise ExportError(f"the front end's modules import each other in a cycle: {cycle}")
        path = folder / name
        if not path.is_file():
            importer = f" (referred to by {visiting[-1]})" if visiting else ""
            raise ExportError(f"front end file {name} not found in {folder}{importer}")
        mime = _MIME.get(path.suffix, "application/octet-stream")
        text = "" if name in stub else path.read_text(encoding="utf-8")
        deps: list[str] = []
        if mime == "text/javascript":
            text, deps = _rewrite(name, text)
        visiting.append(name)
        for d in deps:
            visit(d)
        visiting.pop()
        modules[name] = Module(name, text, mime, tuple(dict.fromkeys(deps)))
        order.append(modules[name])

    for e in entries:
        visit(e)
    return order


def _js_string(value) -> str:
    """JSON as a JavaScript literal that is also safe inside an HTML <script> element."""
    import orjson

    text = orjson.dumps(value).decode()
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


_LOADER = """\
// gradstep: the front end's ES modules, inlined from frontend/ by gradstep.export. Each source
// becomes a Blob URL once the Blob URLs of what it imports are substituted for their placeholders.
// Files a module refers to by URL (the layout worker, the stylesheet) become data: URLs, with
// what they import as data: URLs too: from file:// Chromium starts module workers only from those.
const SOURCES = %(sources)s;
const PLACE = /(["'])@@gradstep-(module|asset):([^"']+)\\1/g;
const byName = new Map(SOURCES.map((s) => [s[0], s]));
const urls = new Map();
const dataUrls = new Map();
function base64(text) {
  const bytes = new TextEncoder().encode(text);
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}
function dataUrl(name) {
  if (!dataUrls.has(name)) {
    const [, mime, text] = byName.get(name);
    const code = text.replace(PLACE, (_, q, kind, dep) => JSON.stringify(dataUrl(dep)));
    dataUrls.set(name, `data:${mime};base64,${base64(code)}`);
  }
  return dataUrls.get(name);
}
for (const [name, mime, text] of SOURCES) {
  const code = text.replace(PLACE, (_, q, kind, dep) => JSON.stringify(kind === "asset" ? dataUrl(dep) : urls.get(dep)));
  urls.set(name, URL.createObjectURL(new Blob([code], { type: mime })));
}
const entry = await import(urls.get(%(entry)s));
export const render = entry.render;
%(default)s
"""

_DEFAULT = "export default entry.default ?? { render };"

# A widget module with its own trace: model keys the host leaves unset (a MyST {anywidget} body
# of just {"step": 2}) read as these defaults.
_WIDGET_DEFAULTS = """const DEFAULTS = %(defaults)s;
const unset = (v) => v === undefined || v === null || v === "";
export default {
  render({ model, el }) {
    const view = {
      get: (k) => (unset(model.get(k)) ? DEFAULTS[k] : model.get(k)),
      set: (k, v) => model.set(k, v),
      on: (ev, f) => model.on(ev, f),
      off: (ev, f) => model.off && model.off(ev, f),
      save_changes: () => model.save_changes && model.save_changes(),
    };
    return entry.default.render({ model: view, el });
  },
};"""


def bundle(
    entry: str = "embed.js",
    *,
    extra: tuple[str, ...] = (),
    folder: Path | None = None,
    stub: tuple[str, ...] = (),
) -> str:
    """One ES module (a string) re-exporting `render` (and the default export) of `entry`, with
    everything it needs inlined: what anywidget loads, and the heart of the static page.

    Kept until one of its files changes (~25 ms to make, each notebook output and export needs it)."""
    folder = folder or frontend_folder()
    key = (entry, extra, str(folder), stub)
    kept = _BUNDLES.get(key)
    if kept is not None and kept[0] == _signature(folder, kept[1]):
        return kept[2]
    modules = collect([entry, *extra], folder, stub)
    sources = [[m.name, m.mime, m.source] for m in modules]
    text = _LOADER % {"sources": _js_string(sources), "entry": _js_string(entry), "default": _DEFAULT}
    names = tuple(m.name for m in modules)
    _BUNDLES[key] = (_signature(folder, names), names, text)
    return text


_BUNDLES: dict[tuple, tuple[tuple, tuple[str, ...], str]] = {}  # key -> (signature, files, bundle)


def _signature(folder: Path, names: tuple[str, ...]) -> tuple:
    """What tells a file changed: its modification time and size (a missing file: None)."""
    out = []
    for name in names:
        try:
            st = (folder / name).stat()
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


def export_widget(
    trace: Trace | dict, *, step: int = 0, theme: str = "auto", folder: Path | None = None
) -> str:
    """The anywidget module (frontend/widget.js, inlined) carrying `trace`: one file a MyST or
    Jupyter Book page shows with ```{anywidget} ./file.mjs``` (its JSON body may set "step", "theme")."""
    check_options(step, theme)
    data = trace_json(trace)
    sources = [[m.name, m.mime, m.source] for m in collect(["widget.js"], folder)]
    defaults = {"trace": data, "step": clamp_step(data, step), "theme": theme}
    default = _WIDGET_DEFAULTS % {"defaults": _js_string(defaults)}
    return _LOADER % {"sources": _js_string(sources), "entry": _js_string("widget.js"), "default": default}


# For pages that show exports in iframes (notebook outputs, Sphinx pages): each iframe.gradstep-frame
# without a fixed height takes the height its page reports ({context: "iframe.resize"}), so nothing
# scrolls inside it; and each frame is told the host page's own light or dark theme
# ({type: "gradstep:theme"}), which a page exported with theme "auto" follows. The theme is read
# as frontend/widget.js hostTheme reads it (JupyterLab, VS Code, a "dark" class or data-theme).
FRAME_RESIZER_JS = """\
(() => {
  if (window.gradstepFrameResizer) return;
  window.gradstepFrameResizer = true;
  const hostTheme = () => {
    const b = document.body, r = document.documentElement;
    if (b && b.dataset.jpThemeLight) return b.dataset.jpThemeLight === "true" ? "light" : "dark";
    if (b && b.classList.contains("vscode-dark")) return "dark";
    if (b && b.classList.contains("vscode-light")) return "light";
    for (const n of [r, b]) {
      if (!n) continue;
      const t = n.dataset.theme || n.dataset.colorScheme || n.dataset.mode;
      if (t === "dark" || t === "light") return t;
      if (n.classList.contains("dark") || n.classList.contains("dark-theme")) return "dark";
    }
    return null;
  };
  const frames = () => document.querySelectorAll("iframe.gradstep-frame");
  const tell = (win) => { const t = hostTheme(); if (t && win) win.postMessage({ type: "gradstep:theme", theme: t }, "*"); };
  window.addEventListener("message", (ev) => {
    const d = ev.data;
    if (!d) return;
    for (const f of frames()) {
      if (f.contentWindow !== ev.source) continue;
      if (d.type === "gradstep:ready") tell(f.contentWindow);
      if (d.context === "iframe.resize" && d.height > 0 && !f.hasAttribute("data-fixed-height")) {
        f.style.height = `${Math.min(Math.ceil(d.height), 4000)}px`;
      }
    }
  });
  const watch = new MutationObserver(() => { for (const f of frames()) tell(f.contentWindow); });
  const attributeFilter = ["class", "data-theme", "data-jp-theme-light", "data-color-scheme", "data-mode"];
  watch.observe(document.documentElement, { attributes: true, attributeFilter });
  if (document.body) watch.observe(document.body, { attributes: true, attributeFilter });
})();"""


def check_options(step: int, theme: str) -> None:
    if theme not in THEMES:
        raise ExportError(f"theme must be one of {', '.join(THEMES)}, not {theme!r}")
    if isinstance(step, bool) or not isinstance(step, int):
        raise ExportError(f"step must be a whole number, not {step!r}")


def clamp_step(trace: dict, step: int) -> int:
    """Steps count from 0; a step out of range shows the nearest one."""
    return max(0, min(step, len(trace.get("steps") or ()) - 1))


def trace_json(trace: Trace | dict) -> dict:
    """The trace as the page reads it: version 4's columns, from a typed trace, the tracer's rows or
    a trace already packed."""
    return trace.model_dump(mode="json") if isinstance(trace, Trace) else wire_of(trace)


def fixes_json(trace: dict, fixes: Mapping[str, Trace | dict] | None) -> dict[str, dict]:
    """The runs of `trace`'s fixes a page ships for Apply fix (by the fix's code), as the page reads
    them: only those of fixes the trace offers, up to MAX_FIX_TRACES_BYTES in all."""
    import orjson

    out: dict[str, dict] = {}
    if not fixes:
        return out
    total = 0
    for d in trace.get("diagnoses") or ():
        for f in d.get("fixes") or ():
            code = f.get("code")
            if code in out or code not in fixes:
                continue
            data = trace_json(fixes[code])
            total += len(orjson.dumps(data))
            if total > MAX_FIX_TRACES_BYTES:
                return out
            out[code] = data
    return out


MAX_FIX_TRACES_BYTES = 4 << 20  # a fix's run the size of a large model's is left to a server


def export_html(
    trace: Trace | dict,
    *,
    step: int = 0,
    theme: str = "auto",
    title: str | None = None,
    folder: Path | None = None,
    fixes: Mapping[str, Trace | dict] | None = None,
) -> str:
    """The self-contained page for `trace`, opening at `step` (clamped) in `theme`. `fixes` (a fix's
    code -> the trace of its run) are shipped in the page: Apply fix shows them with no server."""
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    check_options(step, theme)
    data = trace_json(trace)
    folder = folder or frontend_folder()
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(["html"]))
    # the stylesheet is inlined in the page, once
    module = bundle("embed.js", folder=folder, stub=("style.css",)) + "\n" + _MAIN.read_text(encoding="utf-8")
    return env.get_template("export.html").render(
        title=title or "gradstep",
        theme=theme,
        css=(folder / "style.css").read_text(encoding="utf-8").replace("</", "<\\/"),
        trace_json=_js_string(data),
        fixes_json=_js_string(fixes_json(data, fixes)),
        options_json=_js_string({"step": clamp_step(data, step), "theme": theme}),
        module=module,
        policy=page_policy(module),
    )


def page_policy(module: str) -> str:
    """The page's own Content-Security-Policy (a <meta>): its one inline module, by hash, and the
    Blob and data: URLs that module makes of the front end's sources; no network, no other script."""
    digest = base64.b64encode(hashlib.sha256(module.encode("utf-8")).digest()).decode()
    return (
        f"default-src 'none'; script-src 'sha256-{digest}' blob: data:; worker-src blob: data:; "
        "style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
    )


def export_json(trace: Trace | dict) -> bytes:
    import orjson

    return orjson.dumps(trace_json(trace))


def write_export(
    run: Callable[[], bytes],
    *,
    output: str,
    fmt: str = "html",
    step: int = 0,
    theme: str = "auto",
    title: str | None = None,
) -> int:
    """`gradstep export`: check the options, run the snippet (`run` returns its trace JSON), write it.

    Options are checked before the run (a misuse costs nothing); the snippet's own failure is in
    the trace (the page shows it), so it still exports. Returns the exit code.
    """
    import orjson

    if fmt not in FORMATS:
        raise ExportError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    check_options(step, theme)
    target = None if output == "-" else Path(output)
    if target is not None and not target.parent.is_dir():
        raise ExportError(f"cannot write {target}: folder {target.parent} does not exist")
    if fmt != "json":
        frontend_folder()  # before the run: a missing front end is a misuse, not a snippet error
    data = orjson.loads(run())
    if fmt == "json":
        body = export_json(data) + b"\n"
    elif fmt == "widget":
        body = export_widget(data, step=step, theme=theme).encode()
    else:
        body = export_html(data, step=step, theme=theme, title=title).encode()
    if target is None:
        sys.stdout.buffer.write(body)
        return 0
    try:
        target.write_bytes(body)
    except OSError as e:
        raise ExportError(f"cannot write {target}: {e.strerror or e}") from e
    steps = len(data.get("steps") or ())
    print(
        f"gradstep: wrote {target} ({len(body) / 1024:.0f} KB, {steps} steps, status {data.get('status')})",
        file=sys.stderr,
    )
    return 0
