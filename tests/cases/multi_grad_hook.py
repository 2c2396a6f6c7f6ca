"""register_multi_grad_hook fires once all the listed tensors have their gradients."""

import torch
from torch.autograd.graph import register_multi_grad_hook

a = torch.tensor([1.0, 2.0], requires_grad=True)
b = torch.tensor([3.0, -1.0], requires_grad=True)
seen = []


def on_grads(grads):
    seen.append([None if g is None else g.sum().item() for g in grads])


handle = register_multi_grad_hook((a, b), on_grads)
loss = (a * b).sum() + a.pow(2).sum()
loss.backward()
print(seen, a.grad, b.grad)
handle.remove()
(a * 3).sum().backward()
print(seen, a.grad)
