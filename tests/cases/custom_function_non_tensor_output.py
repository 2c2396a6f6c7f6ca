"""A custom Function that returns a tensor and a plain Python number (not differentiable)."""

import torch


class ScaleAndNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x * scale, float(x.norm())

    @staticmethod
    def backward(ctx, grad_out, grad_norm):
        return grad_out * ctx.scale, None


x = torch.tensor([3.0, 4.0], requires_grad=True)
y, norm = ScaleAndNorm.apply(x, 0.5)
print(norm, type(norm).__name__)
y.sum().backward()
print(x.grad)
