"""Static export: `gradstep export FILE.py -o page.html` and gradstep.export.

The page is one file: every front-end module, the CSS and the trace inlined (what it looks like in
a browser, opened from file://, is tests/browser/test_browser_export.py). The trace it carries comes from
the sandbox, and what it says is checked here against plain PyTorch run on the same snippet.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
import textwrap
from html.parser import HTMLParser
from pathlib import Path

import orjson
import pytest
import torch
from gradstep.columns import pack, rows_of
from gradstep.export import (
    ExportError,
    bundle,
    collect,
    export_html,
    front_end,
    frontend_folder,
    write_export,
)
from gradstep.schema import Trace
from gradstep.trace_dicts import typed
from gradstep.tracer import record

GRADSTEP = Path(sys.executable).with_name("gradstep")
SAFETY = 120  # seconds: only so a hung child cannot hang the suite
REPO = Path(__file__).resolve().parents[2]
SNIPPET = REPO / "snippets" / "backward_twice_fails.py"

POW = textwrap.dedent(
    """\
    import torch
    x = torch.tensor(2.0, requires_grad=True)
    y = x ** 7
    y.backward()
    y.backward()
    """
)


class _Page(HTMLParser):
    """Every element's attributes, and the text of each <script> by id (or type)."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.scripts: dict[str, str] = {}
        self._script: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "script":
            self._script = a.get("id") or a.get("type") or "script"
            self.scripts[self._script] = ""

    def handle_endtag(self, tag):
        if tag == "script":
            self._script = None

    def handle_data(self, data):
        if self._script is not None:
            self.scripts[self._script] += data


def parse(page: str) -> _Page:
    p = _Page()
    p.feed(page)
    return p


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(GRADSTEP), *args], capture_output=True, text=True, timeout=SAFETY)


# ---------------------------------------------------------------- the inlined modules


def test_every_relative_import_of_the_inlined_modules_is_rewritten():
    for m in collect(["embed.js", "widget.js"]):
        if m.mime != "text/javascript":
            continue
        leftover = re.findall(r"""^(?:import|export)\b[^;]*?["']\.\.?/""", m.source, re.M)
        assert not leftover, f"{m.name} still imports by a relative URL: {leftover}"
        own_url = re.findall(r"""new URL\(\s*["']\.\.?/[^"']+["']\s*,\s*import\.meta\.url""", m.source)
        assert not own_url, f"{m.name} still resolves files by its own URL: {own_url}"


def test_modules_are_inlined_after_everything_they_import():
    seen: set[str] = set()
    for m in collect(["embed.js"]):
        assert set(m.deps) <= seen, f"{m.name} comes before {set(m.deps) - seen}"
        seen.add(m.name)


def test_the_layout_worker_and_the_stylesheet_travel_with_the_viewer():
    names = {m.name for m in collect(["embed.js"])}
    assert {"viewer.js", "layout.worker.js", "style.css", "vendor/dagre.js"} <= names


def test_files_the_viewer_does_not_use_are_not_inlined():
    names = {m.name for m in collect(["embed.js"])}
    assert "app.js" not in names
    assert not any(n.startswith(("node_modules/", "vendor-src/")) for n in names)


def test_an_import_cycle_is_reported_with_its_path(tmp_path):
    (tmp_path / "a.js").write_text('import { b } from "./b.js";\nexport const a = 1;\n')
    (tmp_path / "b.js").write_text('import { a } from "./a.js";\nexport const b = 2;\n')
    with pytest.raises(ExportError, match=r"cycle: a\.js -> b\.js -> a\.js"):
        collect(["a.js"], tmp_path)


def test_a_missing_module_is_reported_with_its_importer(tmp_path):
    (tmp_path / "a.js").write_text('import { gone } from "./gone.js";\n')
    with pytest.raises(ExportError, match=r"gone\.js not found .*referred to by a\.js"):
        collect(["a.js"], tmp_path)


def test_an_import_leaving_the_front_end_folder_is_refused(tmp_path):
    (tmp_path / "a.js").write_text('import { x } from "../secret.js";\n')
    with pytest.raises(ExportError, match="outside the front end folder"):
        collect(["a.js"], tmp_path)


