"""The subset of Python gradstep vouches for: the server's own look at a snippet's code.

A snippet runs in the same process as the tracer, so code that can reach the process itself (the
result descriptor, the tracer's objects, the interpreter's frames, torch's own functions) can make
its run report anything. The server cannot see inside that process, but it can read the code it
was given. It vouches only for code inside a subset it can read: torch's public API and plain
Python, with every name, attribute and string visible in the text. This module lists each place
where the code leaves that subset (``reaches``); a run whose code has any is shown as *reported by
the code* (``Trace.reaches``), and the server checks and offers no fixes for it.

The subset is an allow-list: imports from ``MODULES`` only (``os``/``sys`` for ``MODULE_NAMES``
only), and outside it is

* a name, attribute, keyword argument, ``match`` pattern attribute or string constant naming a
  dunder or private attribute (``_private``: the few every autograd lesson reads excepted), a
  frame, code, traceback, generator or cell attribute (``FRAME_ATTRIBUTES``), or one of the names
  the tracer puts in the snippet's globals (``TRACER_NAMES``); an attribute naming a module that
  reaches the process or writes files (``ATTRIBUTES``: torch's and numpy's modules re-export them,
  ``torch.serialization.pickle``, ``torch.storage.io``, ``torch.os``);
* a call that resolves attributes or code from strings or bytes (``BUILTINS``, ``REFLECTIVE``:
  ``getattr``, ``operator.attrgetter``, ``typing.get_type_hints``, ``string.Formatter``, ``str.format``
  on a string the code builds or whose fields read attributes), that unpickles (``load``/``loads``
  but ``json``'s, ``torch.load(…, weights_only=True)`` and ``numpy.load`` without ``allow_pickle``),
  or a part of torch or numpy that loads or generates code, or opens any path for writing (a module
  of the code's own, then imported under a name the subset allows) (``MODULE_PARTS``: ``torch.jit``,
  ``torch.fx``, ``torch.library``, ``torch.overrides``, torch's datapipes helpers, numpy's
  ``DataSource``, …);
* string annotations (and ``from __future__ import annotations``, which makes every annotation one);
* a class that can run code inside the tracer's own calls or change what torch hands it: a
  ``torch.Tensor`` subclass, a dunder method outside ``SAFE_DUNDERS`` (``__torch_function__``,
  ``__getattr__``, ``__del__``, …), a ``metaclass=``, a class made at run time (``type`` with a
  namespace, a metaclass called, ``make_dataclass``, a functional ``Enum``), a base the code computes;
* writes to what the tracer reads through: an attribute of an imported module or class
  (``torch.Tensor.tolist = …``), a tensor method shadowed on an object (``x.to_dense = …``,
  ``TRACER_READS``), ``sys.stdout``/``sys.stderr`` (the tracer's capture) beyond writing to them.

It is a look at the text, so it errs on the side of flagging; it narrows what code can do to its
own process, it does not close it (torch itself has memory-unsafe corners): see README, "What
gradstep vouches for". Linear in the code's size (one parse and one walk, at most ``MAX_CODE``
characters: a snippet is smaller); code that does not parse has nothing listed (its run stops at
the syntax error before any line runs); code nested too deeply to parse or walk here is listed as
such.
"""

from __future__ import annotations

import ast
import re
import string

