"""is_grads_batched: one autograd.grad call computes a whole Jacobian, row by row."""

import torch

x = torch.tensor([0.5, 1.0, 2.0], requires_grad=True)
y = x.sin() * x
(jac,) = torch.autograd.grad(y, x, torch.eye(3), is_grads_batched=True, retain_graph=True)
print(jac)
y.sum().backward()
print(x.grad)