def test_a_kept_bundle_is_made_again_once_a_file_it_inlines_changes(tmp_path):
    (tmp_path / "a.js").write_text('import { b } from "./b.js";\nexport const a = b;\n')
    (tmp_path / "b.js").write_text('export const b = "first";\n')
    first = front_end("a.js", folder=tmp_path)
    assert front_end("a.js", folder=tmp_path) is first  # kept: nothing changed
    (tmp_path / "b.js").write_text('export const b = "second, and longer";\n')  # another size
    second = front_end("a.js", folder=tmp_path)
    assert "second, and longer" in second and "first" not in second
    (tmp_path / "b.js").unlink()
    with pytest.raises(ExportError, match="b.js"):
        bundle("a.js", folder=tmp_path)


def test_the_bundle_is_one_module_without_a_closing_script_tag():
    text = bundle("embed.js")
    assert "</script" not in text.lower()
    assert "export const render" in text


# Modules using each import and export form the front end may write, logging the order they run in.
MODULE_FORMS = {
    "log.js": "export const log = [];\nexport function note(x) {\n  log.push(x);\n}\n",
    "shapes.js": textwrap.dedent(
        """\
        import { note } from "./log.js";
        note("shapes");
        export const SIDES = { square: 4 };
        export class Square {
          area(s) { return s * s; }
        }
        export function* count(n) { for (let i = 0; i < n; i++) yield i; }
        export async function later(x) { return x + 1; }
        const hidden = 7, other = 8;
        export { hidden as seven, other };
        export default function named(x) { return `named ${x}`; }
        """
    ),
    "anon.js": 'import "./log.js";\nexport default class { hi() { return "anon"; } }\n',
    "again.js": 'export { SIDES, count as counter } from "./shapes.js";\nexport default 42;\n',
    "entry.js": textwrap.dedent(
        """\
        import { log, note } from "./log.js";
        import named, { Square as Sq, SIDES } from "./shapes.js";
        import * as shapes from "./shapes.js";
        import Anon from "./anon.js";
        import answer, { counter, SIDES as sides } from "./again.js";
        note("entry");
        export const before = hoisted(2);  // a function declared further down is hoisted
        function hoisted(x) { return x * 10; }
        export async function run() {
          const lazy = await import("./again.js");
          return {
            log, before, named: named(1), area: new Sq().area(3), sides: SIDES.square,
            ns: Object.keys(shapes).sort(), seven: shapes.seven, other: shapes.other, anon: new Anon().hi(),
            answer, counted: [...counter(3)], same: sides === SIDES, later: await shapes.later(1),
            lazy: lazy.default, extensible: Object.isExtensible(shapes),
          };
        }
        """
    ),
}

RUN_IN_NODE = """
{source}
const entry = await {entry};
console.log(JSON.stringify(await entry.run()));
"""


def run_node(tmp_path: Path, source: str, entry: str) -> dict:
    node = shutil.which("node")
    if node is None:
        pytest.skip("needs node")
    script = tmp_path / f"run-{len(list(tmp_path.glob('run-*')))}.mjs"
    script.write_text(RUN_IN_NODE.format(source=source, entry=entry))
    r = subprocess.run([node, str(script)], capture_output=True, text=True, timeout=SAFETY)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_inlined_modules_run_as_the_es_modules_they_are_made_of(tmp_path):
    for name, text in MODULE_FORMS.items():
        (tmp_path / name).write_text(text)
    as_modules = run_node(tmp_path, "", 'import("./entry.js")')
    inlined = run_node(tmp_path, f"const inlined = {front_end('entry.js', folder=tmp_path)};", "inlined")
    assert inlined == as_modules
    assert as_modules["log"] == ["shapes", "entry"]  # each module ran once, after what it imports


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("export let n = 1;\n", "export a const"),
        ('export * from "./b.js";\n', "name the exports"),
        ("export const { a, b } = {};\n", "export a const, by name"),
        ("const x = await 1;\nexport { x };\n", "top-level await"),
        ("export const u = import.meta.url;\n", "module syntax it does not know"),
        ('import x from "d3";\n', "module syntax it does not know"),
        ('export const s = "</script>";\n', r"holds '</script'"),
    ],
)
def test_a_module_the_export_cannot_inline_is_named_with_its_reason(tmp_path, source, message):
    (tmp_path / "a.js").write_text(source)
    (tmp_path / "b.js").write_text("export const b = 1;\n")
    with pytest.raises(ExportError, match=rf"a\.js.*{message}"):
        front_end("a.js", folder=tmp_path)


# ---------------------------------------------------------------- the page