from gradstep.tracer import lines

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
# sys.stdout and sys.stderr are the tracer's own capture (tracer/capture.py Output: its ``parts``,
# ``cap``… are the recorded output and its limit): code may write to them, and print to them.
STREAM_USES = frozenset({"write", "flush", "writelines"})
# Parts of allowed packages that load, compile or generate code, reach the process, or change what
# torch returns to everyone (the tracer included). As an attribute, an import path or a name.
MODULE_PARTS = frozenset(
    {
        "cpp_extension", "hub", "package", "ctypeslib", "multiprocessing", "distributed", "serialization",
        "library", "overrides", "fx", "jit", "model_zoo", "export", "onnx", "f2py", "distutils",
        "stride_tricks",  # numpy.lib.stride_tricks.as_strided: memory outside the array, unchecked
        "datapipes",  # torch.utils.data.datapipes.utils.common opens any path in any mode: a module written
        "show_pickle", "model_dump", "collect_env",
        "hipify", "gds",  # torch.utils.hipify's openf(path, mode), torch.cuda.gds's GdsFile(path, flags)
    }
)  # fmt: skip
# The same, under names a snippet also uses for its own things (a ResNet's ``self.bottleneck``, a
# dataset's ``.classes``): outside only as ``torch.utils.<name>`` / ``torch.<name>``.
UTILS_PARTS = frozenset({"benchmark", "bottleneck"})  # torch.utils.benchmark runs code from strings
TORCH_PARTS = frozenset({"classes"})  # torch.classes: C++ classes, loaded libraries'
BUILTINS = frozenset(
    {
        "eval", "exec", "compile", "__import__", "globals", "locals", "vars", "getattr", "setattr", "delattr",
        "open", "breakpoint", "input", "help", "__builtins__", "__loader__", "__spec__",
    }
)  # fmt: skip
# Calls that resolve attributes, classes or code from strings, or set attributes by name, or hand
# out what the tracer registered (a hook handle's dicts hold every hook on that node, the tracer's).
REFLECTIVE = frozenset(
    {
        "attrgetter", "methodcaller", "get_type_hints", "ForwardRef", "Formatter", "Template", "vformat",
        "get_field", "update_wrapper", "make_dataclass", "hooks_dict_ref", "extra_dict_ref", "showwarning",
        "load_library", "import_module", "GraphModule", "call_method", "call_module", "get_attr", "create_node",
        "python_code", "recompile", "Unpickler", "ForkingPickler", "open_memmap", "new_class", "FunctionType",
        "CodeType", "LambdaType",
        "DataSource",  # numpy's: opens an existing path for writing (a module of the code's own, imported)
    }
)  # fmt: skip
DUNDERS = frozenset({"__init__", "__name__", "__version__", "__doc__", "__qualname__", "__module__"})
# Dunder names a snippet may use as plain names (``if __name__ == "__main__"``).
DUNDER_NAMES = frozenset({"__name__", "__doc__", "__debug__", "__file__"})
# Dunder methods a class may define: Python calls them on the class's own objects, as the code's own
# operations do. Outside: __torch_function__/__torch_dispatch__ (torch calls them for every op on
# those objects, the tracer's reads included), __getattr__/__getattribute__/__setattr__/__delattr__/
# __dir__ (they answer the tracer's own look at an object), __del__ (runs wherever a collection
# happens, inside the tracer too), __init_subclass__/__class_getitem__/__set_name__/descriptors,
# __reduce__/__getstate__/__setstate__/__copy__/__deepcopy__, numpy's and dlpack's protocols.
SAFE_DUNDERS = frozenset(
    {
        "__init__", "__new__", "__post_init__", "__call__", "__len__", "__getitem__", "__setitem__",
        "__delitem__", "__contains__", "__iter__", "__next__", "__reversed__", "__repr__", "__str__",
        "__format__", "__bool__", "__enter__", "__exit__", "__eq__", "__ne__", "__hash__", "__lt__", "__le__",
        "__gt__", "__ge__", "__add__", "__radd__", "__iadd__", "__sub__", "__rsub__", "__isub__", "__mul__",
        "__rmul__", "__imul__", "__truediv__", "__rtruediv__", "__itruediv__", "__floordiv__",
        "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__", "__matmul__", "__rmatmul__",
        "__neg__", "__pos__", "__abs__", "__int__", "__float__", "__index__", "__slots__", "__doc__",
        "__module__", "__qualname__",
    }
)  # fmt: skip
PRIVATE = frozenset({"_version", "_base", "_is_view", "_grad_fn", "_grad"})
PRIVATE_PREFIXES = ("_saved_", "_raw_saved_")  # what autograd nodes save: read in every autograd lesson
# The attributes of frames, tracebacks, code objects, generators, coroutines, async generators and
# cells that CPython 3.11 has (tests/server/test_reach_routes.py checks each is real), and ``mro``.
# Exactly these: ``f_out`` or ``co_weight`` are a snippet's own names. (Python 2's ``func_*`` and
# ``im_*`` do not exist on Python 3 objects, so they name nothing here.)
FRAME_ATTRIBUTES = frozenset(
    {
        "f_back", "f_builtins", "f_code", "f_globals", "f_lasti", "f_lineno", "f_locals", "f_trace",
        "f_trace_lines", "f_trace_opcodes",
        "tb_frame", "tb_lasti", "tb_lineno", "tb_next",
        "gi_code", "gi_frame", "gi_running", "gi_yieldfrom", "gi_suspended",
        "cr_await", "cr_code", "cr_frame", "cr_origin", "cr_running", "cr_suspended",
        "ag_await", "ag_code", "ag_frame", "ag_running",
        "co_argcount", "co_cellvars", "co_code", "co_consts", "co_exceptiontable", "co_filename",
        "co_firstlineno", "co_flags", "co_freevars", "co_kwonlyargcount", "co_linetable", "co_lnotab",
        "co_name", "co_names", "co_nlocals", "co_posonlyargcount", "co_qualname", "co_stacksize",
        "co_varnames", "co_positions", "co_lines",
        "cell_contents", "mro",
    }
)  # fmt: skip
# Attributes that reach a process, write raw bytes to a path, or are modules that do (torch's and
# numpy's modules re-export them: ``torch.serialization.pickle``, ``numpy.lib.format.pickle``).
ATTRIBUTES = frozenset(
    {
        "sys", "os", "builtins", "importlib", "subprocess", "ctypes", "gc", "inspect", "tofile", "fromfile",
        "from_file", "savetxt", "savez", "savez_compressed", "memmap", "write_bytes", "write_text",
        "pickle", "cPickle", "pickletools", "copyreg", "marshal", "shelve", "dill", "cloudpickle", "io",
        "types", "traceback", "linecache", "threading", "signal", "atexit", "runpy", "codeop", "pdb", "timeit",
        "cProfile", "codecs", "fileinput", "urllib",
        "bdb", "dis", "faulthandler", "tracemalloc", "mmap", "posix", "socket", "shutil", "tempfile",
        "pathlib", "weakref", "logging", "zipfile", "tarfile", "gzip", "bz2", "lzma", "concurrent",
        "asyncio", "mp", "python_multiprocessing", "zipimport",
    }
)  # fmt: skip
# torch's own submodules that share a name with one of ATTRIBUTES: fine as ``torch.<name>``.
TORCH_OWN = frozenset({"types", "signal"})
# Tensor and module methods the tracer calls on the snippet's own objects when it reads them
# (grads.py, graph.py, engine.py, names.py): shadowing one on an object makes the tracer read a lie.
TRACER_READS = frozenset(
    {
        "numel", "to_dense", "coalesce", "values", "is_contiguous", "reshape", "cpu", "untyped_storage",
        "data_ptr", "detach", "clone", "is_floating_point", "is_complex", "float", "view", "tolist", "item",
        "numpy", "register_hook", "register_prehook", "retain_grad", "requires_grad_", "element_size",
        "nbytes", "resolve_conj", "named_parameters", "named_modules", "named_buffers", "named_children",
        "parameters", "modules", "children",
    }
)  # fmt: skip
TENSOR_CLASSES = frozenset({"Tensor", "Parameter", "Buffer", "UninitializedParameter", "UninitializedBuffer"})
TENSOR_CLASSES |= {"TensorBase", "MaskedTensor"}
ENUMS = frozenset({"Enum", "IntEnum", "Flag", "IntFlag", "StrEnum"})  # called with members: a class made
LOADS = frozenset({"load", "loads"})
# The names the tracer puts in the snippet's globals (tracer/lines.py, tracer/snippet.py): its line
# markers are the recorder's own methods.
TRACER_NAMES = frozenset({lines.LINE, lines.ENTER, lines.EXIT, lines.LOOP})
PATHS = ("/proc", "/dev/")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A name in code that is a builtin class (a base, or a class ``match`` reads itself for)
_BUILTIN_CLASSES = frozenset(
    {
        "object", "int", "float", "complex", "bool", "str", "bytes", "bytearray", "list", "tuple", "dict",
        "set", "frozenset", "Exception", "BaseException", "ValueError", "TypeError", "RuntimeError",
        "KeyError", "IndexError", "AttributeError", "ArithmeticError", "ZeroDivisionError", "LookupError",
        "NotImplementedError", "StopIteration", "Warning", "UserWarning", "RuntimeWarning", "AssertionError",
    }
)  # fmt: skip
_SELF_MATCHING = frozenset(
    {"bool", "bytearray", "bytes", "dict", "float", "frozenset", "int", "list", "set", "str", "tuple"}
)
_SHOWN = frozenset(
    {"print", "str", "repr", "isinstance", "issubclass", "id", "hash"}
)  # a class only looked at


