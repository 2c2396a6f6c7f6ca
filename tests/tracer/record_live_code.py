"""A user's own training code in a module of its own (imported by test_record_live.py), so that
recorded steps are attributed across files. Its line numbers are read by the tests through
``LINES``: each marked line says what it does."""

from __future__ import annotations

import torch
from torch import nn


def make(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, opt, torch.randn(5, 3), torch.randn(5, 1)


class Trainer:
    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer) -> None:
        self.model = model
        self.opt = opt

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.opt.zero_grad()
        out = self.model(x)  # forward
        loss = nn.functional.mse_loss(out, y)  # loss
        loss.backward()  # backward
        self.opt.step()
        return loss


def training(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    """Two iterations of a training step, then a second backward through the last one's freed graph."""
    trainer = Trainer(model, opt)
    for _ in range(2):
        loss = trainer.step(x, y)
    loss.backward()  # second backward


def gradient_penalty(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """A loss with a gradient penalty: autograd.grad with create_graph inside the user's function."""
    x = x.clone().requires_grad_(True)
    out = model(x)
    (gx,) = torch.autograd.grad(out.sum(), x, create_graph=True)  # penalty grad
    loss = nn.functional.mse_loss(out, y) + gx.pow(2).sum()
    loss.backward()
    return loss


def halved(grad: torch.Tensor) -> torch.Tensor:
    return grad.div(2)  # hook


def _lines() -> dict[str, int]:
    with open(__file__) as f:
        return {
            line.split("# ")[-1].strip(): n for n, line in enumerate(f, 1) if "  # " in line and "(" in line
        }


LINES = _lines()
