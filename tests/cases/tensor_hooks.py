"""Tensor hooks see and change gradients as they flow."""

import torch

seen = []
x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
h = x * x
h.register_hook(lambda g: g * 10)  # scales what flows back through h
x.register_hook(lambda g: seen.append(g.clone()))  # leaf hook: observes only
loss = (h + x).sum()
loss.backward()
print(x.grad, len(seen))