def reaches(code: str) -> list[dict]:
    """``[{"line", "what"}]``: where ``code`` leaves the subset gradstep vouches for, in order, at
    most ``MAX_REACHES``."""
    if len(code) > MAX_CODE:
        return [{"line": 1, "what": "code too long to read through"}]
    too_deep = [{"line": 1, "what": "code nested too deeply to read through"}]
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return []
    except (RecursionError, MemoryError):  # the child's parser may get further (its own recursion limit)
        return too_deep
    look = _Look()
    try:
        look.visit(tree)
    except RecursionError:
        return too_deep
    found = sorted(look.found, key=lambda r: r["line"])
    return found[:MAX_REACHES]


class _Look(ast.NodeVisitor):
    def __init__(self) -> None:
        self.found: list[dict] = []
        self.bound: dict[str, str] = {}  # a name bound to a MODULE_NAMES module -> the module
        self.imported: dict[str, str] = {}  # a name an import binds -> what it names ("torch.nn")
        self.classes: set[str] = set()  # the snippet's own classes (defined inside the subset)
        self.ok: set[int] = set()  # id() of nodes a parent has already read as inside the subset
        self.annotation = 0  # inside an annotation: a string there is evaluated by name lookups

    def note(self, node: ast.AST, what: str) -> None:
        self.found.append({"line": getattr(node, "lineno", 1), "what": what})

    # imports

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name in MODULE_NAMES:
                self.bound[alias.asname or alias.name] = alias.name
            elif not _allowed_module(alias.name):
                self.note(node, f"import {alias.name}")
            name = alias.asname or alias.name.split(".")[0]
            self.imported[name] = alias.name if alias.asname else name

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if module == "__future__" and any(a.name == "annotations" for a in node.names):
            return self.note(node, "from __future__ import annotations (every annotation a string)")
        if module in MODULE_NAMES and not node.level:
            names = [a.name for a in node.names if a.name not in MODULE_NAMES[module]]
        elif node.level or not _allowed_module(module):
            return self.note(node, f"from {'.' * node.level}{module} import …")
        else:
            names = [
                a.name
                for a in node.names
                if a.name == "*"
                or _outside_attribute(a.name)
                or (a.name in LOADS and module != "json")
                or (a.name in ATTRIBUTES and not (module == "torch" and a.name in TORCH_OWN))
                or (module == "torch.utils" and a.name in UTILS_PARTS)
                or (module == "torch" and a.name in TORCH_PARTS)
            ]
        for alias in node.names:
            self.imported[alias.asname or alias.name] = f"{module}.{alias.name}"
        if names:
            self.note(node, f"from {module} import {names[0]}")

    # names and attributes

    def visit_Name(self, node: ast.Name) -> None:
        name = node.id
        if id(node) in self.ok:
            return
        if name in TRACER_NAMES:
            self.note(node, f"{name}, the tracer's own")
        elif name in BUILTINS:
            self.note(node, name)
        elif name in self.bound:  # the module itself passed around: anything can follow
            self.note(node, f"{self.bound[name]} itself")
        elif _dunder(name) and name not in DUNDER_NAMES:
            self.note(node, name)
        elif name == "type":
            self.note(node, "type as a value (it makes classes)")
        elif name in REFLECTIVE or _metaclass(name):
            self.note(node, name)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr, value = node.attr, node.value
        module = self.bound.get(value.id) if isinstance(value, ast.Name) else None
        if module is not None:  # os.path, sys.exit: the listed names only
            if attr not in MODULE_NAMES[module]:
                self.note(node, f"{module}.{attr}")
            elif module == "sys" and attr in ("stdout", "stderr") and id(node) not in self.ok:
                self.note(node, f"sys.{attr} as a value (the tracer's own capture)")
            return
        if id(node) in self.ok:
            pass
        elif attr == "__class__":
            self.note(node, ".__class__ as a value (it can be type)")
        elif attr in ("format", "format_map"):
            if not _plain_format(value):
                self.note(node, f".{attr} on a string the code builds or whose fields read attributes")
        elif attr in LOADS:
            self.note(node, f".{attr} (it can unpickle)")
        elif (attr in UTILS_PARTS and _last(value) == "utils") or (
            attr in TORCH_PARTS and self._is_torch(value)
        ):
            self.note(node, f".{attr}")
        elif attr in ATTRIBUTES and not (attr in TORCH_OWN and self._is_torch(value)):
            self.note(node, f".{attr}")
        elif _outside_attribute(attr):
            self.note(node, f".{attr}")
        if isinstance(node.ctx, ast.Store | ast.Del):
            self._written(node)
        if isinstance(value, ast.Call) and _is_type_call(value) and not _outside_attribute(attr):
            self.ok.add(id(value))  # type(x).__name__, type(x).some_public: a look, not the class
        if attr in ("__name__", "__qualname__", "__module__") and isinstance(value, ast.Attribute):
            if value.attr == "__class__":
                self.ok.add(id(value))
        self.visit(value)

    def _is_torch(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Name) and self.imported.get(node.id) == "torch"

    def _written(self, node: ast.Attribute) -> None:
        root = _root(node.value)
        if node.attr in TRACER_READS:
            self.note(node, f".{node.attr} set (the tracer reads tensors through it)")
        elif root in self.imported and not _under(node.value, "backends"):  # torch.backends.cudnn flags
            self.note(node, f"{self.imported[root]}'s .{node.attr} set (torch's own, which the tracer uses)")

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg is not None and _names_attribute(node.arg):  # dict(__getattr__=…), a namespace
            self.note(node, f"{node.arg}=")
        self.visit(node.value)

    def visit_Constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, str | bytes):
            return
        if self.annotation:
            self.note(node, "a string annotation (evaluated by name)")
        text = node.value if isinstance(node.value, str) else node.value.decode("latin-1")
        if any(p in text for p in PATHS):
            self.note(node, "a path into /proc or /dev")
        for word in _WORD.findall(text):
            if _names_attribute(word) and word != "__main__":
                self.note(node, f"a string naming {word}")
                break

    # calls

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id == "type":
            self.ok.add(id(func))
            if len(node.args) != 1 or node.keywords:
                self.note(node, "type(…) with a namespace (a class made at run time)")
            elif isinstance(node.args[0], ast.Starred):
                self.note(node, "type(*…)")
            elif id(node) not in self.ok:  # x = type(y): it can be type itself, or a metaclass
                self.note(node, "type(…) as a value (it can be type itself)")
        elif isinstance(func, ast.Call) and _is_type_call(func):
            self.note(node, "type(…)(…): a class's class called")
            self.ok.add(id(func))
        if _last(func) in ENUMS and len(node.args) + len(node.keywords) > 1:
            self.note(node, f"{_last(func)}(…) with members (a class made at run time)")
        if isinstance(func, ast.Name) and func.id in _SHOWN:  # print(type(x)), isinstance(x, type)
            for arg in node.args:
                self._looked_at(arg)
        if isinstance(func, ast.Name) and func.id == "print":
            for kw in node.keywords:
                if kw.arg == "file" and _is_stream(kw.value, self.bound):
                    self.ok.add(id(kw.value))
        if (
            isinstance(func, ast.Attribute)
            and func.attr in STREAM_USES
            and _is_stream(func.value, self.bound)
        ):
            self.ok.add(id(func.value))
        if isinstance(func, ast.Attribute) and func.attr in LOADS and self._safe_load(func, node):
            self.ok.add(id(func))
        for kw in node.keywords:
            if kw.arg == "allow_pickle" and not (
                isinstance(kw.value, ast.Constant) and kw.value.value is False
            ):
                self.note(kw, "allow_pickle (it can unpickle)")
        self.generic_visit(node)

    def _looked_at(self, arg: ast.expr) -> None:
        for item in arg.elts if isinstance(arg, ast.Tuple) else [arg]:
            if isinstance(item, ast.Call) and _is_type_call(item):
                self.ok.add(id(item))
            elif isinstance(item, ast.Name) and item.id == "type":
                self.ok.add(id(item))
            elif isinstance(item, ast.Attribute) and item.attr == "__class__":
                self.ok.add(id(item))

    def visit_Compare(self, node: ast.Compare) -> None:
        for operand in (node.left, *node.comparators):  # type(x) is torch.Tensor: a look
            self._looked_at(operand)
        self.generic_visit(node)

    def _safe_load(self, func: ast.Attribute, call: ast.Call) -> bool:
        """json.load(s); torch.load(…, weights_only=True); numpy.load without allow_pickle."""
        root = self.imported.get(func.value.id, "") if isinstance(func.value, ast.Name) else ""
        keywords = {kw.arg: kw.value for kw in call.keywords}
        if root == "json":
            return True
        if root == "torch":
            flag = keywords.get("weights_only")
            return isinstance(flag, ast.Constant) and flag.value is True
        if root == "numpy":
            flag = keywords.get("allow_pickle", ast.Constant(False))
            return isinstance(flag, ast.Constant) and flag.value is False
        return False

    # definitions

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for kw in node.keywords:
            if kw.arg == "metaclass":
                self.note(kw, "metaclass=")
        for base in node.bases:
            self._base(base)
        for stmt in node.body:
            for name_node, name in _defined(stmt):
                if _dunder(name) and name not in SAFE_DUNDERS:
                    self.note(stmt, f"a class defining {name}")
                if name_node is not None:
                    self.ok.add(id(name_node))
                if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                    self.ok.add(id(stmt))
        self.classes.add(node.name)
        self.generic_visit(node)

    def _base(self, base: ast.expr) -> None:
        if isinstance(base, ast.Subscript):  # Generic[T], Dataset[int]
            base = base.value
        last = _last(base)
        if last in TENSOR_CLASSES:
            self.note(base, f"a subclass of {last} (the tracer reads tensors through its methods)")
        elif isinstance(base, ast.Name):
            known = base.id in _BUILTIN_CLASSES or base.id in self.classes or base.id in self.imported
            if not known:
                self.note(base, f"a class based on {base.id}, which the code computes")
        elif not (isinstance(base, ast.Attribute) and _root(base) in self.imported):
            self.note(base, "a class based on a value the code computes")

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if _dunder(node.name) and id(node) not in self.ok:
            self.note(node, f"a function named {node.name}")
        for decorator in node.decorator_list:
            self.visit(decorator)
        self.visit(node.args)
        if node.returns is not None:
            self._annotation(node.returns)
        for stmt in node.body:
            self.visit(stmt)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_arg(self, node: ast.arg) -> None:
        if node.annotation is not None:
            self._annotation(node.annotation)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.target)
        self._annotation(node.annotation)
        if node.value is not None:
            self.visit(node.value)

    def _annotation(self, node: ast.expr) -> None:
        self.annotation += 1
        try:
            self.visit(node)
        finally:
            self.annotation -= 1

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self.annotation and _last(node.value) == "Literal":  # Literal["mean"]: values, never evaluated
            self.visit(node.value)
            outer, self.annotation = self.annotation, 0
            try:
                self.visit(node.slice)
            finally:
                self.annotation = outer
            return
        self.generic_visit(node)

    # match

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        for attr in node.kwd_attrs:
            if _dunder(attr) or _outside_attribute(attr):
                self.note(node, f"a match pattern reading .{attr}")
        if node.patterns:
            name = node.cls.id if isinstance(node.cls, ast.Name) else None
            if name not in _SELF_MATCHING and name not in self.classes:
                self.note(node, f"a match pattern reading the attributes {_last(node.cls)} lists")
        self.generic_visit(node)


