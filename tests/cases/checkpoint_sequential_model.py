"""checkpoint_sequential: a Sequential split into segments, each recomputed in backward."""

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 5), nn.Tanh(), nn.Linear(5, 2))
x = torch.randn(4, 3, requires_grad=True)
out = checkpoint_sequential(model, 2, x, use_reentrant=False)
loss = out.pow(2).sum()
loss.backward()
print(x.grad.shape, model[4].weight.grad)
