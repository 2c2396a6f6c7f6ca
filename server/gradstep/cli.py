"""Command line: ``gradstep trace FILE.py`` and ``gradstep serve``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson


def _trace(args: argparse.Namespace) -> int:
    from gradstep.isolated import trace_in_subprocess

    path = Path(args.file)
    try:
        code = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        print(f"gradstep: cannot read {path}: {e}", file=sys.stderr)
        return 2
    trace = trace_in_subprocess(code, timeout=args.timeout)
    opts = orjson.OPT_INDENT_2 if args.pretty else 0
    sys.stdout.buffer.write(orjson.dumps(trace, option=opts) + b"\n")
    return 0  # the snippet's own failure is in the trace, not in the exit code


def _serve(args: argparse.Namespace) -> int:
    print(
        "gradstep serve: the web app is not built yet. The tracer works: try\n"
        "  gradstep trace snippets/retain_graph_accumulates.py --pretty",
        file=sys.stderr,
    )
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gradstep", description="Step through PyTorch autograd.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("trace", help="run a snippet and print its trace as JSON")
    p.add_argument("file", help="a Python file using torch")
    p.add_argument("--timeout", type=float, default=30.0, help="wall-clock limit in seconds (default 30)")
    p.add_argument("--pretty", action="store_true", help="indent the JSON")
    p.set_defaults(func=_trace)
    s = sub.add_parser("serve", help="serve the web app")
    s.set_defaults(func=_serve)
    args = parser.parse_args(argv)
    return args.func(args)
