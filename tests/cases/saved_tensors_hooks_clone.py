"""saved_tensors_hooks whose pack stores a clone: unpack hands backward that other object."""

import torch

calls = {"pack": 0, "unpack": 0}


def pack(t):
    calls["pack"] += 1
    return t.detach().clone()


def unpack(copy):
    calls["unpack"] += 1
    return copy


x = torch.tensor([0.5, 1.0, 2.0], requires_grad=True)
w = torch.tensor([1.5, -1.0, 0.5], requires_grad=True)
with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
    y = (x * w).sin()
print("after forward:", calls)
loss = y.sum()
loss.backward()
print("after backward:", calls)
print(x.grad, w.grad)
