"""autograd.grad frees the graph too; a later backward fails."""

import torch

x = torch.tensor([1.0, 2.0], requires_grad=True)
y = (x.sin() * x).sum()
(gx,) = torch.autograd.grad(y, x)
y.backward()  # the saved tensors were freed by autograd.grad