def test_the_page_refers_to_no_other_file():
    page = parse(export_html(record(POW)))
    for tag, attrs in page.tags:
        refs = [attrs[k] for k in ("src", "href") if k in attrs and not attrs[k].startswith("data:")]
        assert not refs, f"<{tag}> refers to another file: {attrs}"
    assert any(t == "link" and a.get("rel") == "icon" for t, a in page.tags)  # inline: no favicon request


def test_the_page_carries_the_trace_as_version_4_writes_it():
    data = record(POW)
    page = parse(export_html(data))
    assert json.loads(page.scripts["gradstep-trace"]) == orjson.loads(orjson.dumps(pack(data)))


def test_code_and_output_with_script_tags_cannot_break_out_of_the_page():
    code = 'import torch\nprint("</script><script>alert(1)</script>")\ns = "<!-- </style>"\n'
    data = record(code)
    page = parse(export_html(data))
    assert json.loads(page.scripts["gradstep-trace"]) == orjson.loads(orjson.dumps(pack(data)))
    assert [t for t, _ in page.tags].count("script") == 4  # trace, fixes' runs, options, the module


def test_a_page_ships_the_run_of_each_fix_it_offers_and_the_run_matches_plain_torch():
    from gradstep.notebook import record_dict

    fixes: dict[str, dict] = {}
    data = record_dict(POW, fix_runs=fixes)
    page = parse(export_html(data, fixes={**fixes, "print(1)": record("print(1)")}))
    shipped = json.loads(page.scripts["gradstep-fixes"])
    offered = [f["code"] for d in data["diagnoses"] for f in d["fixes"]]
    assert offered and sorted(shipped) == sorted(offered)  # only the fixes offered
    for code, run in shipped.items():
        namespace: dict = {}
        exec(compile(code, "<fix>", "exec"), namespace)  # plain torch: the fix runs cleanly
        assert run["status"] == "ok" and run["code"] == code
        assert grads_in(run, "x")[-1] == pytest.approx(namespace["x"].grad.item())


def test_a_fix_whose_code_holds_a_script_tag_cannot_break_out_of_the_page():
    fix_code = 'import torch\nprint("</script><script>alert(1)</script>")\n'
    data = {
        **record(POW),
        "diagnoses": [
            {
                "kind": "k",
                "severity": "error",
                "line": 1,
                "message": "m",
                "fixes": [{"title": "t", "explanation": "e", "code": fix_code}],
            }
        ],
    }
    page = parse(export_html(data, fixes={fix_code: record(fix_code)}))
    assert list(json.loads(page.scripts["gradstep-fixes"])) == [fix_code]
    assert [t for t, _ in page.tags].count("script") == 4


