"""A loop that calls backward each time: .grad accumulates."""

import torch

w = torch.tensor([0.5, -1.0], requires_grad=True)
b = torch.tensor(0.1, requires_grad=True)
xs = [torch.tensor([1.0, 2.0]), torch.tensor([-1.0, 0.5]), torch.tensor([3.0, 1.0])]
for x in xs:
    pred = (w * x).sum() + b
    loss = (pred - 1.0) ** 2
    loss.backward()
print(w.grad, b.grad)
