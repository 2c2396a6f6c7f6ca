"""backward() on an output without a graph ("element 0 of tensors does not require grad"): the diagnosis
names the cause the run shows (no_grad / inference_mode, requires_grad turned on too late, everything
frozen) at its line, and the fix gives the gradient plain PyTorch computes for the intended code."""

from __future__ import annotations

import pytest
import torch
from test_diagnose import close, code_of, diagnoses, grads_of, only, plain_ok
from testkit.truth import run_plain

KIND = "backward_without_graph"

# cause -> where -> (snippet, text of the line the diagnosis points at)
VARIANTS = {
    "no_grad": {
        "top_level": (
            """
            import torch
            w = torch.tensor([1.0, -2.0], requires_grad=True)
            data = torch.tensor([0.5, 1.5])
            with torch.no_grad():
                loss = ((w * data).sum() - 1.0) ** 2
            loss.backward()
            """,
            "loss = ((w * data).sum() - 1.0) ** 2",
        ),
        "in_a_function": (
            """
            import torch
            w = torch.tensor([1.0, -2.0], requires_grad=True)
            data = torch.tensor([0.5, 1.5])
            @torch.inference_mode()
            def forward(v):
                return ((w * v).sum() - 1.0) ** 2
            loss = forward(data)
            loss.backward()
            """,
            "loss = forward(data)",
        ),
        "in_a_loop": (
            """
            import torch
            w = torch.tensor([1.0, -2.0], requires_grad=True)
            data = torch.tensor([0.5, 1.5])
            for _ in range(2):
                with torch.no_grad():
                    loss = ((w * data).sum() - 1.0) ** 2
                    loss.backward()
            """,
            "loss = ((w * data).sum() - 1.0) ** 2",
        ),
    },
    "too_late": {
        "top_level": (
            """
            import torch
            w = torch.tensor([1.0, -2.0])
            data = torch.tensor([0.5, 1.5])
            loss = ((w * data).sum() - 1.0) ** 2
            w.requires_grad_()
            loss.backward()
            """,
            "w.requires_grad_()",
        ),
        "in_a_function": (
            """
            import torch
            def fit():
                w = torch.tensor([1.0, -2.0])
                data = torch.tensor([0.5, 1.5])
                loss = ((w * data).sum() - 1.0) ** 2
                w.requires_grad = True
                loss.backward()
                return w.grad
            print(fit())
            """,
            "w.requires_grad = True",
        ),
        "in_a_loop": (
            """
            import torch
            data = torch.tensor([0.5, 1.5])
            for _ in range(2):
                w = torch.tensor([1.0, -2.0])
                loss = ((w * data).sum() - 1.0) ** 2
                w.requires_grad_(True)
                loss.backward()
            """,
            "w.requires_grad_(True)",
        ),
    },
    "cut": {
        "top_level": (
            """
            import torch
            w = torch.tensor([1.0, -2.0], requires_grad=True)
            data = torch.tensor([0.5, 1.5])
            pred = (w * data).sum()
            loss = torch.tensor((pred.item() - 1.0) ** 2)
            loss.backward()
            """,
            "loss = torch.tensor((pred.item() - 1.0) ** 2)",
        ),
        "in_a_function": (
            """
            import torch
            w = torch.tensor([1.0, -2.0], requires_grad=True)
            data = torch.tensor([0.5, 1.5])
            def predict(v):
                return (w * v).sum().item()
            loss = (torch.tensor(predict(data)) - 1.0) ** 2
            loss.backward()
            """,
            "return (w * v).sum().item()",
        ),
        "in_a_loop": (
            """
            import torch
            w = torch.tensor([1.0, -2.0], requires_grad=True)
            data = torch.tensor([0.5, 1.5])
            for _ in range(2):
                pred = (w * data).sum()
                loss = torch.tensor(pred.item() - 1.0) ** 2
                loss.backward()
            """,
            "loss = torch.tensor(pred.item() - 1.0) ** 2",
        ),
    },
    "frozen": {
        "top_level": (
            """
            import torch
            torch.manual_seed(0)
            model = torch.nn.Linear(2, 1)
            for p in model.parameters():
                p.requires_grad = False
            data = torch.tensor([[0.5, 1.5]])
            loss = model(data).pow(2).mean()
            loss.backward()
            """,
            "p.requires_grad = False",
        ),
        "in_a_function": (
            """
            import torch
            torch.manual_seed(0)
            def make_model():
                model = torch.nn.Linear(2, 1)
                model.requires_grad_(False)
                return model
            model = make_model()
            data = torch.tensor([[0.5, 1.5]])
            loss = model(data).pow(2).mean()
            loss.backward()
            """,
            "model.requires_grad_(False)",
        ),
        "in_a_loop": (
            """
            import torch
            torch.manual_seed(0)
            model = torch.nn.Linear(2, 1)
            model.requires_grad_(False)
            data = torch.tensor([[0.5, 1.5]])
            for _ in range(2):
                loss = model(data).pow(2).mean()
                loss.backward()
            """,
            "model.requires_grad_(False)",
        ),
    },
}
CASES = [(cause, where) for cause in VARIANTS for where in VARIANTS[cause]]
WHY = {
    "no_grad": "autograd records nothing",
    "too_late": "requires grad only from line",
    "frozen": "turns gradients off",
    "cut": "which keeps only the values",
}


