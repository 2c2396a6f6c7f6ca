"""Activation checkpointing (use_reentrant=True): backward reruns the block and calls backward inside."""

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
block = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
head = nn.Linear(4, 1)


def run_block(h):
    print("block forward runs")
    return block(h)


x = torch.randn(3, 4, requires_grad=True)
hidden = checkpoint(run_block, x, use_reentrant=True)
loss = head(hidden).sum()
loss.backward()
print(x.grad)
print(block[2].bias.grad)