def _allowed_module(name: str) -> bool:
    parts = name.split(".")
    outside = MODULE_PARTS | UTILS_PARTS | TORCH_PARTS | ATTRIBUTES
    return parts[0] in MODULES and not any(p in outside or _private(p) for p in parts[1:])


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and len(name) > 4


def _private(name: str) -> bool:
    """A dunder or private name, other than the few every autograd lesson reads."""
    if _dunder(name):
        return name not in DUNDERS
    if name.strip("_") == "":  # ``_``, a throwaway name
        return False
    return name.startswith("_") and name not in PRIVATE and not name.startswith(PRIVATE_PREFIXES)


def _metaclass(name: str) -> bool:
    return name.endswith("Meta") or name == "EnumType"


def _names_attribute(name: str) -> bool:
    """A dunder, private, frame (…) attribute or a tracer's name: outside as a string or keyword too."""
    return _private(name) or name in FRAME_ATTRIBUTES or name in TRACER_NAMES


def _outside_attribute(name: str) -> bool:
    """An attribute name outside the subset, whatever it is read from."""
    return (
        _private(name)
        or name in FRAME_ATTRIBUTES
        or name in REFLECTIVE
        or name in MODULE_PARTS
        or name in TRACER_NAMES
        or _metaclass(name)
    )


