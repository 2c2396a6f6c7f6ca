"""A tensor hook prints while backward runs; a node post hook reads grads."""

import torch

x = torch.tensor([0.5, 1.5], requires_grad=True)
y = x.exp()
y.register_hook(lambda g: print("grad reaching y:", g))
z = (y * y).sum()
z.grad_fn.register_hook(lambda grad_inputs, grad_outputs: print("sum ran"))
z.backward()
print("x.grad:", x.grad)
