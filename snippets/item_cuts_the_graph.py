"""The graph cut by .item()

.item() turns a one-element tensor into a Python number: handy for printing, but a number
has no history. Here a scale computed from w1 goes through .item() before it enters the
loss, so the loss has a graph through w2 only. Nothing raises: backward runs, and w1
silently gets no gradient.

Watch: after loss.backward() w2.grad is filled but w1.grad is None, so opt.step() never
moves w1. The diagnosis points at the .item() line and keeps the tensor instead.
"""

import torch

w1 = torch.tensor([1.0, 2.0], requires_grad=True)
w2 = torch.tensor([3.0, -4.0], requires_grad=True)
data = torch.tensor([0.5, -1.0])
opt = torch.optim.SGD([w1, w2], lr=0.1)

scale = (w1 * data).sum().item()  # a Python float: the path back to w1 ends here
loss = ((w2 * data).sum() * scale - 1.0) ** 2
opt.zero_grad()
loss.backward()
opt.step()
print("w1.grad:", w1.grad, "w2.grad:", w2.grad)