def _root(node: ast.expr) -> str | None:
    """The name an attribute chain starts from (``torch`` for ``torch.nn.Module.forward``)."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _last(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _under(node: ast.expr, part: str) -> bool:
    while isinstance(node, ast.Attribute):
        if node.attr == part:
            return True
        node = node.value
    return False


def _is_type_call(node: ast.Call) -> bool:
    return isinstance(node.func, ast.Name) and node.func.id == "type" and len(node.args) == 1


def _is_stream(node: ast.expr, bound: dict[str, str]) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr in ("stdout", "stderr")
        and isinstance(node.value, ast.Name)
        and bound.get(node.value.id) == "sys"
    )


def _plain_format(value: ast.expr) -> bool:
    """A string constant whose replacement fields read no attribute or item (``"{:.3f}"``)."""
    if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
        return False
    specs = [value.value]
    while specs:
        try:
            fields = list(string.Formatter().parse(specs.pop()))
        except ValueError:  # not a format string: format raises before reading anything
            continue
        for _, field, spec, _ in fields:
            if field is not None and ("." in field or "[" in field):
                return False
            if spec and "{" in spec:
                specs.append(spec)
    return True


def _defined(stmt: ast.stmt) -> list[tuple[ast.Name | None, str]]:
    """The names a class-body statement defines: ``(the Name node if any, the name)``."""
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [(None, stmt.name)]
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, ast.AnnAssign | ast.AugAssign):
        targets = [stmt.target]
    out: list[tuple[ast.Name | None, str]] = []
    while targets:
        target = targets.pop()
        if isinstance(target, ast.Name):
            out.append((target, target.id))
        elif isinstance(target, ast.Tuple | ast.List):
            targets.extend(target.elts)
    return out
