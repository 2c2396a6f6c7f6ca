"""Static export: one self-contained HTML page (trace, JavaScript, CSS inlined) that replays the
stepper from ``file://`` or any static host, with no server and no network request.

The front end is plain ES modules importing each other by relative URLs (``./viewer.js``), which a
single file cannot serve. Instead of a committed bundle that every front-end edit would make stale,
the modules are inlined here, from the sources, at export time: starting from an entry module we
follow its static relative imports (and ``new URL("./x", import.meta.url)`` files such as the
layout worker) and turn each module into a function that returns its exports, its imports into
calls of the module functions it imports (each run once, on first use, as ES modules run), so the
whole front end is one script. The page's Content-Security-Policy then allows that one inline
script, by its hash, and nothing else: no Blob or data: URL runs as a script of the page, so markup
that found its way into the page cannot run either.

The layout worker is the one script started from a Blob URL (``worker-src blob:``): its modules'
functions, written out from the page's own (``Function.prototype.toString``), as a classic worker
(from ``file://`` Chromium starts no module worker from a Blob URL).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import os
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

# Module syntax, as our modules write it: top-level statements at the start of a line (comments
# quoting an import are indented or prefixed), and esbuild's one `export{a as b,…};` clause, at the
# end of a vendored bundle, after a `;` or `}`.
_SPEC = r"""(?P<q>["'])(?P<spec>\.\.?/[^"'\n]+)(?P=q)"""
_IMPORT_FROM = re.compile(r"(?m)^import\s*(?P<what>[^;\"'`]*?)\s*from\s*" + _SPEC + r"[ \t]*;?")
_IMPORT_BARE = re.compile(r"(?m)^import\s*" + _SPEC + r"[ \t]*;?")
_EXPORT_FROM = re.compile(r"(?m)^export\s*(?P<what>\{[^}]*\}|\*[^;\"'`]*?)\s*from\s*" + _SPEC + r"[ \t]*;?")
_EXPORT_LIST = re.compile(r"(?m)(?:^|(?<=[;}]))export\s*\{(?P<list>[^}]*)\}[ \t]*;?")
_EXPORT_DECL = re.compile(
    r"(?m)^export\s+(?P<kind>(?:async\s+)?function\s*\*?|class|const|let|var)\s*(?P<name>[\w$]+)?"
)
_EXPORT_DEFAULT = re.compile(
    r"(?m)^export\s+default\s+(?:(?P<decl>(?:async\s+)?function\s*\*?|class)\s*(?P<name>[\w$]+)?)?"
)
_DYNAMIC_IMPORT = re.compile(r"""\bimport\(\s*(["'])(\.\.?/[^"'\n]+)\1\s*\)""")
_ASSET_URL = re.compile(r"""new URL\(\s*(["'])(\.\.?/[^"'\n]+)\1\s*,\s*import\.meta\.url\s*\)""")
# What is left of module syntax after the rewriting: a form it does not know.
_LEFTOVER = re.compile(
    r"""(?m)^[ \t]*(?:export\b(?!\s*\()|import\s*(?:[\w$*{][^;\n]*?\bfrom\s*["']|["']))"""
    r"""|[;}]export\s*[{*]|\bimport\s*\.\s*meta\b"""
)
_TOP_LEVEL_AWAIT = re.compile(r"(?m)^(?:(?:const|let|var)\s[^\n=]*=\s*|for\s+)?await\b")
_REQUIRE = "__gsRequire"  # the parameter of every module's function: runs a module, returns its exports
_ASSET = "__gsAsset"  # the URL of a file a module refers to by URL
_MIME = {".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css", ".json": "application/json"}


class ExportError(ValueError):
    """A misuse of the exporter (bad option, missing front end), with a message meant for a person."""


@dataclass(frozen=True)
class Module:
    name: str  # path relative to the front end folder, e.g. "vendor/d3.js"
    source: str  # a script: the body of its module's function (returns its exports); else the file
    mime: str
    deps: tuple[str, ...]  # what it imports or refers to by URL, in order
    urls: tuple[str, ...] = ()  # what it refers to by URL (a worker, a stylesheet)


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


def _names(clause: str, name: str) -> list[tuple[str, str]]:
    """`a, b as c` (an import's or export's braces) as [(a, a), (b, c)]."""
    out = []
    for item in re.sub(r"/\*.*?\*/|//[^\n]*", "", clause, flags=re.S).split(","):
        words = item.split()
        if not words:
            continue
        if len(words) == 1:
            out.append((words[0], words[0]))
        elif len(words) == 3 and words[1] == "as":
            out.append((words[0], words[2]))
        else:
            raise ExportError(f"{name}: cannot inline the module syntax {{{clause.strip()}}}")
    return out


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _rewrite(name: str, text: str) -> tuple[str, list[str], list[str]]:
    """Module `name` as the body of a function of `__gsRequire` that runs it and returns its exports:
    (body, what it imports or refers to by URL, what it refers to by URL)."""
    deps: list[str] = []
    urls: list[str] = []
    exports: list[tuple[str, str]] = []  # (exported name, JavaScript expression)
    temps = iter(range(1 << 30))

    def require(spec: str) -> str:
        target = _resolve(name, spec)
        deps.append(target)
        return f"{_REQUIRE}({_js_string(target)})"

    def asset(m: re.Match) -> str:
        target = _resolve(name, m.group(2))
        deps.append(target)
        urls.append(target)
        return f"{_ASSET}({_js_string(target)})"

    def import_from(m: re.Match) -> str:
        what, module = m["what"].strip(), require(m["spec"])
        default, _, rest = what.partition(",") if not what.startswith(("{", "*")) else ("", "", what)
        default, rest = default.strip(), rest.strip()
        out = []
        if rest.startswith("*"):
            ns = re.fullmatch(r"\*\s*as\s+([\w$]+)", rest)
            if not ns:
                raise ExportError(f"{name}, line {_line(text, m.start())}: cannot inline {m[0]!r}")
            out.append(f"const {ns[1]} = {module};")
            module = ns[1]
        elif rest.startswith("{") and rest.endswith("}"):
            pairs = ", ".join(f"{_js_string(a)}: {b}" for a, b in _names(rest[1:-1], name))
            out.append(f"const {{ {pairs} }} = {module};")
        elif rest:
            raise ExportError(f"{name}, line {_line(text, m.start())}: cannot inline {m[0]!r}")
        if default:
            if not re.fullmatch(r"[\w$]+", default):
                raise ExportError(f"{name}, line {_line(text, m.start())}: cannot inline {m[0]!r}")
            out.append(f"const {default} = {module}.default;")
        return " ".join(out)

    def export_from(m: re.Match) -> str:
        what = m["what"].strip()
        if not what.startswith("{"):
            raise ExportError(
                f"{name}, line {_line(text, m.start())}: cannot inline {m[0]!r} (name the exports)"
            )
        temp = f"__gsReexport{next(temps)}"
        exports.extend((b, f"{temp}[{_js_string(a)}]") for a, b in _names(what[1:-1], name))
        return f"const {temp} = {require(m['spec'])};"

    def export_list(m: re.Match) -> str:
        exports.extend((b, a) for a, b in _names(m["list"], name))
        return ""

    def export_default(m: re.Match) -> str:
        if m["decl"] and m["name"]:  # `export default function f() {}`: f is declared, and hoisted
            exports.append(("default", m["name"]))
            return m["decl"].strip() + " " + m["name"]
        exports.append(("default", "__gsDefault"))
        return "const __gsDefault = " + (m["decl"] or "").strip() + (" " if m["decl"] else "")

    def export_decl(m: re.Match) -> str:
        if not m["name"] or m["kind"] in ("let", "var"):  # an importer would not see it change
            raise ExportError(
                f"{name}, line {_line(text, m.start())}: cannot inline {m[0]!r} (export a const, by name)"
            )
        exports.append((m["name"], m["name"]))
        return m["kind"].strip() + " " + m["name"]

    def same_lines(f: Callable[[re.Match], str]) -> Callable[[re.Match], str]:
        # a statement over several lines keeps them: a line in the page is the line in its file
        return lambda m: f(m) + "\n" * m[0].count("\n")

    text = _ASSET_URL.sub(asset, text)
    text = _DYNAMIC_IMPORT.sub(lambda m: f"Promise.resolve().then(() => {require(m.group(2))})", text)
    text = _IMPORT_FROM.sub(same_lines(import_from), text)
    text = _IMPORT_BARE.sub(lambda m: require(m["spec"]) + ";", text)
    text = _EXPORT_FROM.sub(same_lines(export_from), text)
    text = _EXPORT_DEFAULT.sub(export_default, text)
    text = _EXPORT_DECL.sub(export_decl, text)
    text = _EXPORT_LIST.sub(same_lines(export_list), text)
    for pattern, what in (
        (_LEFTOVER, "module syntax it does not know"),
        (_TOP_LEVEL_AWAIT, "a top-level await"),
    ):
        left = pattern.search(text)
        if left:
            raise ExportError(
                f"cannot inline {name}: line {_line(text, left.start())} holds {what}: {left[0].strip()!r}"
            )
    returned = ", ".join(f"{_js_string(k)}: {v}" for k, v in exports)
    return f"{text}\nreturn Object.freeze({{ __proto__: null, {returned} }});", deps, urls


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
        urls: list[str] = []
        if mime == "text/javascript":
            text, deps, urls = _rewrite(name, text)
        visiting.append(name)
        for d in deps:
            visit(d)
        visiting.pop()
        modules[name] = Module(name, text, mime, tuple(dict.fromkeys(deps)), tuple(dict.fromkeys(urls)))
        order.append(modules[name])

    for e in entries:
        visit(e)
    return order


def _js_string(value) -> str:
    """JSON as a JavaScript literal that is also safe inside an HTML <script> element."""
    import orjson

    text = orjson.dumps(value).decode()
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# The front end as one JavaScript expression: its exports (those of `entry`).
_BUNDLE = """\
(() => {
"use strict";
// gradstep: the front end's ES modules, inlined from frontend/ by gradstep.export. Each is a
// function that runs it and returns its exports, run once, when something imports it (as ES
// modules run): one script, which the page's Content-Security-Policy allows by its hash.
const factories = new Map();
%(factories)s
const done = new Map();
function requireModule(name) {
  if (!done.has(name)) done.set(name, factories.get(name)(requireModule));
  return done.get(name);
}
// Files a module refers to by URL. A script (the layout worker) starts from a Blob URL of its
// modules' functions, as they are written here, as a classic worker: from file:// Chromium starts
// no module worker from a Blob URL. Another file (a stylesheet) is a data: URL, fetched not run.
const WORKERS = %(workers)s;
const FILES = %(files)s;
const fileUrls = new Map();
function __gsAsset(name) {
  if (!fileUrls.has(name)) {
    let url;
    if (Object.hasOwn(WORKERS, name)) {
      const code = ['"use strict";\\nconst factories = new Map();\\n'];
      for (const m of WORKERS[name]) code.push(`factories.set(${JSON.stringify(m)}, ${factories.get(m)});\\n`);
      code.push(`const done = new Map();\\n${requireModule}\\nrequireModule(${JSON.stringify(name)});\\n`);
      url = URL.createObjectURL(new Blob(code, { type: "text/javascript" }));
    } else {
      const [mime, text] = FILES[name];
      url = `data:${mime};charset=utf-8,${encodeURIComponent(text)}`;
    }
    fileUrls.set(name, url);
  }
  return new URL(fileUrls.get(name));
}
return requireModule(%(entry)s);
})()"""


def _worker_modules(modules: dict[str, Module], script: str) -> list[str]:
    """The modules a script referred to by URL runs (itself last), each after what it imports."""
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        m = modules[name]
        if m.urls:
            raise ExportError(f"cannot inline {script}: {name} refers to {m.urls[0]} by URL, in a worker")
        for d in m.deps:
            visit(d)
        order.append(name)

    visit(script)
    return order


def front_end(entry: str, folder: Path | None = None, stub: tuple[str, ...] = ()) -> str:
    """The front end from `entry` as one JavaScript expression (its value: `entry`'s exports), safe
    inside an HTML <script> element, which a page or a classic script runs with no other URL.

    Kept until one of its files changes (each notebook output and export needs it)."""
    folder = folder or frontend_folder()
    key = (entry, str(folder), stub)
    kept = _KEPT.get(key)
    if kept is not None and kept[0] == _signature(folder, kept[1]):
        return kept[2]
    modules = collect([entry], folder, stub)
    by_name = {m.name: m for m in modules}
    scripts = [m for m in modules if m.mime == "text/javascript"]
    factories = "".join(
        f"factories.set({_js_string(m.name)}, function ({_REQUIRE}) {{\n{m.source}\n}});\n" for m in scripts
    )
    referred = dict.fromkeys(u for m in modules for u in m.urls)
    workers = {u: _worker_modules(by_name, u) for u in referred if by_name[u].mime == "text/javascript"}
    files = {u: [by_name[u].mime, by_name[u].source] for u in referred if u not in workers}
    text = _BUNDLE % {
        "factories": factories,
        "workers": _js_string(workers),
        "files": _js_string(files),
        "entry": _js_string(entry),
    }
    for bad in ("</script", "<!--"):  # would end the page's <script> element early, or keep it open
        if bad in text.lower():
            where = next((m.name for m in scripts if bad in m.source.lower()), "the front end")
            raise ExportError(
                f"cannot inline {where} in a page: it holds {bad!r} (in a string, write it {bad[0]}\\{bad[1:]})"
            )
    text = text.replace("\r\n", "\n").replace("\r", "\n")  # as a page's parser reads it (its hash)
    names = tuple(m.name for m in modules)
    _KEPT[key] = (_signature(folder, names), names, text)
    return text


_KEPT: dict[tuple, tuple[tuple, tuple[str, ...], str]] = {}  # key -> (signature, files, front end)


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


# One ES module: the front end, `render` (and the default export) of its entry.
_MODULE = """\
const entry = %(entry)s;
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


def bundle(entry: str = "embed.js", *, folder: Path | None = None, stub: tuple[str, ...] = ()) -> str:
    """One ES module (a string) re-exporting `render` (and the default export) of `entry`, with
    everything it needs inlined: what anywidget loads, and the heart of the static page."""
    return _MODULE % {"entry": front_end(entry, folder, stub), "default": _DEFAULT}


def export_widget(
    trace: Trace | dict,
    *,
    step: int = 0,
    theme: str = "auto",
    folder: Path | None = None,
    fixes: Mapping[str, Trace | dict] | None = None,
    predict: str | bool | None = None,
) -> str:
    """The anywidget module (frontend/widget.js, inlined) carrying `trace` (and its `fixes`' runs): one
    file a MyST or Jupyter Book page shows with ```{anywidget} ./file.mjs``` (its JSON body may set
    "step", "theme", "predict"). `predict`: the exercise's questions (predict_option)."""
    check_options(step, theme)
    data = trace_json(trace)
    defaults = {"trace": data, **page_options(data, step, theme, predict_option(predict))}
    if fixes:
        defaults["fixes"] = fixes_json(data, fixes)
    default = _WIDGET_DEFAULTS % {"defaults": _js_string(defaults)}
    return _MODULE % {"entry": front_end("widget.js", folder), "default": default}


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


MAX_PREDICT = 500  # characters of an exercise spec: a few questions, not a document


def predict_option(value: str | bool | None) -> str | None:
    """The exercise ("predict") option as pages carry it: None (off), "code" (only the questions the
    snippet's ``# predict:`` comments ask) or a spec such as ``"x.grad, freed, error@12"``. The spec's
    grammar is read by the page (frontend/exercise-spec.js), which shows a spec it cannot read as a
    message; here only what cannot be one is refused. True means "code"; False, None and "" are off."""
    if value is None or value is False:
        return None
    if value is True:
        return "code"
    if not isinstance(value, str):
        raise ExportError(
            f"predict must be a string (questions such as 'x.grad, freed, error', or 'code'), True or"
            f" False, not {type(value).__name__}"
        )
    spec = value.strip()
    if "\n" in spec or "\r" in spec:
        raise ExportError("predict must be one line (questions separated by commas), not several")
    if len(spec) > MAX_PREDICT:
        raise ExportError(f"predict must be at most {MAX_PREDICT} characters, not {len(spec)}")
    return spec or None


def page_options(data: dict, step: int, theme: str, predict: str | None) -> dict:
    """What a page's render call is given besides its trace (predict only when the exercise is on)."""
    options: dict = {"step": clamp_step(data, step), "theme": theme}
    if predict is not None:
        options["predict"] = predict
    return options


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
# files, next to the pages. The script is a classic one (a module is refused from file://): it runs
# the front end and hands the page's inline module its exports.
LIBRARY_JS = "gradstep.js"
LIBRARY_CSS = "gradstep.css"
_SHARED_FRONT_END = (
    "globalThis.gradstepFrontEnd ?? (() => { const m = 'gradstep could not show this trace: its front end, "
    + LIBRARY_JS
    + ", did not load (keep it next to this page)'; document.getElementById('gradstep').textContent = m;"
    " throw new Error(m); })()"
)


def library_files(folder: Path | None = None) -> dict[str, str]:
    """The files pages made with `library=` refer to: {file name: text}."""
    folder = folder or frontend_folder()
    js = (
        "// gradstep: the front end for the pages exported next to this file (gradstep export --shared-library).\n"
        f"globalThis.gradstepFrontEnd = {front_end('embed.js', folder, stub=('style.css',))};\n"
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
    predict: str | bool | None = None,
) -> str:
    """The self-contained page for `trace`, opening at `step` (clamped) in `theme`. `fixes` (a fix's
    code -> the trace of its run) are shipped in the page: Apply fix shows them with no server.
    `library`: a URL prefix ("" for the page's own folder) where the page finds library_files()
    instead of carrying the front end itself. `predict`: the page is an exercise asking these
    questions (predict_option); it is data, in the page's options, not in its script (whose hash
    the page's policy allows)."""
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    check_options(step, theme)
    predict = predict_option(predict)
    data = trace_json(trace)
    folder = folder or frontend_folder()
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(["html"]))
    if library is None:  # the stylesheet is inlined in the page, once
        loader = bundle("embed.js", folder=folder, stub=("style.css",))
    else:
        loader = _MODULE % {"entry": _SHARED_FRONT_END, "default": _DEFAULT}
    main = _MAIN.read_text(encoding="utf-8").replace("\r\n", "\n").replace("\r", "\n")
    module = loader + "\n" + main
    return env.get_template("export.html").render(
        title=title or "gradstep",
        theme=theme,
        css=None
        if library is not None
        else (folder / "style.css").read_text(encoding="utf-8").replace("</", "<\\/"),
        library=None if library is None else {"js": library + LIBRARY_JS, "css": library + LIBRARY_CSS},
        trace_json=_js_string(data),
        fixes_json=_js_string(fixes_json(data, fixes)),
        options_json=_js_string(page_options(data, step, theme, predict)),
        module=module,
        policy=page_policy(module, shared=library is not None),
    )


def page_policy(module: str, shared: bool = False) -> str:
    """The page's own Content-Security-Policy (a <meta>): its one inline module, by hash, and nothing
    else runs (no Blob or data: URL, no inline script or handler injected into the page, no eval);
    the layout worker from a Blob URL; no network. `shared`: the library's two files too, from the
    page's own site (or disk)."""
    digest = base64.b64encode(hashlib.sha256(module.encode("utf-8")).digest()).decode()
    own = " 'self' file:" if shared else ""
    return (
        f"default-src 'none'; script-src 'sha256-{digest}'{own}; worker-src blob:; "
        f"style-src 'unsafe-inline'{own}; img-src data:; object-src 'none'; base-uri 'none'; "
        "form-action 'none'"
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
    data: dict,
    fixes: dict,
    fmt: str,
    step: int,
    theme: str,
    title: str | None,
    library=None,
    predict: str | None = None,
) -> bytes:
    if fmt == "json":
        return export_json(data) + b"\n"
    if fmt == "widget":
        return export_widget(data, step=step, theme=theme, fixes=fixes, predict=predict).encode()
    return export_html(
        data, step=step, theme=theme, title=title, fixes=fixes, library=library, predict=predict
    ).encode()


def _check_format(fmt: str, step: int, theme: str, predict: str | bool | None = None) -> None:
    if fmt not in FORMATS:
        raise ExportError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    check_options(step, theme)
    if predict_option(predict) is not None and fmt == "json":
        raise ExportError("--predict is for pages (html or widget): a json export is the raw trace")
    if fmt != "json":
        frontend_folder()  # before the run: a missing front end is a misuse, not a snippet error


def _write(target: Path, body: bytes, follow: bool = True) -> None:
    """Write ``body`` to ``target``; ``follow=False`` (the pages of a folder export, named by the
    export, not by the user): never through a symbolic link found at that name."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(target, flags, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow:
            raise ExportError(
                f"cannot write {target}: it is a symbolic link, and a page is never written through one"
            ) from e
        raise ExportError(f"cannot write {target}: {e.strerror or e}") from e
    try:
        with open(fd, "wb") as f:
            f.write(body)
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
    predict: str | bool | None = None,
) -> int:
    """`gradstep export`: check the options, run the snippet (`run` returns its trace JSON, or it
    and the runs of its fixes), write it. `predict`: the page is an exercise (predict_option).

    Options are checked before the run (a misuse costs nothing); the snippet's own failure is in
    the trace (the page shows it), so it still exports. Returns the exit code.
    """
    _check_format(fmt, step, theme, predict)
    target = None if output == "-" else Path(output)
    if target is not None and not target.parent.is_dir():
        raise ExportError(f"cannot write {target}: folder {target.parent} does not exist")
    data, fixes = _split(run())
    body = _render(data, fixes, fmt, step, theme, title, predict=predict_option(predict))
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
    predict: str | bool | None = None,
) -> int:
    """`gradstep export` of several snippets ((file, code, title) each) into the folder `output`, one
    page each named after its file; `run(i, file, code)` runs the i-th (from 1) inside `start` (the
    sandbox, started once for all). `shared`: the front end is written once beside the pages
    (library_files) instead of into each. `predict`: every page is an exercise (predict_option).
    Returns the exit code."""
    _check_format(fmt, step, theme, predict)
    predict = predict_option(predict)
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
            body = _render(
                data, fixes, fmt, step, theme, title, library="" if shared else None, predict=predict
            )
            _write(folder / name, body, follow=False)
            _wrote(folder / name, body, data)
            total += len(body)
    if shared:
        for name, text in library_files().items():
            _write(folder / name, text.encode(), follow=False)
            total += len(text.encode())
            print(
                f"gradstep: wrote {folder / name} ({len(text.encode()) / 1024:.0f} KB, shared)",
                file=sys.stderr,
            )
    print(f"gradstep: {len(snippets)} pages in {folder} ({total / 1024:.0f} KB in all)", file=sys.stderr)
    return 0
