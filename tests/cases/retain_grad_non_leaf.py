"""retain_grad on a non-leaf keeps its gradient; other non-leaves drop it."""

import torch

x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
mid = x.tanh()
mid.retain_grad()
other = mid * 3
loss = other.pow(2).sum()
loss.backward(retain_graph=True)
loss.backward()  # mid.grad accumulates like a leaf's
print(mid.grad)