def _code(cause: str, where: str) -> str:
    return code_of(VARIANTS[cause][where][0])


def _line_of(code: str, text: str) -> int:
    return next(i for i, line in enumerate(code.splitlines(), 1) if line.strip() == text)


def _intended(cause: str) -> tuple[str, torch.Tensor]:
    """The gradient the snippet meant, in plain torch: of the weight it computes the loss from."""
    if cause == "frozen":
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1)
        (g,) = torch.autograd.grad(model(torch.tensor([[0.5, 1.5]])).pow(2).mean(), model.weight)
        return "model.weight", g
    w = torch.tensor([1.0, -2.0], requires_grad=True)
    (g,) = torch.autograd.grad(((w * torch.tensor([0.5, 1.5])).sum() - 1.0) ** 2, w)
    return "w", g


@pytest.mark.parametrize(("cause", "where"), CASES)
def test_names_the_cause_this_run_shows_at_its_line(cause: str, where: str):
    code = _code(cause, where)
    plain = run_plain(code)
    assert "does not require grad and does not have a grad_fn" in plain.calls[0].error["message"]
    d = only(code, KIND)
    assert d["severity"] == "error"
    assert d["line"] == _line_of(code, VARIANTS[cause][where][1])
    assert WHY[cause] in d["message"]


@pytest.mark.parametrize(("cause", "where"), CASES)
def test_fix_gives_the_gradient_of_the_intended_computation(cause: str, where: str):
    d = only(_code(cause, where), KIND)
    assert len(d["fixes"]) == 1
    fixed = plain_ok(d["fixes"][0]["code"])
    name, expected = _intended(cause)
    assert fixed.calls
    # the first backward's gradient: later ones in a loop add the same again
    assert close(grads_of(fixed.calls[0], name), expected)


def test_a_leaf_created_without_requires_grad_is_explained_without_a_guessed_fix():
    code = code_of(
        """
        import torch
        w = torch.tensor([1.0, -2.0])
        loss = (w**2).sum()
        loss.backward()
        """
    )
    d = only(code, KIND)
    assert d["line"] == run_plain(code).calls[0].line
    assert "requires_grad=True" in d["message"] and d["fixes"] == []


@pytest.mark.parametrize(
    "code",
    [
        """
        import torch
        w = torch.tensor([1.0, -2.0], requires_grad=True)
        loss = (w**2).sum()
        loss.backward()
        with torch.no_grad():
            w -= 0.1 * w.grad
            val = (w**2).sum()
        print(val)
        """,
        """
        import torch
        w = torch.tensor([1.0, -2.0])
        w.requires_grad_()
        loss = (w**2).sum()
        loss.backward()
        """,
        """
        import torch
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
        model[0].requires_grad_(False)
        loss = model(torch.tensor([[0.5, 1.5]])).pow(2).mean()
        loss.backward()
        """,
    ],
    ids=["no_grad_only_for_the_update", "requires_grad_before_use", "only_part_frozen"],
)
def test_stays_quiet_when_the_graph_is_there(code: str):
    assert diagnoses(code_of(code)) == []
