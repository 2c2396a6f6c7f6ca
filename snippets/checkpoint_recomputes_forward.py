"""Activation checkpointing: the forward runs again in backward

torch.utils.checkpoint runs a block without keeping the activations its nodes would save:
each saved tensor is only a placeholder, and the block's input is kept instead. When
backward reaches the block, the first placeholder it needs runs the block's forward a
second time to rebuild them all; each rebuilt tensor is handed to its node once and then
dropped. Less memory, paid for with one more forward. The print inside the block shows
when its forward runs.

Watch: "block forward runs" is printed once by the checkpoint line and once more during
loss.backward(); x.grad is the same as backward through the block without checkpointing.
"""

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
block = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4))


def run_block(h):
    print("block forward runs")
    return block(h)


x = torch.randn(2, 4, requires_grad=True)
hidden = checkpoint(run_block, x, use_reentrant=False)  # the Tanh's output is not kept
loss = hidden.pow(2).sum()
print("before backward")
loss.backward()  # recomputes the block, then backpropagates through it
print("x.grad:", x.grad)

(without,) = torch.autograd.grad(block(x).pow(2).sum(), x)  # every activation kept
print("same as without checkpointing:", torch.allclose(without, x.grad))
