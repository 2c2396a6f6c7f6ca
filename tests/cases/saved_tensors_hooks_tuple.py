"""saved_tensors_hooks whose pack returns a tuple, not a tensor; unpack rebuilds the tensor."""

import torch


def pack(t):
    print("pack", list(t.shape))
    return ("packed", t.dtype, t.tolist())


def unpack(packed):
    print("unpack")
    _, dtype, values = packed
    return torch.tensor(values, dtype=dtype)


x = torch.tensor([0.5, 1.0, 2.0], requires_grad=True)
with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
    y = x.exp() * x
loss = y.sum()
loss.backward(retain_graph=True)
print(x.grad)
loss.backward()
print(x.grad)
try:
    loss.backward()
except RuntimeError as e:
    print("third backward:", type(e).__name__)
