"""A custom Function that changes its input in place and says so with ctx.mark_dirty."""

import torch


class MulTwo_(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        ctx.mark_dirty(t)
        return t.mul_(2)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * 2


x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
h = x * 1.5  # a non-leaf: in-place on a leaf that requires grad is not allowed
y = MulTwo_.apply(h)
print(y is h, h.grad_fn.name())
(y * y).sum().backward()
print(x.grad)
