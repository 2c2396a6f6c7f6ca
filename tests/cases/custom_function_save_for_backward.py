"""A custom autograd.Function in the classic style: ctx.save_for_backward in forward."""

import torch


class Exp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, i):
        result = i.exp()
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        (result,) = ctx.saved_tensors
        return grad_output * result


x = torch.tensor([0.0, 1.0, -1.0], requires_grad=True)
y = Exp.apply(x)
loss = (y * 2).sum()
loss.backward()
print(x.grad)
try:
    loss.backward()
except RuntimeError as e:
    print("second backward:", str(e)[:40])
