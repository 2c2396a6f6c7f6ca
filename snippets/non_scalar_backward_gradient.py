"""backward on a vector with a gradient argument

For a vector output you pass the starting gradient yourself: y.backward(gradient=v)
computes the gradient of (y * v).sum(). With v = torch.ones_like(y) that is the same as
calling y.sum().backward(). Other weights in v scale each entry's contribution.

Watch: x.grad becomes 2 * x after the first backward; the second backward (weights 1, 0,
10) adds a differently weighted gradient on top.
"""

import torch

x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
y = x**2

y.backward(gradient=torch.ones_like(y), retain_graph=True)
print("x.grad with ones:", x.grad)  # 2 * x = [2, 4, 6]

y.backward(gradient=torch.tensor([1.0, 0.0, 10.0]))
print("x.grad after weighted backward:", x.grad)  # [2, 4, 6] + [2, 0, 60]
