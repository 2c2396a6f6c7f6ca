"""A leaf no variable holds still gets its AccumulateGrad node."""

import torch

scale = torch.tensor(3.0, requires_grad=True)
loss = (torch.tensor([1.0, 2.0], requires_grad=True) * scale).sum()
loss.backward()
print(scale.grad)
