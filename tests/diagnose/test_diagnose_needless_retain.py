"""retain_graph=True kept in a loop that never goes back through the kept graph: in plain PyTorch the
last graph's saved tensors are still held after the loop; the diagnosis quotes what is held, and its fix
(no retain_graph) frees them with the same gradients at every call. Loops that do reuse a graph stay silent."""

from __future__ import annotations

import re

import pytest
import torch
from test_diagnose import close, code_of, diagnoses, only, plain_ok
from testkit.truth import FREED_MARK, run_plain

KIND = "needless_retain_graph"

SETUP = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 4)
"""
BODY = [
    "opt.zero_grad()",
    "loss = model(x).pow(2).mean()",
    "loss.backward(retain_graph=True)",
    "opt.step()",
]
VARIANTS = {
    "in_a_loop": "for _ in range(3):\n" + "".join(f"    {s}\n" for s in BODY),
    "in_a_function": "def train_step():\n"
    + "".join(f"    {s}\n" for s in BODY)
    + "    return loss\nfor _ in range(3):\n    loss = train_step()\n",
    "while_loop": "i = 0\nwhile i < 3:\n" + "".join(f"    {s}\n" for s in BODY) + "    i += 1\n",
}


def _code(where: str) -> str:
    return code_of(SETUP) + VARIANTS[where]


def namespace(code: str) -> dict:
    scope = {"__name__": "__main__"}
    exec(compile(code, "<snippet>", "exec"), scope)
    return scope


def saved_readable(loss: torch.Tensor) -> bool:
    """Plain torch: the graph's saved tensors can still be read (retained), or reading raises (freed)."""
    node = loss.grad_fn
    try:
        while node is not None:
            for name in dir(node):
                if name.startswith("_saved_") and isinstance(getattr(node, name), torch.Tensor):
                    return True
            node = node.next_functions[0][0] if node.next_functions else None
    except RuntimeError as e:
        assert FREED_MARK in str(e)
        return False
    return False


@pytest.mark.parametrize("where", sorted(VARIANTS))
def test_warns_with_the_bytes_held_when_no_call_reuses_the_graph(where: str):
    code = _code(where)
    assert saved_readable(namespace(code)["loss"])  # plain torch: still held after the loop
    d = only(code, KIND)
    line = next(i for i, t in enumerate(code.splitlines(), 1) if "retain_graph=True" in t)
    assert d["severity"] == "warning" and d["line"] == line
    held = re.search(r"— (.+?) held after each call", d["message"]).group(1)
    assert all(not b.startswith("0 ") for b in held.split(" → "))


@pytest.mark.parametrize("where", sorted(VARIANTS))
def test_fix_frees_the_graph_with_the_same_gradients(where: str):
    code = _code(where)
    f = only(code, KIND)["fixes"][0]
    assert "retain_graph" not in f["code"]
    fixed, original = plain_ok(f["code"]), run_plain(code)
    assert not saved_readable(namespace(f["code"])["loss"])  # freed by its backward
    assert len(fixed.calls) == len(original.calls) == 3
    for a, b in zip(fixed.calls, original.calls, strict=True):
        assert a.grads.keys() == b.grads.keys()
        assert all(close(a.grads[k], b.grads[k]) for k in a.grads)


@pytest.mark.parametrize(
    "code",
    [
        """
        import torch
        x = torch.tensor(2.0, requires_grad=True)
        y = x**3
        for _ in range(3):
            y.backward(retain_graph=True)
        """,
        """
        import torch
        torch.manual_seed(0)
        trunk = torch.nn.Linear(4, 4)
        heads = [torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)]
        x = torch.randn(8, 4)
        for _ in range(2):
            h = torch.tanh(trunk(x))
            loss1 = heads[0](h).pow(2).mean()
            loss2 = heads[1](h).pow(2).mean()
            loss1.backward(retain_graph=True)
            loss2.backward()
        """,
        _code("in_a_loop").replace("retain_graph=True", ""),
    ],
    ids=["same_output_again", "two_losses_on_a_shared_trunk", "no_retain"],
)
def test_stays_quiet_when_a_later_call_goes_back_through_the_graph(code: str):
    assert diagnoses(code_of(code)) == []
