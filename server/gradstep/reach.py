"""Where a snippet's text reaches beyond what gradstep can vouch for: the server's own look at the code.

A snippet runs in the same process as the tracer, so code that can reach the process itself (the
result descriptor, the tracer's objects, the interpreter's frames) can make its run report
anything. The server cannot see inside that process, but it can read the code it was given:
this module lists the places where the code uses more than PyTorch's public API and plain
Python — an import outside ``MODULES``, a reflective builtin (``getattr``, ``eval``, ``open``, …),
a dunder or private attribute, a path into ``/proc`` or ``/dev``. A run whose code has any is
shown as *reported by the code* (``Trace.reaches``), and the server checks and offers no fixes
for it: nothing about it is gradstep's word.

It is a look at the text, so it errs on the side of flagging: code that builds names at run time
needs one of the reflective builtins, which is flagged itself. Linear in the code's size (one
parse, at most ``MAX_CODE`` characters: a snippet is smaller); code that does not parse has
nothing listed (its run stops at the syntax error before any line runs).
"""

from __future__ import annotations

import ast

MAX_REACHES = 8  # listed; the first ones say enough
MAX_CODE = 200_000
# Modules a snippet may import without reaching past what gradstep shows (torch's private and
# code-loading corners excepted below). Pasted code's usual companions are here too: in the sandbox
# they are stand-ins (tqdm, matplotlib: gradstep.tracer.standins) or not installed (an ImportError).
MODULES = frozenset(
    {
        "torch", "numpy", "math", "cmath", "random", "itertools", "functools", "collections", "dataclasses",
        "typing", "copy", "time", "statistics", "operator", "string", "enum", "abc", "numbers", "fractions",
        "decimal", "contextlib", "warnings", "textwrap", "pprint", "heapq", "bisect", "re", "__future__",
        "tqdm", "matplotlib", "torchvision", "torchaudio", "torchtext", "sklearn", "pandas", "scipy", "PIL",
        "seaborn", "einops", "json", "struct", "datetime", "csv",
    }
)  # fmt: skip
# Modules pasted code imports for a few harmless names: allowed only as ``module.name`` (or
# ``from module import name``) with a name listed here; any other use of the module is listed.
MODULE_NAMES = {
    "os": frozenset(
        {"path", "environ", "getenv", "makedirs", "listdir", "cpu_count", "sep", "getcwd", "mkdir"}
    ),
    "sys": frozenset(
        {"path", "exit", "argv", "version", "version_info", "stdout", "stderr", "platform", "maxsize"}
    ),
}
# Parts of allowed packages that load or run other code, or reach the process.
MODULE_PARTS = frozenset({"cpp_extension", "hub", "package", "ctypeslib", "multiprocessing", "distributed"})
BUILTINS = frozenset(
    {
        "eval", "exec", "compile", "__import__", "globals", "locals", "vars", "getattr", "setattr", "delattr",
        "open", "breakpoint", "input", "__builtins__", "__loader__", "__spec__",
    }
)  # fmt: skip
DUNDERS = frozenset(
    {"__init__", "__name__", "__version__", "__class__", "__doc__", "__qualname__", "__module__"}
)
PRIVATE = frozenset({"_version", "_base", "_is_view", "_grad_fn", "_grad"})
PRIVATE_PREFIXES = ("_saved_", "_raw_saved_")  # what autograd nodes save: read in every autograd lesson
# Attributes that reach a process, or write raw bytes to a path (a descriptor's, through /proc).
ATTRIBUTES = frozenset(
    {
        "sys", "os", "builtins", "importlib", "subprocess", "ctypes", "gc", "inspect", "tofile", "fromfile",
        "from_file", "savetxt", "savez", "savez_compressed", "memmap", "write_bytes", "write_text",
    }
)  # fmt: skip
PATHS = ("/proc", "/dev/")


def reaches(code: str) -> list[dict]:
    """``[{"line", "what"}]``: where ``code`` reaches beyond PyTorch's public API and plain Python,
    in order, at most ``MAX_REACHES``."""
    if len(code) > MAX_CODE:
        return [{"line": 1, "what": "code too long to read through"}]
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    look = _Look()
    look.visit(tree)
    found = sorted(look.found, key=lambda r: r["line"])
    return found[:MAX_REACHES]


class _Look(ast.NodeVisitor):
    def __init__(self) -> None:
        self.found: list[dict] = []
        self.bound: dict[str, str] = {}  # a name bound to a MODULE_NAMES module -> the module

    def note(self, node: ast.AST, what: str) -> None:
        self.found.append({"line": getattr(node, "lineno", 1), "what": what})

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name in MODULE_NAMES:
                self.bound[alias.asname or alias.name] = alias.name
            elif not _allowed_module(alias.name):
                self.note(node, f"import {alias.name}")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if module in MODULE_NAMES and not node.level:
            names = [a.name for a in node.names if a.name not in MODULE_NAMES[module]]
        elif node.level or not _allowed_module(module):
            return self.note(node, f"from {'.' * node.level}{module} import …")
        else:
            names = [
                a.name for a in node.names if a.name in MODULE_PARTS or a.name == "*" or _private(a.name)
            ]
        if names:
            self.note(node, f"from {module} import {names[0]}")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        module = self.bound.get(node.value.id) if isinstance(node.value, ast.Name) else None
        if module is not None:  # os.path, sys.exit: the listed names only
            if node.attr not in MODULE_NAMES[module]:
                self.note(node, f"{module}.{node.attr}")
            return
        if node.attr in ATTRIBUTES or node.attr in MODULE_PARTS or _private(node.attr):
            self.note(node, f".{node.attr}")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in BUILTINS:
            self.note(node, node.id)
        elif node.id in self.bound:  # the module itself passed around: anything can follow
            self.note(node, f"{self.bound[node.id]} itself")

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str | bytes):
            text = node.value if isinstance(node.value, str) else node.value.decode("latin-1")
            if any(p in text for p in PATHS):
                self.note(node, "a path into /proc or /dev")


def _allowed_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] in MODULES and not any(p in MODULE_PARTS or _private(p) for p in parts[1:])


def _private(name: str) -> bool:
    """A dunder or private name, other than the few every autograd lesson reads."""
    if name.startswith("__") and name.endswith("__"):
        return name not in DUNDERS
    return name.startswith("_") and name not in PRIVATE and not name.startswith(PRIVATE_PREFIXES)
