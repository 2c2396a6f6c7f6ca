"""optimizer.step() that never sees a gradient (zero_grad() between backward() and step(), or step()
before backward()): in plain PyTorch the parameters end where they started; the diagnosis points at
the misplaced call, and its fix trains exactly like a plain loop in the usual order. Loops in the
usual orders stay silent."""

from __future__ import annotations

import pytest
import torch
from test_diagnose import close, code_of, diagnoses, only, plain_ok

KIND = "optimizer_step_without_gradient"

SETUP = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
"""

ORDERS = {
    "zero_grad_between": [
        "loss = model(data).pow(2).mean()",
        "loss.backward()",
        "opt.zero_grad()",
        "opt.step()",
    ],
    "step_first": ["opt.zero_grad()", "opt.step()", "loss = model(data).pow(2).mean()", "loss.backward()"],
}
MISPLACED = {"zero_grad_between": "opt.zero_grad()", "step_first": "opt.step()"}


def _code(body: list[str], where: str) -> str:
    if where == "in_a_loop":
        loop = "for _ in range(3):\n" + "".join(f"    {s}\n" for s in body)
    elif where == "while_loop":
        loop = "i = 0\nwhile i < 3:\n" + "".join(f"    {s}\n" for s in body) + "    i += 1\n"
    else:  # in_a_function, called from a loop
        loop = (
            "def train_step():\n"
            + "".join(f"    {s}\n" for s in body)
            + "for _ in range(3):\n    train_step()\n"
        )
    return code_of(SETUP) + loop + "print(model.weight)\n"


CASES = [(o, w) for o in ORDERS for w in ("in_a_loop", "in_a_function", "while_loop")]


def namespace(code: str) -> dict:
    scope = {"__name__": "__main__"}
    exec(compile(code, "<snippet>", "exec"), scope)
    return scope


def trained(steps: int) -> torch.Tensor:
    """The usual order in plain torch: zero_grad, forward, backward, step."""
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    for _ in range(steps):
        opt.zero_grad()
        model(data).pow(2).mean().backward()
        opt.step()
    return model.weight.detach()


def _line_of(code: str, text: str) -> int:
    return next(i for i, line in enumerate(code.splitlines(), 1) if line.strip() == text)


@pytest.mark.parametrize(("order", "where"), CASES)
def test_fires_at_the_misplaced_call_when_plain_torch_never_moves_the_parameters(order: str, where: str):
    code = _code(ORDERS[order], where)
    assert close(namespace(code)["model"].weight.detach(), trained(0))  # never moved
    d = only(code, KIND)
    assert d["severity"] == "warning" and d["line"] == _line_of(code, MISPLACED[order])
    assert "never learns" in d["message"]


@pytest.mark.parametrize(("order", "where"), CASES)
def test_fix_trains_like_the_usual_order(order: str, where: str):
    f = only(_code(ORDERS[order], where), KIND)["fixes"][0]
    plain_ok(f["code"])
    assert close(namespace(f["code"])["model"].weight.detach(), trained(3))
    assert "the gradients change from one iteration to the next" in f["explanation"]


@pytest.mark.parametrize(
    "body",
    [
        ["opt.zero_grad()", "loss = model(data).pow(2).mean()", "loss.backward()", "opt.step()"],
        ["loss = model(data).pow(2).mean()", "loss.backward()", "opt.step()", "opt.zero_grad()"],
    ],
    ids=["zero_grad_first", "zero_grad_last"],
)
def test_stays_quiet_in_the_usual_orders(body: list[str]):
    assert diagnoses(_code(body, "in_a_loop")) == []
