"""@once_differentiable: a first backward works; differentiating its gradient again raises."""

import torch
from torch.autograd.function import once_differentiable


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 3 * x**2


x = torch.tensor([1.0, 2.0], requires_grad=True)
y = Cube.apply(x)
loss = (y * y).sum()
(g,) = torch.autograd.grad(loss, x, create_graph=True)
print(g, g.grad_fn.name())
try:
    g.sum().backward()
except RuntimeError as e:
    print("double backward:", str(e)[:60])
Cube.apply(x).sum().backward()
print(x.grad)
