"""Command line: ``gradstep serve``, ``gradstep trace FILE.py`` and ``gradstep export FILE.py -o page.html``."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
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


class _Sandbox:
    """The sandbox the server uses, started once for every snippet of one command (its start-up,
    the zygote importing torch, is most of a small snippet's time): the CLI is exactly as confined.
    One run and its fixes at a time: no spare beyond the one slot's."""

    def __init__(self, timeout: float):
        self.timeout = timeout  # nothing starts (nor imports torch) before the options are checked

    def __enter__(self) -> _Sandbox:
        with _progress("starting the sandbox (torch)"):
            from gradstep.checker import CheckerPool
            from gradstep.runs import TraceRunner
            from gradstep.settings import Settings

            settings = Settings.from_env(workers=1, extra_slots=0, wall_seconds=self.timeout)
            # checked here: no server to keep responsive
            self.runner = TraceRunner(settings, checker=CheckerPool(0))
            self.runner.start()
        return self

    def __exit__(self, *exc) -> None:
        self.runner.close()

    def run(self, code: str) -> bytes:
        """The trace of `code`, as the server serves it."""
        from gradstep.encoding import decompress

        return decompress(self.runner.trace(code).stored)

    def run_with_fixes(self, code: str) -> tuple[bytes, dict[str, bytes]]:
        """The trace of `code`, and the run of each fix its diagnoses offer (by the fix's code): what
        the server answers when Apply fix asks for it, the run made when the fix was verified."""
        import orjson

        from gradstep.encoding import decompress

        traced = self.runner.trace(code)
        body = decompress(traced.stored)
        offered = {f["code"] for d in orjson.loads(body).get("diagnoses") or () for f in d.get("fixes") or ()}
        fixes = {}
        for fix_code in offered:
            kept = traced.fix_runs.get(fix_code)
            if kept is not None:
                served = self.runner.trace(fix_code, verified=decompress(kept))
                fixes[fix_code] = decompress(served.stored)
        return body, fixes


@contextlib.contextmanager
def _progress(what: str):
    """`what…` on stderr as it starts and how long it took once done: nothing slow goes unsaid."""
    print(f"gradstep: {what}…", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    yield
    print(f"gradstep: {what}: {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)


def _run_sandboxed(code: str, timeout: float) -> bytes:
    with _Sandbox(timeout) as sandbox, _progress("running the snippet"):
        return sandbox.run(code)


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


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _folder_snippets(folder: Path) -> list[Path] | None:
    """A folder's *.py files in name order; None (said on stderr)
    when one is a symbolic link leading out of the folder (to /etc/passwd, ../secret.py): a folder
    export never reads a file the folder does not hold, and nothing runs. A file named on the
    command line is the user's own choice and is read wherever it is."""
    root = folder.resolve()
    found, outside = [], []
    for entry in sorted(folder.glob("*.py")):
        real = entry.resolve()
        if not _inside(real, root):
            outside.append(f"{entry} -> {real}")
        elif real.is_file():
            found.append(entry)  # a link to a file inside the folder is that file
    if outside:
        print(
            f"gradstep: not exporting the folder {folder}: "
            f"{'these symbolic links lead' if len(outside) > 1 else 'a symbolic link leads'} out of it, "
            f"so {'they are' if len(outside) > 1 else 'it is'} not read: {'; '.join(outside)}. "
            "Remove the link, or name the file itself on the command line.",
            file=sys.stderr,
        )
        return None
    if not found:
        print(f"gradstep: no .py file in the folder {folder}", file=sys.stderr)
        return None
    return found


def _snippet_files(inputs: list[str]) -> list[Path] | None:
    """The snippets named: files as given, a folder's *.py files in name order (_folder_snippets)."""
    files: list[Path] = []
    for name in inputs:
        path = Path(name)
        if path.is_dir():
            found = _folder_snippets(path)
            if found is None:
                return None
            files.extend(found)
        else:
            files.append(path)
    return files


def _export(args: argparse.Namespace) -> int:
    from gradstep.export import ExportError, write_export, write_exports

    files = _snippet_files(args.file)
    if files is None:
        return 2
    codes = [_read_snippet(str(f)) for f in files]
    if any(c is None for c in codes):
        return 2
    several = len(args.file) > 1 or Path(args.file[0]).is_dir() or Path(args.output).is_dir()
    try:
        if not several:
            if args.shared_library:
                raise ExportError("--shared-library is for several snippets exported into one folder")
            code = codes[0]

            def run() -> tuple[bytes, dict[str, bytes]]:
                with _Sandbox(args.timeout) as sandbox, _progress(f"running {files[0].name}"):
                    return sandbox.run_with_fixes(code)

            return write_export(
                run,
                output=args.output,
                fmt=args.format,
                step=args.step,
                theme=args.theme,
                title=args.title or _title_of(str(files[0]), code),
                predict=args.predict,
            )
        snippets = [(f, c, args.title or _title_of(str(f), c)) for f, c in zip(files, codes, strict=True)]
        sandbox = _Sandbox(args.timeout)

        def run_one(i: int, path: Path, code: str) -> tuple[bytes, dict[str, bytes]]:
            with _progress(f"[{i}/{len(snippets)}] running {path.name}"):
                return sandbox.run_with_fixes(code)

        return write_exports(
            run_one,
            snippets,
            output=args.output,
            fmt=args.format,
            step=args.step,
            theme=args.theme,
            shared=args.shared_library,
            start=sandbox,
            predict=args.predict,
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
        "export",
        help="run snippets in the sandbox and write a self-contained HTML page (or its trace) for each",
    )
    e.add_argument(
        "file",
        nargs="+",
        help="a Python file using torch; several files or a folder (its *.py files) export into the"
        " folder -o names, one page each, with one sandbox start-up for all",
    )
    e.add_argument(
        "-o",
        "--output",
        required=True,
        help="the file to write (- for standard output); for several snippets, a folder (made if missing)",
    )
    e.add_argument(
        "--shared-library",
        action="store_true",
        help="with several snippets: write the front end once (gradstep.js, gradstep.css) next to the"
        " pages, which refer to it, instead of inlining it in every page",
    )
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
    e.add_argument(
        "--predict",
        metavar="SPEC",
        help="make the page an exercise: the learner predicts before each backward step is shown."
        " SPEC: questions such as 'x.grad, freed, error' (add @LINE to ask at one line's calls only),"
        " or 'code' for only those of the snippet's '# predict:' comments (docs/exercises.md)",
    )
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
