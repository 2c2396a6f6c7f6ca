"""The graph silently cut: a trained parameter's .grad stays None while nothing raises. The diagnosis
points at the cut, and its fix gives the parameter the gradient plain PyTorch computes for the uncut
code; deliberate cuts (a detached target, .item() for logging) stay silent."""

from __future__ import annotations

import pytest
import torch
from test_diagnose import close, code_of, diagnoses, grads_of, only, plain_ok
from testkit.truth import run_plain

KIND = "graph_cut"

# cut -> (the cutting line, its uncut form): each in the same two-weight model at top level
CUTS = {
    "detach": ("h = (w1 * data).detach()", "h = w1 * data"),
    "data": ("h = (w1 * data).data", "h = w1 * data"),
    "torch_tensor": ("h = torch.tensor(w1 * data)", "h = w1 * data"),
    "item": ("h = (w1 * data).sum().item()", "h = (w1 * data).sum()"),
    "tolist": ("h = torch.tensor((w1 * data).tolist())", "h = w1 * data"),  # two cuts: the fix removes both
}


def _top_level(line: str) -> str:
    return (
        "import torch\n"
        "w1 = torch.tensor([1.0, 2.0], requires_grad=True)\n"
        "w2 = torch.tensor([3.0, -4.0], requires_grad=True)\n"
        "data = torch.tensor([0.5, -1.0])\n"
        f"{line}\n"
        "loss = ((w2 * h).sum() - 1.0) ** 2\n"
        "loss.backward()\n"
        "print(w1.grad, w2.grad)\n"
    )


WHERE = {
    "in_a_function": """
        import torch
        torch.manual_seed(0)
        encoder = torch.nn.Linear(2, 2)
        head = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(list(encoder.parameters()) + list(head.parameters()), lr=0.1)
        def features(x):
            return encoder(x).detach()
        x = torch.tensor([[0.5, -1.0]])
        loss = head(features(x)).pow(2).sum()
        loss.backward()
        print(encoder.weight.grad)
        """,
    "in_a_loop": """
        import torch
        w1 = torch.tensor([1.0, 2.0], requires_grad=True)
        w2 = torch.tensor([3.0, -4.0], requires_grad=True)
        data = torch.tensor([0.5, -1.0])
        opt = torch.optim.SGD([w1, w2], lr=0.1)
        for step in range(3):
            scale = (w1 * data).sum().item()
            loss = ((w2 * data).sum() * scale - 1.0) ** 2
            opt.zero_grad()
            loss.backward()
            opt.step()
        """,
}
WHERE_CUT = {"in_a_function": "return encoder(x).detach()", "in_a_loop": "scale = (w1 * data).sum().item()"}


def _line_of(code: str, text: str) -> int:
    return next(i for i, line in enumerate(code.splitlines(), 1) if line.strip() == text)


def _two_weights(reduce: bool) -> torch.Tensor:
    """d loss / d w1 of the top-level model with the path kept, in plain torch."""
    w1 = torch.tensor([1.0, 2.0], requires_grad=True)
    w2 = torch.tensor([3.0, -4.0])
    data = torch.tensor([0.5, -1.0])
    h = w1 * data
    h = h.sum() if reduce else h
    (g,) = torch.autograd.grad(((w2 * h).sum() - 1.0) ** 2, w1)
    return g


@pytest.mark.parametrize("cut", sorted(CUTS))
def test_points_at_the_cut_when_plain_torch_leaves_the_parameter_without_grad(cut: str):
    code = _top_level(CUTS[cut][0])
    plain = run_plain(code)
    assert plain.error is None and grads_of(plain.calls[-1], "w1") is None  # silent: no error, no gradient
    d = only(code, KIND)
    assert d["severity"] == "warning" and d["line"] == _line_of(code, CUTS[cut][0])
    assert "`w1` requires grad" in d["message"] and "None" in d["message"]


@pytest.mark.parametrize("cut", sorted(c for c in CUTS if CUTS[c][1]))
def test_fix_keeps_the_path_and_w1_gets_the_gradient_of_the_uncut_code(cut: str):
    code = _top_level(CUTS[cut][0])
    f = only(code, KIND)["fixes"][0]
    fixed = plain_ok(f["code"])
    expected = _two_weights(reduce=cut == "item")
    assert close(grads_of(fixed.calls[-1], "w1"), expected)
    assert "w1.grad is filled" in f["explanation"]


@pytest.mark.parametrize("where", sorted(WHERE))
def test_fires_in_a_function_and_in_a_loop(where: str):
    code = code_of(WHERE[where])
    plain = run_plain(code)
    name = "encoder.weight" if where == "in_a_function" else "w1"
    assert all(grads_of(c, name) is None for c in plain.calls)
    d = only(code, KIND)
    assert d["line"] == _line_of(code, WHERE_CUT[where])


def test_in_a_function_fix_gives_the_encoder_its_gradient():
    fixed = plain_ok(only(code_of(WHERE["in_a_function"]), KIND)["fixes"][0]["code"])
    torch.manual_seed(0)
    encoder = torch.nn.Linear(2, 2)
    head = torch.nn.Linear(2, 1)
    loss = head(encoder(torch.tensor([[0.5, -1.0]]))).pow(2).sum()
    (expected,) = torch.autograd.grad(loss, encoder.weight)
    assert close(grads_of(fixed.calls[-1], "encoder.weight"), expected)


def test_in_a_loop_fix_trains_w1_as_plain_sgd_on_the_uncut_loss_does():
    fixed = plain_ok(only(code_of(WHERE["in_a_loop"]), KIND)["fixes"][0]["code"])
    w1 = torch.tensor([1.0, 2.0], requires_grad=True)
    w2 = torch.tensor([3.0, -4.0], requires_grad=True)
    data = torch.tensor([0.5, -1.0])
    opt = torch.optim.SGD([w1, w2], lr=0.1)
    for call in fixed.calls:
        opt.zero_grad()
        (((w2 * data).sum() * (w1 * data).sum() - 1.0) ** 2).backward()
        assert close(grads_of(call, "w1"), w1.grad)
        opt.step()


@pytest.mark.parametrize(
    "code",
    [
        """
        import torch
        torch.manual_seed(0)
        teacher = torch.nn.Linear(2, 1)
        student = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(student.parameters(), lr=0.1)
        x = torch.tensor([[0.5, -1.0]])
        target = teacher(x).detach()
        loss = (student(x) - target).pow(2).sum()
        loss.backward()
        opt.step()
        """,
        """
        import torch
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.1)
        running = 0.0
        for _ in range(3):
            opt.zero_grad()
            loss = (w**2).sum()
            loss.backward()
            opt.step()
            running += loss.item()
            print(loss.item(), w.grad)
        """,
        """
        import torch
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        unused = torch.tensor([1.0], requires_grad=True)
        target = (w * 3).detach()
        loss = ((w - target) ** 2).sum()
        loss.backward()
        print(w.grad)
        """,
    ],
    ids=["detached_teacher_target", "item_for_logging", "detached_target_of_the_same_weight"],
)
def test_stays_quiet_on_deliberate_cuts(code: str):
    assert diagnoses(code_of(code)) == []
