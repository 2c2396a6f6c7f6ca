"""Double backward through a custom Function whose backward is itself differentiable."""

import torch


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 2 * x


x = torch.tensor([1.0, -3.0], requires_grad=True)
y = Square.apply(x).sum()
(g,) = torch.autograd.grad(y, x, create_graph=True)
g.sum().backward()
print(g, x.grad)  # 2x, then d/dx sum(2x) = 2
