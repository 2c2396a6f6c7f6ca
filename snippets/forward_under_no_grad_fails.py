"""Forward pass under no_grad

Inside torch.no_grad() autograd records nothing: a loss computed there has no grad_fn,
even though w requires grad. This snippet fails on purpose: backward() has no graph to
go through.

Watch: the loss line builds no node, and backward() fails with RuntimeError ("element 0
of tensors does not require grad and does not have a grad_fn"). The diagnosis points at
the line inside the no_grad block.
"""

import torch

w = torch.tensor([1.0, -2.0], requires_grad=True)
data = torch.tensor([0.5, 1.5])

with torch.no_grad():
    loss = ((w * data).sum() - 1.0) ** 2
print("loss:", loss, "grad_fn:", loss.grad_fn)
loss.backward()
