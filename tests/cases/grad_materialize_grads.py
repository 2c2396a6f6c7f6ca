"""allow_unused gives None for an unused input; materialize_grads gives zeros instead."""

import torch

x = torch.tensor([1.0, 2.0], requires_grad=True)
unused = torch.tensor([3.0, 4.0], requires_grad=True)
y = (x * x).sum()
gx, gu = torch.autograd.grad(y, (x, unused), allow_unused=True, retain_graph=True)
print(gx, gu)
gx, gu = torch.autograd.grad(y, (x, unused), materialize_grads=True)
print(gx, gu)
