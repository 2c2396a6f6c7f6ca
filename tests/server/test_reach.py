"""The server's own look at a snippet's code (gradstep.reach): code outside the subset gradstep
vouches for is listed, code that uses torch and plain Python is not.

The reaching examples are the ways a snippet can write its own result or steer the tracer (each
was tried against a real server in tests/server/test_trust.py or the attack passes); the plain
ones are every curated snippet and case, and what pasted learner code imports. The reflection
routes, as families and each shown real in plain Python, are in test_reach_routes.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from gradstep.reach import reaches
from testkit.learner_code import REBOUND_LEAF_LOOP

REPO = Path(__file__).resolve().parents[2]
REACHING = {
    "the result descriptor, written directly": ("import os, struct\nos.write(3, b'R')\n", "os.write"),
    "os passed around": ("import os as o\nw = o\nw.write(3, b'x')\n", "os itself"),
    "a name taken from os": ("from os import write\nwrite(3, b'')\n", "from os import write"),
    "the tracer's module, through sys": ("import sys\nm = sys.modules['gradstep']\n", "sys.modules"),
    "a name built at run time": ("import torch\ngetattr(torch, 'lo' + 'ad')\n", "getattr"),
    "the interpreter's classes": ("x = ().__class__.__bases__[0].__subclasses__()\n", ".__bases__"),
    "frames, through an exception": (
        "try:\n    1 / 0\nexcept Exception as e:\n    e.__traceback__\n",
        ".__traceback__",
    ),
    "raw bytes to a descriptor's path": ("import numpy as np\nnp.array([1]).tofile(p)\n", ".tofile"),
    "a path into /proc": ("import torch\ntorch.save(1, '/proc/self/fd/3')\n", "a path into /proc or /dev"),
    "torch's internals": ("import torch\ntorch._C._set_grad_enabled(False)\n", "._C"),
    "code loaded from elsewhere": ("import torch\ntorch.hub.load('a', 'b')\n", ".hub"),
    "another module": ("import ctypes\n", "import ctypes"),
    "exec": ("exec('print(1)')\n", "exec"),
    "open": ("open('/tmp/x', 'w')\n", "open"),
    "a relative import": ("from . import tracer\n", "from . import …"),
}
PLAIN = {
    "learner loop": REBOUND_LEAF_LOOP,
    "saved tensors and versions": (
        "import torch\nx = torch.ones(2, requires_grad=True)\ny = x.exp()\n"
        "print(y.grad_fn._saved_result, x._version, y.grad_fn._raw_saved_result)\n"
    ),
    "a module of one's own": (
        "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.l = nn.Linear(2, 2)\nprint(type(M()).__name__, torch.__version__)\n"
    ),
    "pasted companions": (
        "import os, sys\nfrom tqdm import tqdm\nimport matplotlib.pyplot as plt\nimport numpy as np\n"
        "from torch.utils.data import DataLoader, TensorDataset\nos.makedirs('out', exist_ok=True)\n"
        "path = os.path.join('out', 'x')\nsys.path.append('.')\nprint(sys.version)\n"
    ),
}


@pytest.mark.parametrize("name", REACHING)
def test_code_that_can_reach_its_process_is_listed_with_its_line(name):
    code, what = REACHING[name]
    found = reaches(code)
    assert what in [r["what"] for r in found], found
    assert all(1 <= r["line"] <= code.count("\n") for r in found)


@pytest.mark.parametrize("name", PLAIN)
def test_torch_and_plain_python_reach_nothing(name):
    assert reaches(PLAIN[name]) == []


def test_no_curated_snippet_or_case_is_listed():
    files = sorted((REPO / "snippets").glob("*.py")) + sorted((REPO / "tests" / "cases").glob("*.py"))
    assert len(files) > 50
    assert {f.name: reaches(f.read_text()) for f in files if reaches(f.read_text())} == {}


def test_code_that_does_not_parse_lists_nothing_and_the_list_is_capped():
    assert reaches("def (:\n") == []
    assert len(reaches("import os\n" + "os.write(3, b'')\n" * 50)) == 8


@pytest.mark.parametrize("depth", [900, 3000])
def test_code_nested_too_deeply_to_read_here_is_listed_not_vouched_for(depth):
    # 900: parses, too deep to walk; 3000: too deep for this parser, which the child's limits may pass
    assert reaches("x = " + "-" * depth + "1\n") == [
        {"line": 1, "what": "code nested too deeply to read through"}
    ]


def test_code_too_long_to_read_is_listed():
    assert reaches("x = 1\n" * 40_000) == [{"line": 1, "what": "code too long to read through"}]