def page_policy_of(page: _Page) -> dict[str, str]:
    (meta,) = [a for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert page.tags.index(("meta", meta)) < [t for t, _ in page.tags].index("script")  # before any script
    return dict(d.strip().split(" ", 1) for d in meta["content"].split(";"))


def test_the_page_runs_only_its_own_module_by_its_hash():
    page = parse(export_html(record(POW)))
    policy = page_policy_of(page)
    digest = base64.b64encode(hashlib.sha256(page.scripts["module"].encode()).digest()).decode()
    # no Blob or data: URL, no inline script or handler but the module, no eval: nothing else runs
    assert policy["script-src"] == f"'sha256-{digest}'"
    assert policy["worker-src"] == "blob:"  # the layout worker, which the module starts
    assert policy["default-src"] == "'none'"  # no network: no fetch, no image, no frame from anywhere
    assert policy["object-src"] == "'none'" and policy["base-uri"] == "'none'"
    assert "connect-src" not in policy


def test_a_page_sharing_a_library_runs_its_module_and_the_library_file_only():
    page = parse(export_html(record(POW), library=""))
    policy = page_policy_of(page)
    digest = base64.b64encode(hashlib.sha256(page.scripts["module"].encode()).digest()).decode()
    assert policy["script-src"].split() == [f"'sha256-{digest}'", "'self'", "file:"]
    assert ("script", {"src": "gradstep.js"}) in page.tags


def test_the_inlined_front_end_loads_no_module_at_run_time_and_makes_a_blob_only_for_its_worker():
    text = bundle("embed.js")
    assert "import(" not in text
    assert text.count("URL.createObjectURL(") == 1  # in the function that starts a worker


def test_a_step_past_the_end_opens_the_last_step():
    data = record(POW)
    options = json.loads(parse(export_html(data, step=99)).scripts["gradstep-options"])
    assert options["step"] == len(data["steps"]) - 1


def test_a_negative_step_opens_the_first_step():
    options = json.loads(parse(export_html(record(POW), step=-3)).scripts["gradstep-options"])
    assert options["step"] == 0


def test_an_unknown_theme_is_refused_by_name():
    with pytest.raises(ExportError, match="theme must be one of light, dark, auto, not 'pink'"):
        export_html(record(POW), theme="pink")


def test_a_fractional_step_is_refused():
    with pytest.raises(ExportError, match="step must be a whole number"):
        export_html(record(POW), step=1.5)


def test_a_typed_trace_exports_like_its_dict():
    data = record(POW)
    page = parse(export_html(typed(data)))
    assert Trace.model_validate(json.loads(page.scripts["gradstep-trace"])) == typed(data)


def test_the_theme_is_set_on_the_page():
    page = parse(export_html(record(POW), theme="dark"))
    assert ("html", {"lang": "en", "data-theme": "dark"}) in page.tags


def test_the_front_end_folder_is_found():
    assert (frontend_folder() / "embed.js").is_file()


# ---------------------------------------------------------------- gradstep export (sandboxed)


def plain_grad_after_first_backward() -> float:
    x = torch.tensor(2.0, requires_grad=True)
    y = x**7
    y.backward()
    return x.grad.item()


def grads_in(trace: dict, name: str) -> list:
    out = []
    for step in rows_of(trace)["steps"]:
        for t in step.get("tensors", []):
            if t["name"] == name and t.get("grad"):
                out.append(t["grad"]["values"])
    return out


def test_cli_export_writes_a_page_whose_trace_matches_plain_torch(tmp_path):
    out = tmp_path / "page.html"
    r = run_cli("export", str(SNIPPET), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}" in r.stderr
    trace = json.loads(parse(out.read_text()).scripts["gradstep-trace"])
    # the snippet's second backward fails, as in plain torch; x.grad keeps the first one's value
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        x = torch.tensor(2.0, requires_grad=True)
        y = x**7
        y.backward()
        y.backward()
    assert trace["status"] == "error"
    assert trace["error"]["type"] == "RuntimeError"
    assert grads_in(trace, "x")[-1] == pytest.approx(plain_grad_after_first_backward())


def test_cli_export_json_writes_the_raw_trace(tmp_path):
    out = tmp_path / "trace.json"
    r = run_cli("export", str(SNIPPET), "--format", "json", "-o", str(out))
    assert r.returncode == 0, r.stderr
    trace = Trace.model_validate_json(out.read_bytes())
    assert trace.status == "error"
    assert trace.code == SNIPPET.read_text()


def test_cli_export_of_a_snippet_with_a_syntax_error_still_writes_the_page(tmp_path):
    src = tmp_path / "broken.py"
    src.write_text("import torch\nx = (\n")
    out = tmp_path / "page.html"
    r = run_cli("export", str(src), "-o", str(out), "--step", "5")
    assert r.returncode == 0, r.stderr
    trace = json.loads(parse(out.read_text()).scripts["gradstep-trace"])
    with pytest.raises(SyntaxError) as plain:
        compile(src.read_text(), str(src), "exec")
    assert trace["status"] == "error"
    assert trace["error"]["type"] == "SyntaxError"
    assert trace["error"]["line"] == plain.value.lineno


def test_cli_export_of_a_missing_file_exits_2_naming_it(tmp_path):
    r = run_cli("export", str(tmp_path / "nope.py"), "-o", str(tmp_path / "p.html"))
    assert r.returncode == 2
    assert "cannot read" in r.stderr and "nope.py" in r.stderr
    assert not (tmp_path / "p.html").exists()


def test_cli_export_with_an_unknown_theme_exits_2_listing_the_themes(tmp_path):
    r = run_cli("export", str(SNIPPET), "-o", str(tmp_path / "p.html"), "--theme", "pink")
    assert r.returncode == 2
    assert "invalid choice: 'pink'" in r.stderr and "light" in r.stderr


def test_cli_export_into_a_missing_folder_exits_2_before_running(tmp_path):
    r = run_cli("export", str(SNIPPET), "-o", str(tmp_path / "no" / "p.html"))
    assert r.returncode == 2
    assert "does not exist" in r.stderr


def test_cli_export_with_a_non_numeric_step_exits_2(tmp_path):
    r = run_cli("export", str(SNIPPET), "-o", str(tmp_path / "p.html"), "--step", "two")
    assert r.returncode == 2
    assert "invalid int value: 'two'" in r.stderr


def test_widget_format_writes_one_module_carrying_the_trace(tmp_path):
    data = record(POW)
    out = tmp_path / "pow.mjs"
    assert write_export(lambda: json.dumps(data).encode(), output=str(out), fmt="widget", step=9) == 0
    text = out.read_text()
    defaults = json.loads(re.search(r"^const DEFAULTS = (.*);$", text, re.M).group(1))
    assert defaults == {
        "trace": orjson.loads(orjson.dumps(pack(data))),
        "step": len(data["steps"]) - 1,
        "theme": "auto",
    }
    assert "export default" in text


def test_an_unknown_format_is_refused_before_the_snippet_runs(tmp_path):
    ran = []
    with pytest.raises(ExportError, match="format must be one of html, json, widget, not 'pdf'"):
        write_export(lambda: ran.append(1) or b"{}", output=str(tmp_path / "x"), fmt="pdf")
    assert ran == []


# ---------------------------------------------------------------- a course's worth: fixes, several snippets, one library


def test_cli_export_ships_the_run_of_each_fix_the_sandbox_verified(tmp_path):
    out = tmp_path / "page.html"
    r = run_cli("export", str(SNIPPET), "-o", str(out))
    assert r.returncode == 0, r.stderr
    page = parse(out.read_text())
    trace = json.loads(page.scripts["gradstep-trace"])
    shipped = json.loads(page.scripts["gradstep-fixes"])
    offered = [f["code"] for d in trace["diagnoses"] for f in d["fixes"]]
    assert offered and sorted(shipped) == sorted(offered)
    for code, run in shipped.items():
        namespace: dict = {}
        exec(compile(code, "<fix>", "exec"), namespace)  # plain torch runs the fix cleanly, as its run says
        assert run["status"] == "ok" and run["code"] == code
        assert grads_in(run, "x")[-1] == pytest.approx(namespace["x"].grad.item())


def test_cli_export_says_what_it_is_doing_while_the_sandbox_starts(tmp_path):
    r = run_cli("export", str(SNIPPET), "-o", str(tmp_path / "page.html"))
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    starting = lines.index("gradstep: starting the sandbox (torch)…")
    running = lines.index(f"gradstep: running {SNIPPET.name}…")
    assert starting < running < next(i for i, x in enumerate(lines) if x.startswith("gradstep: wrote"))


def course_folder(tmp_path: Path) -> Path:
    course = tmp_path / "course"
    course.mkdir()
    (course / "a_cube.py").write_text(POW)
    (course / "b_fails.py").write_text(SNIPPET.read_text())
    (course / "notes.txt").write_text("not a snippet")
    return course


def test_cli_export_of_a_folder_writes_a_page_per_snippet_starting_the_sandbox_once(tmp_path):
    course = course_folder(tmp_path)
    out = tmp_path / "site"
    r = run_cli("export", str(course), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("starting the sandbox (torch)…") == 1
    assert sorted(p.name for p in out.iterdir()) == ["a_cube.html", "b_fails.html"]
    for name, src in (("a_cube.html", course / "a_cube.py"), ("b_fails.html", course / "b_fails.py")):
        trace = json.loads(parse((out / name).read_text()).scripts["gradstep-trace"])
        assert trace["code"] == src.read_text()
    fails = json.loads(parse((out / "b_fails.html").read_text()).scripts["gradstep-trace"])
    assert grads_in(fails, "x")[-1] == pytest.approx(plain_grad_after_first_backward())


def test_cli_export_of_several_files_with_a_shared_library_writes_it_once(tmp_path):
    course = course_folder(tmp_path)
    out = tmp_path / "site"
    r = run_cli(
        "export", str(course / "a_cube.py"), str(course / "b_fails.py"), "-o", str(out), "--shared-library"
    )
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "a_cube.html",
        "b_fails.html",
        "gradstep.css",
        "gradstep.js",
    ]
    single = len(export_html(record(POW)))
    for name in ("a_cube.html", "b_fails.html"):
        page = parse((out / name).read_text())
        refs = sorted(
            a.get("src") or a.get("href")
            for t, a in page.tags
            if t in ("script", "link") and (a.get("src") or a.get("rel") == "stylesheet")
        )
        assert refs == ["gradstep.css", "gradstep.js"]
        assert len((out / name).read_text()) < single / 10  # the front end is not in the page


def test_cli_export_of_two_files_of_one_name_is_refused_before_running(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        (tmp_path / d / "lesson.py").write_text(POW)
    r = run_cli(
        "export",
        str(tmp_path / "a" / "lesson.py"),
        str(tmp_path / "b" / "lesson.py"),
        "-o",
        str(tmp_path / "o"),
    )
    assert r.returncode == 2
    assert "same page: lesson.html" in r.stderr and "starting the sandbox" not in r.stderr


def test_shared_library_for_one_page_is_refused(tmp_path):
    r = run_cli("export", str(SNIPPET), "-o", str(tmp_path / "p.html"), "--shared-library")
    assert r.returncode == 2
    assert "several snippets" in r.stderr


def test_widget_format_carries_the_runs_of_the_fixes(tmp_path):
    from gradstep.notebook import record_dict

    fixes: dict[str, dict] = {}
    data = record_dict(POW, fix_runs=fixes)
    out = tmp_path / "pow.mjs"
    ran = (orjson.dumps(data), {code: orjson.dumps(t) for code, t in fixes.items()})
    assert write_export(lambda: ran, output=str(out), fmt="widget") == 0
    defaults = json.loads(re.search(r"^const DEFAULTS = (.*);$", out.read_text(), re.M).group(1))
    assert fixes and sorted(defaults["fixes"]) == sorted(fixes)
    assert all(run["status"] == "ok" for run in defaults["fixes"].values())


# ---------------------------------------------------------------- the exercise (predict) option

EXERCISE = REPO / "snippets" / "exercise_retain_graph.py"


def options_of(page: str) -> dict:
    return json.loads(parse(page).scripts["gradstep-options"])


def test_an_exercise_page_carries_its_questions_in_its_options_stripped():
    assert options_of(export_html(record(POW), predict="  x.grad, freed@4 ,error "))["predict"] == (
        "x.grad, freed@4 ,error"
    )


def test_predict_true_asks_the_questions_of_the_codes_comments():
    assert options_of(export_html(record(POW), predict=True))["predict"] == "code"


@pytest.mark.parametrize("off", [None, False, "", "   "])
def test_a_page_without_the_exercise_has_no_predict_option(off):
    assert "predict" not in options_of(export_html(record(POW), predict=off))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (3, "predict must be a string .* not int"),
        (["x.grad"], "predict must be a string .* not list"),
        ("x.grad\nfreed", "predict must be one line"),
        ("x.grad," * 100, "predict must be at most 500 characters, not 700"),
    ],
)
def test_a_predict_option_that_cannot_be_a_spec_is_refused_by_name(bad, message):
    with pytest.raises(ExportError, match=message):
        export_html(record(POW), predict=bad)


