"""torch.compile on a small function: one compiled node in the graph, the same .grad as eager."""

import torch


@torch.compile
def f(x, w):
    return (x * w).sin().sum()


x = torch.tensor([0.5, 1.0, 1.5])
w = torch.tensor([1.0, -1.0, 2.0], requires_grad=True)
loss = f(x, w)
print(loss.grad_fn.name())  # CompiledFunctionBackward
loss.backward()
print(w.grad)
