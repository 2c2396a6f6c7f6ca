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
import contextlib
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
    trace: Trace | dict,
    *,
    step: int = 0,
    theme: str = "auto",
    folder: Path | None = None,
    fixes: Mapping[str, Trace | dict] | None = None,
) -> str:
    """The anywidget module (frontend/widget.js, inlined) carrying `trace` (and its `fixes`' runs): one
    file a MyST or Jupyter Book page shows with ```{anywidget} ./file.mjs``` (its JSON body may set
    "step", "theme")."""
    check_options(step, theme)
    data = trace_json(trace)
    sources = [[m.name, m.mime, m.source] for m in collect(["widget.js"], folder)]
    defaults = {"trace": data, "step": clamp_step(data, step), "theme": theme}
    if fixes:
        defaults["fixes"] = fixes_json(data, fixes)
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


# Pages that share one copy of the front end (`gradstep export --shared-library`): the library's two
# files, next to the pages. The script is a classic one (a module is refused from file://), which
# hands the page's inline loader the sources it would otherwise carry.
LIBRARY_JS = "gradstep.js"
LIBRARY_CSS = "gradstep.css"
_SHARED_SOURCES = (
    "globalThis.gradstepSources ?? (() => { const m = 'gradstep could not show this trace: its front end, "
    + LIBRARY_JS
    + ", did not load (keep it next to this page)'; document.getElementById('gradstep').textContent = m;"
    " throw new Error(m); })()"
)


def library_files(folder: Path | None = None) -> dict[str, str]:
    """The files pages made with `library=` refer to: {file name: text}."""
    folder = folder or frontend_folder()
    sources = [[m.name, m.mime, m.source] for m in collect(["embed.js"], folder, stub=("style.css",))]
    js = (
        "// gradstep: the front end's modules for the pages exported next to this file"
        " (gradstep export --shared-library).\n"
        f"globalThis.gradstepSources = {_js_string(sources)};\n"
    )
    return {LIBRARY_JS: js, LIBRARY_CSS: (folder / "style.css").read_text(encoding="utf-8")}


def export_html(
    trace: Trace | dict,
    *,
    step: int = 0,
    theme: str = "auto",
    title: str | None = None,
    folder: Path | None = None,
    fixes: Mapping[str, Trace | dict] | None = None,
    library: str | None = None,
) -> str:
    """The self-contained page for `trace`, opening at `step` (clamped) in `theme`. `fixes` (a fix's
    code -> the trace of its run) are shipped in the page: Apply fix shows them with no server.
    `library`: a URL prefix ("" for the page's own folder) where the page finds library_files()
    instead of carrying the front end itself."""
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    check_options(step, theme)
    data = trace_json(trace)
    folder = folder or frontend_folder()
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(["html"]))
    if library is None:  # the stylesheet is inlined in the page, once
        loader = bundle("embed.js", folder=folder, stub=("style.css",))
    else:
        loader = _LOADER % {"sources": _SHARED_SOURCES, "entry": _js_string("embed.js"), "default": _DEFAULT}
    module = loader + "\n" + _MAIN.read_text(encoding="utf-8")
    return env.get_template("export.html").render(
        title=title or "gradstep",
        theme=theme,
        css=None
        if library is not None
        else (folder / "style.css").read_text(encoding="utf-8").replace("</", "<\\/"),
        library=None if library is None else {"js": library + LIBRARY_JS, "css": library + LIBRARY_CSS},
        trace_json=_js_string(data),
        fixes_json=_js_string(fixes_json(data, fixes)),
        options_json=_js_string({"step": clamp_step(data, step), "theme": theme}),
        module=module,
        policy=page_policy(module, shared=library is not None),
    )


def page_policy(module: str, shared: bool = False) -> str:
    """The page's own Content-Security-Policy (a <meta>): its one inline module, by hash, and the
    Blob and data: URLs that module makes of the front end's sources; no network, no other script.
    `shared`: the library's two files too, from the page's own site (or disk)."""
    digest = base64.b64encode(hashlib.sha256(module.encode("utf-8")).digest()).decode()
    own = " 'self' file:" if shared else ""
    return (
        f"default-src 'none'; script-src 'sha256-{digest}' blob: data:{own}; worker-src blob: data:; "
        f"style-src 'unsafe-inline'{own}; img-src data:; base-uri 'none'; form-action 'none'"
    )


def export_json(trace: Trace | dict) -> bytes:
    import orjson

    return orjson.dumps(trace_json(trace))