def test_a_spec_holding_a_script_tag_cannot_break_out_of_the_page():
    spec = "x.grad</script><script>alert(1)</script><!--"
    page = parse(export_html(record(POW), predict=spec))
    assert [t for t, _ in page.tags].count("script") == 4  # trace, fixes, options, module
    assert json.loads(page.scripts["gradstep-options"])["predict"] == spec


def test_an_exercise_page_runs_only_its_own_module_by_its_hash_the_same_module_as_without():
    data = record(POW)
    page = parse(export_html(data, predict="x.grad, error"))
    digest = base64.b64encode(hashlib.sha256(page.scripts["module"].encode()).digest()).decode()
    assert page_policy_of(page)["script-src"] == f"'sha256-{digest}'"
    # the questions are data beside the script, so the script (and its hash) is the plain page's
    assert page.scripts["module"] == parse(export_html(data)).scripts["module"]


# A front end whose render shows what the page hands it: the page's own script, under its policy,
# is what calls render (a script the policy refused would not run, and the page would not be ready).
RECORDING_EMBED = """\
export async function render(options) {
  const { el, trace, step, theme, predict } = options;
  el.dataset.rendered = JSON.stringify({ steps: trace.steps.length, step, theme, predict: predict ?? null });
  return { step, setStep() {}, play() {}, stop() {} };
}
"""


