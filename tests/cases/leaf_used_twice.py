"""A leaf used twice: both paths add into its .grad."""

import torch

x = torch.tensor([1.0, -2.0], requires_grad=True)
y = x * x + x.exp()
y.sum().backward()
print(x.grad)  # 2x + exp(x)