_EXTENSIONS = {"html": ".html", "json": ".json", "widget": ".mjs"}

Ran = bytes | tuple[bytes, Mapping[str, bytes]]  # a trace's JSON, or it and its fixes' runs by code


def _split(ran: Ran) -> tuple[dict, dict[str, dict]]:
    import orjson

    body, fixes = ran if isinstance(ran, tuple) else (ran, {})
    return orjson.loads(body), {code: orjson.loads(t) for code, t in fixes.items()}


def _render(
    data: dict, fixes: dict, fmt: str, step: int, theme: str, title: str | None, library=None
) -> bytes:
    if fmt == "json":
        return export_json(data) + b"\n"
    if fmt == "widget":
        return export_widget(data, step=step, theme=theme, fixes=fixes).encode()
    return export_html(data, step=step, theme=theme, title=title, fixes=fixes, library=library).encode()


def _check_format(fmt: str, step: int, theme: str) -> None:
    if fmt not in FORMATS:
        raise ExportError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    check_options(step, theme)
    if fmt != "json":
        frontend_folder()  # before the run: a missing front end is a misuse, not a snippet error


def _write(target: Path, body: bytes) -> None:
    try:
        target.write_bytes(body)
    except OSError as e:
        raise ExportError(f"cannot write {target}: {e.strerror or e}") from e


def write_export(
    run: Callable[[], Ran],
    *,
    output: str,
    fmt: str = "html",
    step: int = 0,
    theme: str = "auto",
    title: str | None = None,
) -> int:
    """`gradstep export`: check the options, run the snippet (`run` returns its trace JSON, or it
    and the runs of its fixes), write it.

    Options are checked before the run (a misuse costs nothing); the snippet's own failure is in
    the trace (the page shows it), so it still exports. Returns the exit code.
    """
    _check_format(fmt, step, theme)
    target = None if output == "-" else Path(output)
    if target is not None and not target.parent.is_dir():
        raise ExportError(f"cannot write {target}: folder {target.parent} does not exist")
    data, fixes = _split(run())
    body = _render(data, fixes, fmt, step, theme, title)
    if target is None:
        sys.stdout.buffer.write(body)
        return 0
    _write(target, body)
    _wrote(target, body, data)
    return 0


def _wrote(target: Path, body: bytes, data: dict) -> None:
    steps = len(data.get("steps") or ())
    print(
        f"gradstep: wrote {target} ({len(body) / 1024:.0f} KB, {steps} steps, status {data.get('status')})",
        file=sys.stderr,
    )


def write_exports(
    run: Callable[[int, Path, str], Ran],
    snippets: list[tuple[Path, str, str | None]],
    *,
    output: str,
    fmt: str = "html",
    step: int = 0,
    theme: str = "auto",
    shared: bool = False,
    start: contextlib.AbstractContextManager | None = None,
) -> int:
    """`gradstep export` of several snippets ((file, code, title) each) into the folder `output`, one
    page each named after its file; `run(i, file, code)` runs the i-th (from 1) inside `start` (the
    sandbox, started once for all). `shared`: the front end is written once beside the pages
    (library_files) instead of into each. Returns the exit code."""
    _check_format(fmt, step, theme)
    if shared and fmt != "html":
        raise ExportError("--shared-library is for html pages")
    folder = Path(output)
    if folder.exists() and not folder.is_dir():
        raise ExportError(f"cannot write several pages into {folder}: it is a file, not a folder")
    if not folder.parent.is_dir():
        raise ExportError(f"cannot write into {folder}: folder {folder.parent} does not exist")
    names = [f.with_suffix(_EXTENSIONS[fmt]).name for f, _, _ in snippets]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise ExportError(f"two snippets would write the same page: {', '.join(clash)}")
    folder.mkdir(exist_ok=True)
    total = 0
    with start or contextlib.nullcontext():
        for i, ((path, code, title), name) in enumerate(zip(snippets, names, strict=True), 1):
            data, fixes = _split(run(i, path, code))
            body = _render(data, fixes, fmt, step, theme, title, library="" if shared else None)
            _write(folder / name, body)
            _wrote(folder / name, body, data)
            total += len(body)
    if shared:
        for name, text in library_files().items():
            _write(folder / name, text.encode())
            total += len(text.encode())
            print(
                f"gradstep: wrote {folder / name} ({len(text.encode()) / 1024:.0f} KB, shared)",
                file=sys.stderr,
            )
    print(f"gradstep: {len(snippets)} pages in {folder} ({total / 1024:.0f} KB in all)", file=sys.stderr)
    return 0
