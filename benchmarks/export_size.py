"""Size of a static export page: the default snippet and the 24-layer transformer.

For each, prints the page raw and gzip, split into what every page carries (the inlined front
end: modules and CSS, the same for every trace) and the trace itself, and the page's gzip size as
a ratio of the raw trace's gzip size measured in the same run (the baseline: what `--format json`
would serve), and a page that shares the library with others (`--shared-library`). Usage:
    python benchmarks/export_size.py
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import orjson
from gradstep import snippets
from gradstep.columns import pack
from gradstep.export import collect, export_html, library_files
from gradstep.pages import DEFAULT_SNIPPET
from gradstep.pipeline import explained

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tracer_overhead import SNIPPET as TRANSFORMER  # noqa: E402


def kb(n: int) -> str:
    return f"{n / 1024:7.1f} KB"


def gz(b: bytes) -> int:
    return len(gzip.compress(b, 9))


def main() -> None:
    modules = collect(["embed.js"])
    front = "".join(m.source for m in modules).encode()
    print(f"front end inlined: {len(modules)} files, {kb(len(front))} raw, {kb(gz(front))} gzip")
    for m in sorted(modules, key=lambda m: -len(m.source))[:4]:
        print(f"  {m.name:24} {kb(len(m.source.encode()))}")
    for name, code in (
        (f"default snippet ({DEFAULT_SNIPPET})", snippets.load_all()[DEFAULT_SNIPPET].code),
        ("24-layer transformer", TRANSFORMER),
    ):
        data = explained(code)
        trace = orjson.dumps(pack(data))  # as the page carries it
        page = export_html(data).encode()
        print(
            f"{name}: page {kb(len(page))} raw, {kb(gz(page))} gzip; "
            f"trace {kb(len(trace))} raw, {kb(gz(trace))} gzip; "
            f"page/trace gzip {gz(page) / gz(trace):.2f}x; {len(data['nodes'])} nodes, {len(data['steps'])} steps"
        )
        shared = export_html(data, library="").encode()
        print(f"  sharing the library (--shared-library): page {kb(len(shared))} raw, {kb(gz(shared))} gzip")
    library = sum(len(t.encode()) for t in library_files().values())
    print(f"the shared library, written once for all pages: {kb(library)} raw")


if __name__ == "__main__":
    main()