@pytest.mark.parametrize("predict", ["x.grad, error", "code", None])
def test_the_exercise_option_reaches_the_render_call_of_the_page_opened_from_disk(tmp_path, browser, predict):
    (tmp_path / "embed.js").write_text(RECORDING_EMBED)
    (tmp_path / "style.css").write_text("")
    data = record(POW)
    out = tmp_path / "page.html"
    out.write_text(export_html(data, folder=tmp_path, predict=predict, step=2))
    ctx = browser.new_context()
    page = ctx.new_page()
    violations: list[str] = []
    page.on("console", lambda m: "Content Security Policy" in m.text and violations.append(m.text))
    try:
        page.goto(out.as_uri())
        page.locator("body[data-ready=true]").wait_for(timeout=30_000)
        rendered = json.loads(page.locator("#gradstep").get_attribute("data-rendered"))
    finally:
        ctx.close()
    assert rendered == {"steps": len(data["steps"]), "step": 2, "theme": "auto", "predict": predict}
    assert violations == []


def test_the_widget_format_carries_the_exercise_option(tmp_path):
    data = record(POW)
    out = tmp_path / "pow.mjs"
    assert write_export(lambda: json.dumps(data).encode(), output=str(out), fmt="widget", predict=True) == 0
    defaults = json.loads(re.search(r"^const DEFAULTS = (.*);$", out.read_text(), re.M).group(1))
    assert defaults["predict"] == "code"


