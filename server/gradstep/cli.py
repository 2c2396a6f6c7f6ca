"""Command line: ``gradstep serve``, ``gradstep trace FILE.py`` and ``gradstep export FILE.py -o page.html``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _read_snippet(file: str) -> str | None:
    path = Path(file)
    try:
        code = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        print(f"gradstep: cannot read {path}: {e}", file=sys.stderr)
        return None
    if "\x00" in code:
        print(f"gradstep: {path} contains NUL characters", file=sys.stderr)
        return None
    return code


def _run_sandboxed(code: str, timeout: float) -> bytes:
    from gradstep.checker import CheckerPool
    from gradstep.encoding import decompress
    from gradstep.runs import TraceRunner
    from gradstep.settings import Settings

    # The same sandbox the server uses: the CLI is exactly as confined. One run and its fixes
    # (one at a time): no spare beyond the one slot's.
    settings = Settings.from_env(workers=1, extra_slots=0, wall_seconds=timeout)
    runner = TraceRunner(settings, checker=CheckerPool(0))  # checked here: no server to keep responsive
    runner.start()
    try:
        stored = runner.trace(code).stored
    finally:
        runner.close()
    return decompress(stored)


def _trace(args: argparse.Namespace) -> int:
    code = _read_snippet(args.file)
    if code is None:
        return 2
    body = _run_sandboxed(code, args.timeout)
    if args.pretty:
        import orjson

        body = orjson.dumps(orjson.loads(body), option=orjson.OPT_INDENT_2)
    sys.stdout.buffer.write(body + b"\n")
    return 0  # the snippet's own failure is in the trace, not in the exit code


def _title_of(file: str, code: str) -> str:
    """The snippet's docstring title when it has one (as the curated snippets do), else its file name."""
    import ast

    try:
        doc = ast.get_docstring(ast.parse(code))
    except (SyntaxError, ValueError):
        doc = None
    first = doc.strip().splitlines()[0].strip() if doc and doc.strip() else ""
    return f"gradstep: {first or Path(file).name}"


def _export(args: argparse.Namespace) -> int:
    from gradstep.export import ExportError, write_export

    code = _read_snippet(args.file)
    if code is None:
        return 2
    try:
        return write_export(
            lambda: _run_sandboxed(code, args.timeout),
            output=args.output,
            fmt=args.format,
            step=args.step,
            theme=args.theme,
            title=args.title or _title_of(args.file, code),
        )
    except ExportError as e:
        print(f"gradstep: {e}", file=sys.stderr)
        return 2


def _serve(args: argparse.Namespace) -> int:
    from gradstep import serving
    from gradstep.app import create_app
    from gradstep.settings import Settings

    try:
        settings = Settings.from_env(
            host=args.host, port=args.port, workers=args.workers, extra_slots=args.extra_slots
        )
        app = create_app(settings)
    except ValueError as e:  # a malformed GRADSTEP_* setting
        print(f"gradstep: {e}", file=sys.stderr)
        return 2
    print(
        f"gradstep: serving on http://{settings.host}:{settings.port} ({settings.workers} workers,"
        f" {settings.extra_slots} extra sandbox slots)",
        file=sys.stderr,
    )
    serving.serve(app, settings, log_level=args.log_level)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gradstep", description="Step through PyTorch autograd.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("trace", help="run a snippet in the sandbox and print its trace as JSON")
    p.add_argument("file", help="a Python file using torch")
    p.add_argument("--timeout", type=float, default=30.0, help="wall-clock limit in seconds (default 30)")
    p.add_argument("--pretty", action="store_true", help="indent the JSON")
    p.set_defaults(func=_trace)
    e = sub.add_parser(
        "export", help="run a snippet in the sandbox and write one self-contained HTML page (or its trace)"
    )
    e.add_argument("file", help="a Python file using torch")
    e.add_argument("-o", "--output", required=True, help="the file to write (- for standard output)")
    e.add_argument(
        "--format",
        choices=["html", "json", "widget"],
        default="html",
        help="html: a self-contained page (default); json: the raw trace; widget: an anywidget module"
        " carrying the trace (MyST / Jupyter Book {anywidget})",
    )
    e.add_argument("--step", type=int, default=0, help="the step the page opens at, from 0 (clamped)")
    e.add_argument(
        "--theme", choices=["light", "dark", "auto"], default="auto", help="colours (default auto)"
    )
    e.add_argument("--title", help="the page's title (default: the snippet's docstring title or file name)")
    e.add_argument("--timeout", type=float, default=30.0, help="wall-clock limit in seconds (default 30)")
    e.set_defaults(func=_export)
    s = sub.add_parser("serve", help="serve the web app (settings also from GRADSTEP_* variables)")
    s.add_argument("--host", help="address to bind (default 127.0.0.1; GRADSTEP_HOST)")
    s.add_argument("--port", type=int, help="port (default 8000; GRADSTEP_PORT)")
    s.add_argument(
        "--workers", type=int, help="sandboxed runs at once (default: CPU count; GRADSTEP_WORKERS)"
    )
    s.add_argument(
        "--extra-slots",
        type=int,
        help="sandbox slots beyond --workers, each keeping a prewarmed spare child (never more runs"
        " at once; GRADSTEP_EXTRA_SLOTS)",
    )
    s.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    s.set_defaults(func=_serve)
    args = parser.parse_args(argv)
    return args.func(args)
