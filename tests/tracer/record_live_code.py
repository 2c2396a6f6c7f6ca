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


def _lines() -> dict[str, int]:
    with open(__file__) as f:
        return {
            line.split("# ")[-1].strip(): n for n, line in enumerate(f, 1) if "  # " in line and "(" in line
        }


LINES = _lines()
