"""A node's saved bytes count each storage once: what torch holds for it, not a sum of its slots.

Plain torch says what a node holds: the distinct storages (by data pointer) of its ``_saved_*``
tensors. ``x * x`` saves x as self and other, one storage; a view saves its base's storage.
"""

from __future__ import annotations

import pytest
import torch
from gradstep.narrate import narrate
from gradstep.printing import fmt_bytes
from gradstep.tracer import record
from testkit import truth

CASES = {
    "square_by_mul": ("x = torch.randn(1000, requires_grad=True)\ny = x * x\n", "MulBackward0"),
    "mul_by_own_view": (
        "x = torch.randn(1000, requires_grad=True)\ny = torch.mul(x, x.view(1000, 1))\n",
        "MulBackward0",
    ),
    "views_of_one_tensor": (
        "x = torch.randn(1000, requires_grad=True)\ny = x.view(10, 100) @ x.view(100, 10)\n",
        "MmBackward0",
    ),
    "view_of_another_saved_tensor": (
        "x = torch.randn(1000, requires_grad=True)\nz = torch.randn(1000, requires_grad=True)\n"
        "y = x[:500] * z[500:]\n",
        "MulBackward0",
    ),
}


def _plain_bytes(code: str, op: str) -> int:
    """Distinct storages of the node's saved tensors, as plain torch holds them."""
    globs: dict = {"__name__": "__main__"}
    exec(compile("import torch\n" + code, truth.SNIPPET, "exec"), globs)
    node = globs["y"].grad_fn
    assert type(node).__name__ == op
    storages: dict[int, int] = {}
    for attr in dir(node):
        if attr.startswith("_saved_"):
            value = getattr(node, attr)
            if isinstance(value, torch.Tensor):
                st = value.untyped_storage()
                storages[st.data_ptr()] = st.nbytes()
    return sum(storages.values())


def _node(trace: dict, op: str) -> dict:
    return next(n for n in trace["nodes"] if n["op"] == op)


@pytest.mark.parametrize("name", CASES)
def test_a_nodes_saved_bytes_are_its_distinct_storages(name):
    code, op = CASES[name]
    trace = record("import torch\n" + code)
    assert _node(trace, op)["saved_bytes"] == _plain_bytes(code, op)


def test_narration_of_x_times_x_counts_its_one_storage():
    code, op = CASES["square_by_mul"]
    trace = narrate(record("import torch\n" + code))
    built = next(s for s in trace["steps"] if s["kind"] == "forward" and s["line"] == 3)
    held = fmt_bytes(_plain_bytes(code, op))
    assert f"saved other = x and self = x, {held})" in built["explanation"]


@pytest.mark.parametrize("name", CASES)
def test_narration_says_the_saved_bytes_the_trace_measured(name):
    code, op = CASES[name]
    trace = narrate(record("import torch\n" + code))
    node = _node(trace, op)
    built = [s for s in trace["steps"] if s["kind"] == "forward"][-1]  # the step that built y
    assert node["saved_bytes"] == _plain_bytes(code, op)
    assert f", {fmt_bytes(node['saved_bytes'])})" in built["explanation"]
