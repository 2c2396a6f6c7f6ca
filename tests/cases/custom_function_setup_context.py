"""A custom Function in the new style: forward without ctx, setup_context saves what backward needs."""

import torch


class LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(x, weight, bias):
        return x @ weight.t() + bias

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, bias = inputs
        ctx.save_for_backward(x, weight)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        return grad_out @ weight, grad_out.t() @ x, grad_out.sum(0)


x = torch.tensor([[1.0, 2.0], [3.0, -1.0]], requires_grad=True)
weight = torch.tensor([[0.5, -0.5], [1.0, 2.0], [0.0, 1.0]], requires_grad=True)
bias = torch.tensor([0.1, 0.2, 0.3], requires_grad=True)
out = LinearFn.apply(x, weight, bias)
out.pow(2).sum().backward()
print(x.grad, weight.grad, bias.grad)
