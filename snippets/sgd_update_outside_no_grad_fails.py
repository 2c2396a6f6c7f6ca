"""Hand-written SGD outside no_grad

A parameter is a leaf that requires grad, so autograd watches every operation on it. An
update like w -= lr * w.grad is an in-place operation on that leaf, and torch refuses to
record it as part of the graph. This snippet fails on purpose: the update must run under
torch.no_grad(), which is what an optimizer's step() does.

Watch: the backward fills w.grad, then the update line fails with RuntimeError ("a leaf
Variable that requires grad is being used in an in-place operation"). The diagnosis wraps
it in torch.no_grad().
"""

import torch

w = torch.tensor([1.0, -2.0], requires_grad=True)
data = torch.tensor([0.5, 1.5])
target = torch.tensor(1.0)
lr = 0.1

loss = ((w * data).sum() - target) ** 2
loss.backward()
print("w.grad:", w.grad)
w -= lr * w.grad
