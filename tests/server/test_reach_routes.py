"""The ways out of the subset gradstep vouches for (gradstep.reach), as families: each route is a
snippet that uses it, listed with the line it is on, and where plain Python can show it, the same
snippet run in a fresh interpreter proves the route is real (it got ``__import__``, the ``builtins``
module, a frame, a forged read of a tensor). Harmless look-alikes are not listed.

A route's line is the one marked ``# <-``. Its proof is an expression over the snippet's globals
(``builtins`` and ``types`` are there for the comparison), true when the route reached what it
says; ``None`` where only a real sandbox or the tracer would show it (see the tracer tests here).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import NamedTuple

import pytest
from gradstep.reach import FRAME_ATTRIBUTES, reaches
from gradstep.tracer.recorder import record


class Route(NamedTuple):
    code: str
    what: str
    proof: str | None = None


DUNDER_SELF = '"_" * 2 + "self" + "_" * 2'  # built at run time: no string names it
ROUTES = {
    # attributes resolved from strings
    "attrgetter, a dunder path": Route(
        "import operator\ngot = operator.attrgetter('__self__.__import__')(print)  # <-\n",
        ".attrgetter",
        "got is builtins.__import__",
    ),
    "attrgetter, a path built at run time": Route(
        f"import operator\nname = {DUNDER_SELF}\ngot = operator.attrgetter(name)(print)  # <-\n",
        ".attrgetter",
        "got is builtins",
    ),
    "attrgetter, imported by name": Route(
        f"from operator import attrgetter  # <-\ngot = attrgetter({DUNDER_SELF})(print)\n",
        "from operator import attrgetter",
        "got is builtins",
    ),
    "methodcaller": Route(
        "import operator\n"
        f"got = operator.methodcaller('_' * 2 + 'getattribute' + '_' * 2, {DUNDER_SELF})(print)  # <-\n",
        ".methodcaller",
        "got is builtins",
    ),
    "string.Formatter().get_field": Route(
        "import string\ngot = string.Formatter().get_field('0.__self__', (print,), {})[0]  # <-\n",
        ".Formatter",
        "got is builtins",
    ),
    "str.format, an attribute field": Route(
        "got = '{0.__self__}'.format(print)  # <-\n", ".format on a string", "\"module 'builtins'\" in got"
    ),
    "str.format, a format string built at run time": Route(
        f"spec = '{{0.' + {DUNDER_SELF} + '}}'\ngot = spec.format(print)  # <-\n",
        ".format on a string",
        "\"module 'builtins'\" in got",
    ),
    "str.format_map, an attribute field": Route(
        "got = '{p.__self__}'.format_map({'p': print})  # <-\n",
        ".format_map on a string",
        "\"module 'builtins'\" in got",
    ),
    "torch.fx, a method named at run time": Route(
        "import torch\ng = torch.fx.Graph()  # <-\na = g.placeholder('a')\n"
        f"n = g.call_method('_' * 2 + 'getattribute' + '_' * 2, (a, {DUNDER_SELF}))\ng.output(n)\n"
        "got = torch.fx.GraphModule(torch.nn.Module(), g)(print)\n",
        ".fx",
        "got is builtins",
    ),
    "functools.update_wrapper, an attribute set by name": Route(
        "import functools, torch\nclass Src:\n    def to_dense(self):\n        return 'forged'\n"
        "x = torch.ones(2)\nfunctools.update_wrapper(x, Src(), assigned=('to_' + 'dense',), updated=())  # <-\n"
        "got = x.to_dense()\n",
        ".update_wrapper",
        "got == 'forged'",
    ),
    "a match class pattern's keyword": Route(
        "match print:\n    case object(__self__=b):  # <-\n        got = b\n",
        "a match pattern reading .__self__",
        "got is builtins",
    ),
    "a match class pattern reading what a library class lists": Route(
        "import torch\nmatch torch.Size([2]):\n    case torch.Size(a):  # <-\n        got = a\n",
        "a match pattern reading the attributes Size lists",
    ),
    # strings evaluated as code
    "a string annotation read by typing.get_type_hints": Route(
        "import typing\ndef f(x: 'print.__self__'):  # <-\n    pass\ngot = typing.get_type_hints(f)['x']\n",
        "a string annotation",
        "got is builtins",
    ),
    "a string annotation on a variable": Route("x: 'int' = 1  # <-\n", "a string annotation"),
    "from __future__ import annotations": Route(
        "from __future__ import annotations  # <-\ndef f(x: int):\n    pass\n",
        "from __future__ import annotations",
    ),
    # unpickling and code loading
    "torch.serialization.pickle": Route(
        "import torch\n"
        "got = torch.serialization.pickle.loads(b'c' + b'builtins\\n' + b'_' * 2 + b'import' + b'_' * 2 + b'\\n.')  # <-\n",
        ".serialization",
        "got is builtins.__import__",
    ),
    "torch.load without weights_only=True": Route(
        "import torch\ntorch.load('m.pt')  # <-\n", ".load (it can unpickle)"
    ),
    "torch.load with weights_only=False": Route(
        "import torch\ntorch.load('m.pt', weights_only=False)  # <-\n", ".load (it can unpickle)"
    ),
    "torch.load, imported by name": Route("from torch import load  # <-\n", "from torch import load"),
    "numpy.load with allow_pickle": Route(
        "import numpy as np\nnp.load('a.npy', allow_pickle=True)  # <-\n", "allow_pickle"
    ),
    "torch.jit": Route("import torch\ntorch.jit.script(lambda x: x)  # <-\n", ".jit"),
    "torch.library": Route("import torch\ntorch.library.Library('aten', 'IMPL')  # <-\n", ".library"),
    "torch.library, imported": Route(
        "from torch.library import custom_op  # <-\n", "from torch.library import …"
    ),
    "torch.overrides": Route("import torch\ntorch.overrides.TorchFunctionMode  # <-\n", ".overrides"),
    "torch.hub": Route("import torch\ntorch.hub.load('a', 'b')  # <-\n", ".hub"),
    "torch.utils.cpp_extension": Route(
        "import torch\ntorch.utils.cpp_extension.load_inline('m', '')  # <-\n", ".cpp_extension"
    ),
    "torch.package": Route("import torch\ntorch.package.PackageImporter('p')  # <-\n", ".package"),
    "torch.export": Route("import torch\ntorch.export.export(m, (x,))  # <-\n", ".export"),
    "torch.ops.load_library": Route("import torch\ntorch.ops.load_library('x.so')  # <-\n", ".load_library"),
    "torch.classes": Route("import torch\ntorch.classes.load_library('x.so')  # <-\n", ".classes"),
    "torch.utils.benchmark": Route(
        "import torch\ntorch.utils.benchmark.Timer(stmt='print(1)').timeit(1)  # <-\n", ".benchmark"
    ),
    # modules torch and numpy re-export
    "torch.os": Route("import torch\ngot = torch.os.write  # <-\n", ".os", "got is __import__('os').write"),
    "torch.storage.io": Route(
        "import torch\ngot = torch.storage.io.FileIO  # <-\n", ".io", "got is __import__('io').FileIO"
    ),
    "torch.nn.utils.clip_grad.types": Route(
        "import torch\ngot = torch.nn.utils.clip_grad.types.new_class  # <-\n",
        ".types",
        "got is types.new_class",
    ),
    "numpy.lib.stride_tricks": Route(
        "import numpy\na = numpy.zeros(1)\ngot = numpy.lib.stride_tricks.as_strided(a, (1000,), (8,))  # <-\n",
        ".stride_tricks",
        "got.shape == (1000,)",  # 999 floats of the process's memory beyond the array, unchecked
    ),
    # a module of the code's own, written to a file and imported under a name the subset allows
    "numpy's DataSource opens a file for writing": Route(
        "import sys, torch\nimport numpy as np\ntorch.save(0, 'pandas.py')\n"
        "f = np.lib.npyio.DataSource(None).open('pandas.py', 'w')  # <-\n"
        "f.write('GOT = 1 + 1\\n')\nf.close()\nsys.path.insert(0, '.')\nimport pandas\ngot = pandas.GOT\n",
        ".DataSource",
        "got == 2",
    ),
    "torch's datapipes helpers open a file for writing": Route(
        "import sys\nfrom torch.utils.data.datapipes.utils.common import get_file_binaries_from_pathnames  # <-\n"
        "((path, f),) = get_file_binaries_from_pathnames(['seaborn.py'], 'w')\n"
        "f.write('GOT = 1 + 2\\n')\nf.close()\nsys.path.insert(0, '.')\nimport seaborn\ngot = seaborn.GOT\n",
        "from torch.utils.data.datapipes.utils.common import …",
        "got == 3",
    ),
    "torch.utils.hipify's openf opens a file for writing": Route(
        "import sys\nfrom torch.utils.hipify.hipify_python import openf  # <-\n"
        "f = openf('sklearn.py', 'w')\nf.write('GOT = 1 + 3\\n')\nf.close()\nsys.path.insert(0, '.')\n"
        "import sklearn\ngot = sklearn.GOT\n",
        "from torch.utils.hipify.hipify_python import …",
        "got == 4",
    ),
    "torch.cuda.gds opens a path with any flags": Route(
        "import torch\ntorch.cuda.gds.GdsFile('x', 65)  # <-\n", ".gds"
    ),
    # frames and code objects
    "a generator's frame": Route(
        "def g():\n    yield\nit = g()\ngot = it.gi_frame.f_globals  # <-\n",
        ".gi_frame",
        "'__builtins__' in got",
    ),
    "a traceback's frame": Route(
        "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    got = e.__traceback__.tb_frame  # <-\n",
        ".__traceback__",
        "isinstance(got, types.FrameType)",
    ),
    "a coroutine's frame": Route(
        "async def c():\n    pass\nco = c()\ngot = co.cr_frame  # <-\nco.close()\n",
        ".cr_frame",
        "isinstance(got, types.FrameType)",
    ),
    "a code object's constants": Route(
        "def g():\n    yield 'kept'\ngot = g().gi_code.co_consts  # <-\n", ".co_consts", "'kept' in got"
    ),
    "a string naming a frame attribute": Route("name = 'f_globals'  # <-\n", "a string naming f_globals"),
    # classes that run code inside the tracer's calls, or change what torch returns to it
    "a Tensor subclass's own methods": Route(
        "import torch\nclass T(torch.Tensor):  # <-\n    def to_dense(self):\n        return 'forged'\n"
        "got = torch.ones(2).as_subclass(T).to_dense()\n",
        "a subclass of Tensor",
        "got == 'forged'",
    ),
    "a class based on a value the code computes": Route(
        "import torch\nB = torch.Tensor\nclass T(B):  # <-\n    def to_dense(self):\n        return 'forged'\n"
        "got = torch.ones(2).as_subclass(T).to_dense()\n",
        "a class based on B",
        "got == 'forged'",
    ),
    "type with a namespace": Route(
        "import torch\nT = type('T', (torch.Tensor,), {'to_dense': lambda self: 'forged'})  # <-\n"
        "got = torch.ones(2).as_subclass(T).to_dense()\n",
        "type(…) with a namespace",
        "got == 'forged'",
    ),
    "type(…) as a value: type itself": Route(
        "import torch\nmeta = type(int)  # <-\nT = meta('T', (torch.Tensor,), {'to_dense': lambda self: 'forged'})\n"
        "got = torch.ones(2).as_subclass(T).to_dense()\n",
        "type(…) as a value",
        "got == 'forged'",
    ),
    ".__class__ as a value: type itself": Route(
        "import torch\nmeta = int.__class__  # <-\nT = meta('T', (torch.Tensor,), {'to_dense': lambda self: 'forged'})\n"
        "got = torch.ones(2).as_subclass(T).to_dense()\n",
        ".__class__ as a value",
        "got == 'forged'",
    ),
    "a metaclass called": Route(
        "import abc\nran = []\n"
        "T = abc.ABCMeta('T', (), {'_' * 2 + 'del' + '_' * 2: lambda self: ran.append(1)})  # <-\nT()\ngot = ran\n",
        ".ABCMeta",
        "got == [1]",  # a __del__ no string names: it runs wherever a collection happens
    ),
    "dataclasses.make_dataclass with a namespace": Route(
        "import dataclasses\nran = []\n"
        "T = dataclasses.make_dataclass('T', [], namespace={'_' * 2 + 'del' + '_' * 2: lambda s: ran.append(1)})  # <-\n"
        "T()\ngot = ran\n",
        ".make_dataclass",
        "got == [1]",
    ),
    "a functional Enum": Route("import enum\nE = enum.Enum('E', names)  # <-\n", "Enum(…) with members"),
    "metaclass=": Route("import abc\nclass T(metaclass=abc.ABCMeta):  # <-\n    pass\n", "metaclass="),
    "__torch_function__": Route(
        "import torch\nclass M:\n    @classmethod\n    def __torch_function__(cls, func, types, args=(), kwargs=None):  # <-\n"
        "        return 'forged'\ngot = torch.add(M(), 1)\n",
        "a class defining __torch_function__",
        "got == 'forged'",
    ),
    "__torch_dispatch__": Route(
        "class M:\n    def __torch_dispatch__(self, *a):  # <-\n        pass\n",
        "a class defining __torch_dispatch__",
    ),
    "__getattr__": Route(
        "class M:\n    def __getattr__(self, name):  # <-\n        pass\n", "a class defining __getattr__"
    ),
    "__getattribute__": Route(
        "class M:\n    def __getattribute__(self, name):  # <-\n        pass\n",
        "a class defining __getattribute__",
    ),
    "__del__": Route(
        "ran = []\nclass M:\n    def __del__(self):  # <-\n        ran.append(1)\nM()\ngot = ran\n",
        "a class defining __del__",
        "got == [1]",
    ),
    "__init_subclass__": Route(
        "class M:\n    def __init_subclass__(cls):  # <-\n        pass\n",
        "a class defining __init_subclass__",
    ),
    "__class_getitem__": Route(
        "class M:\n    def __class_getitem__(cls, k):  # <-\n        pass\n",
        "a class defining __class_getitem__",
    ),
    "__set_name__": Route(
        "class M:\n    def __set_name__(self, o, n):  # <-\n        pass\n", "a class defining __set_name__"
    ),
    "a dunder assigned in a class body": Route(
        "class M:\n    __getattr__ = print  # <-\n", "a class defining __getattr__"
    ),
    "a dunder keyword argument": Route("d = dict(__getattr__=print)  # <-\n", "__getattr__="),
    # writes to what the tracer reads through
    "a tensor method shadowed on the tensor": Route(
        "import torch\nx = torch.ones(2)\nx.to_dense = lambda: 'forged'  # <-\ngot = x.to_dense()\n",
        ".to_dense set",
        "got == 'forged'",
    ),
    "a tensor method replaced on torch.Tensor": Route(
        "import torch\ntorch.Tensor.numel = lambda self: 0  # <-\n", ".numel set"
    ),
    "torch's own function replaced": Route(
        "import torch\ntorch.isfinite = lambda t: 'forged'  # <-\ngot = torch.isfinite(torch.ones(1))\n",
        "torch's .isfinite set",
        "got == 'forged'",
    ),
    "a module method replaced on an imported class": Route(
        "from torch import nn\nnn.Module.named_parameters = lambda self: iter(())  # <-\n",
        ".named_parameters set",
    ),
    "a hook handle's dict: every hook on the node": Route(
        "import torch\nx = torch.ones(1, requires_grad=True)\ny = x * 2\n"
        "theirs = y.grad_fn.register_prehook(lambda g: None)\nmine = y.grad_fn.register_prehook(lambda g: None)\n"
        "got = mine.hooks_dict_ref()  # <-\n",
        ".hooks_dict_ref",
        "len(got) == 2",  # the tracer's own prehook is in that dict while a backward runs
    ),
    "the tracer's warning recorder": Route(
        "import warnings\nwarnings.showwarning = print  # <-\n", ".showwarning"
    ),
    "sys.stdout as a value": Route("import sys\nout = sys.stdout  # <-\n", "sys.stdout as a value"),
    "sys.stderr's own attributes": Route(
        "import sys\nsys.stderr.parts.clear()  # <-\n", "sys.stderr as a value"
    ),
    # the names the tracer puts in the snippet's globals
    "the tracer's line marker": Route("__gradstep_line__(1)  # <-\n", "__gradstep_line__, the tracer's own"),
    "the tracer's function markers": Route(
        "f = __gradstep_enter__  # <-\n", "__gradstep_enter__, the tracer's own"
    ),
    "the tracer's loop marker": Route("__gradstep_loop__(2)  # <-\n", "__gradstep_loop__, the tracer's own"),
    "a string naming the tracer's marker": Route(
        "name = '__gradstep_exit__'  # <-\n", "a string naming __gradstep_exit__"
    ),
    "the snippet's builtins": Route("b = __builtins__  # <-\n", "__builtins__"),
}
LOOKALIKES = {
    "names of its own shaped like frame attributes": (
        "import torch\nf_out = torch.ones(2)\nco_weight = 2\ntb_writer = None\ngi_layer = cr_loss = 0.0\n"
        "ag_news = []\nclass A:\n    pass\na = A()\na.f_out = f_out\na.co_weight = co_weight\na.func_name = 'f'\n"
        "a.im_size = 28\nprint(a.f_out, a.co_weight, a.func_name, a.im_size, 'f_out', 'co_weight')\n"
    ),
    "plain format strings": (
        "x = 1.5\nprint('{:.4f}'.format(x), '{} {name}'.format(1, name=2), '{:_}'.format(10**6))\n"
        "print('%(a)s' % {'a': 1}, f'{x:.2f}', '{0:{1}}'.format(x, 8))\n"
    ),
    "types and class names only looked at": (
        "import torch\nx = torch.ones(1)\ntry:\n    1 / 0\nexcept ZeroDivisionError as e:\n    print(type(e).__name__)\n"
        "print(type(x), x.__class__.__name__, type(x) is torch.Tensor, isinstance(x, (torch.Tensor, type)))\n"
    ),
    "loads that cannot unpickle": (
        "import json, torch\nimport numpy as np\njson.loads('1')\ntorch.load('m.pt', weights_only=True)\n"
        "np.load('a.npy')\nnp.load('a.npy', allow_pickle=False)\n"
    ),
    "torch.backends flags set": (
        "import torch\ntorch.backends.cudnn.benchmark = True\ntorch.backends.cudnn.deterministic = True\n"
    ),
    "the streams written to": (
        "import sys\nsys.stdout.write('a')\nsys.stdout.flush()\nprint('b', file=sys.stderr)\n"
    ),
    "a Dataset with its dunder methods": (
        "import torch\nclass D(torch.utils.data.Dataset):\n    def __init__(self):\n        self.x = torch.ones(4)\n"
        "    def __len__(self):\n        return 4\n    def __getitem__(self, i):\n        return self.x[i]\n"
        "    def __repr__(self):\n        return 'D'\n    __hash__ = None\nprint(len(D()), D()[0])\n"
    ),
    "a module whose attributes share names with tensor methods it does not shadow": (
        "import torch\nfrom torch import nn\nclass Norm(nn.Module):\n    def __init__(self, dim):\n        super().__init__()\n"
        "        self.dim = dim\n        self.size = dim\n        self.mean = 0.0\n        self.norm = nn.LayerNorm(dim)\n"
        "    def forward(self, x):\n        return self.norm(x)\nNorm(3)(torch.ones(2, 3)).sum().backward()\n"
    ),
    "a dataclass, an enum and a NamedTuple": (
        "import enum\nfrom dataclasses import dataclass, field\nfrom typing import NamedTuple\n@dataclass\nclass C:\n"
        "    x: int = 0\n    ys: list = field(default_factory=list)\nclass E(enum.Enum):\n    A = 1\n"
        "class P(NamedTuple):\n    a: int\n    b: float\nprint(C(), E(1), P(1, 2.0))\n"
    ),
    "Literal annotations": (
        "import torch\nfrom typing import Literal, Optional\n"
        "def f(x: torch.Tensor, reduction: Literal['mean', 'sum'] = 'mean') -> Optional[torch.Tensor]:\n"
        "    return x.mean() if reduction == 'mean' else x.sum()\n"
    ),
    "match on values, sequences, mappings and its own classes": (
        "from dataclasses import dataclass\n@dataclass\nclass Pt:\n    x: int\n    y: int\n"
        "for v in [(1, 2), 3, {'k': 4}, Pt(1, 2)]:\n    match v:\n        case (a, b):\n            print(a, b)\n"
        "        case int(n):\n            print(n)\n        case {'k': k}:\n            print(k)\n"
        "        case Pt(x, y=y):\n            print(x, y)\n"
    ),
    "its own bottleneck, a dataset's classes, and words naming torch's parts": (
        "class Data:\n    classes = ['cat', 'dog']\nclass Net:\n    def __init__(self):\n        self.bottleneck = 4\n"
        "print(Data().classes, Net().bottleneck, 'export the library, package the classes')\n"
    ),
    "torch's own submodules named like stdlib ones": (
        "import torch\nprint(torch.signal.windows.hann(4), torch.types.Number)\n"
    ),
    "the main guard and a docstring about saved tensors": (
        '"""x._version and y.grad_fn._saved_self, as every lesson reads them."""\n'
        "if __name__ == '__main__':\n    print(__doc__)\n"
    ),
}


def _marked_line(code: str) -> int:
    return next(i for i, text in enumerate(code.splitlines(), 1) if text.endswith("# <-"))


@pytest.mark.parametrize("name", ROUTES)
def test_each_route_is_listed_at_its_line(name):
    route = ROUTES[name]
    found = reaches(route.code)
    assert any(route.what in r["what"] and r["line"] == _marked_line(route.code) for r in found), found


PROVEN = [name for name, route in ROUTES.items() if route.proof]
_HARNESS = """
import builtins, json, sys, types
routes = json.loads(sys.stdin.read())
out = {}
for name, (code, proof) in routes.items():
    g = {"__name__": "__main__"}
    try:
        exec(compile(code, "<snippet>", "exec"), g)
        out[name] = bool(eval(proof, {**g, "builtins": builtins, "types": types}))
    except BaseException as e:
        out[name] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def proven(tmp_path_factory) -> dict:
    """Every proof, run in one fresh interpreter in a directory of its own (routes that patch torch
    come last)."""
    order = sorted(PROVEN, key=lambda n: ".numel" in ROUTES[n].what or "torch's" in ROUTES[n].what)
    routes = {n: (ROUTES[n].code, ROUTES[n].proof) for n in order}
    done = subprocess.run(
        [sys.executable, "-c", _HARNESS],
        input=json.dumps(routes),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path_factory.mktemp("routes"),  # the routes that write a module write it there
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", PROVEN)
def test_each_route_really_reaches_what_it_says_in_plain_python(name, proven):
    assert proven[name] is True


@pytest.mark.parametrize("name", LOOKALIKES)
def test_harmless_lookalikes_are_not_listed(name):
    assert reaches(LOOKALIKES[name]) == []


def test_every_frame_attribute_listed_is_a_real_attribute_in_this_python():
    def gen():
        yield

    async def coro():
        pass

    async def agen():
        yield

    def cell():
        v = 1
        return (lambda: v).__closure__[0]

    try:
        raise ZeroDivisionError
    except ZeroDivisionError as e:
        tb = e.__traceback__
    running = coro()
    objects = [sys._getframe(), tb, gen.__code__, gen(), running, agen(), cell(), type]
    running.close()
    assert [n for n in sorted(FRAME_ATTRIBUTES) if not any(hasattr(o, n) for o in objects)] == []


def test_python_2_names_for_function_and_method_attributes_are_not_listed():
    code = "class A:\n    pass\na = A()\na.func_code = a.func_globals = a.im_self = a.im_func = 1\n"
    assert reaches(code) == []


def _tracer_stdout(code: str) -> str:
    return record(textwrap.dedent(code))["stdout"]


def test_sys_stdout_is_the_tracers_capture_so_its_attributes_rewrite_the_recorded_output():
    # The route end to end: through the tracer itself, the program's output becomes what the code says.
    code = """
        import sys
        print("what the program printed")
        sys.stdout.parts[:] = ["forged"]
        sys.stdout.size = 6
    """
    assert _tracer_stdout(code) == "forged"
    assert "sys.stdout as a value (the tracer's own capture)" in [
        r["what"] for r in reaches(textwrap.dedent(code))
    ]
