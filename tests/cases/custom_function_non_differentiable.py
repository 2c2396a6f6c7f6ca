"""ctx.mark_non_differentiable: a sort that returns indices backward never sees."""

import torch


class SortWithIndex(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        values, idx = x.sort()
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(idx)
        return values, idx

    @staticmethod
    def backward(ctx, grad_values, grad_idx):
        (idx,) = ctx.saved_tensors
        grad_x = torch.zeros_like(grad_values)
        grad_x.index_add_(0, idx, grad_values)
        return grad_x


x = torch.tensor([3.0, 1.0, 2.0], requires_grad=True)
values, idx = SortWithIndex.apply(x)
print(idx, idx.requires_grad)
(values * torch.tensor([1.0, 10.0, 100.0])).sum().backward()
print(x.grad)