def test_the_json_format_refuses_the_exercise_option_before_the_snippet_runs(tmp_path):
    ran = []
    with pytest.raises(ExportError, match="--predict is for pages"):
        write_export(
            lambda: ran.append(1) or b"{}", output=str(tmp_path / "t.json"), fmt="json", predict="x.grad"
        )
    assert ran == []


def plain_retain_graph_exercise() -> tuple[list[float], str]:
    """x.grad after each backward call of the exercise, and the error of its last call, in plain torch."""
    x = torch.tensor(2.0, requires_grad=True)
    y = x**3
    grads = []
    y.backward(retain_graph=True)
    grads.append(x.grad.item())
    y.backward()
    grads.append(x.grad.item())
    with pytest.raises(RuntimeError) as failed:
        y.backward()
    return grads, str(failed.value)


def test_cli_export_predict_code_writes_the_exercise_page_whose_answers_are_plain_torchs(tmp_path):
    out = tmp_path / "exercise.html"
    r = run_cli("export", str(EXERCISE), "--predict", "code", "-o", str(out))
    assert r.returncode == 0, r.stderr
    page = parse(out.read_text())
    assert json.loads(page.scripts["gradstep-options"])["predict"] == "code"
    trace = rows_of(json.loads(page.scripts["gradstep-trace"]))
    assert "# predict: error" in trace["code"]  # the questions travel in the code
    grads, error = plain_retain_graph_exercise()
    calls = [s for s in trace["steps"] if s["kind"] == "backward"]
    assert [c.get("error", {}).get("message") for c in calls] == [None, None, error]
    assert grads_in(trace, "x")[: len(grads)] == pytest.approx(grads)


def test_cli_export_of_several_snippets_makes_each_page_an_exercise(tmp_path):
    folder = tmp_path / "pages"
    other = tmp_path / "cube.py"
    other.write_text(POW.replace("y.backward()\ny.backward()\n", "y.backward()\n"))
    r = run_cli("export", str(EXERCISE), str(other), "--predict", "x.grad", "-o", str(folder))
    assert r.returncode == 0, r.stderr
    for name in ("exercise_retain_graph.html", "cube.html"):
        assert options_of((folder / name).read_text())["predict"] == "x.grad"


def test_cli_export_with_a_predict_option_of_several_lines_exits_2_before_running(tmp_path):
    r = run_cli("export", str(SNIPPET), "-o", str(tmp_path / "p.html"), "--predict", "x.grad\nerror")
    assert r.returncode == 2
    assert "predict must be one line" in r.stderr
    assert "running" not in r.stderr and not (tmp_path / "p.html").exists()


def test_the_exercise_docs_name_only_snippets_that_exist():
    text = (REPO / "docs" / "exercises.md").read_text()
    named = set(re.findall(r"snippet=(\w+)", text)) | set(re.findall(r"snippets/(\w+)\.py", text))
    named |= set(re.findall(r"^\| `(exercise_\w+)` \|", text, re.M))
    assert len(named) >= 4
    missing = sorted(n for n in named if not (REPO / "snippets" / f"{n}.py").is_file())
    assert missing == []
