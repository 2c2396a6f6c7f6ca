"""Command line: ``gradstep serve`` and ``gradstep trace FILE.py``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _trace(args: argparse.Namespace) -> int:
    from gradstep.runner import TraceRunner, payload_for
    from gradstep.settings import Settings

    path = Path(args.file)
    try:
        code = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        print(f"gradstep: cannot read {path}: {e}", file=sys.stderr)
        return 2
    if "\x00" in code:
        print(f"gradstep: {path} contains NUL characters", file=sys.stderr)
        return 2
    # The same sandbox the server uses: the CLI is exactly as confined.
    runner = TraceRunner(Settings.from_env(workers=1, wall_seconds=args.timeout))
    runner.start()
    try:
        body, _ = runner.trace_bytes(code, payload_for(code))
    finally:
        runner.close()
    if args.pretty:
        import orjson

        body = orjson.dumps(orjson.loads(body), option=orjson.OPT_INDENT_2)
    sys.stdout.buffer.write(body + b"\n")
    return 0  # the snippet's own failure is in the trace, not in the exit code


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from gradstep.app import create_app
    from gradstep.settings import Settings

    settings = Settings.from_env(host=args.host, port=args.port, workers=args.workers)
    print(
        f"gradstep: serving on http://{settings.host}:{settings.port} ({settings.workers} workers)",
        file=sys.stderr,
    )
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=args.log_level)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gradstep", description="Step through PyTorch autograd.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("trace", help="run a snippet in the sandbox and print its trace as JSON")
    p.add_argument("file", help="a Python file using torch")
    p.add_argument("--timeout", type=float, default=30.0, help="wall-clock limit in seconds (default 30)")
    p.add_argument("--pretty", action="store_true", help="indent the JSON")
    p.set_defaults(func=_trace)
    s = sub.add_parser("serve", help="serve the web app (settings also from GRADSTEP_* variables)")
    s.add_argument("--host", help="address to bind (default 127.0.0.1; GRADSTEP_HOST)")
    s.add_argument("--port", type=int, help="port (default 8000; GRADSTEP_PORT)")
    s.add_argument(
        "--workers", type=int, help="sandboxed runs at once (default: CPU count; GRADSTEP_WORKERS)"
    )
    s.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    s.set_defaults(func=_serve)
    args = parser.parse_args(argv)
    return args.func(args)
