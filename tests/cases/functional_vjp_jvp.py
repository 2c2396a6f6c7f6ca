"""torch.autograd.functional.vjp and jvp with a vector; a backward on the result."""

import torch
from torch.autograd.functional import jvp, vjp


def f(v):
    return v.tanh() * 2


x = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
out, vj = vjp(f, x, torch.tensor([1.0, 0.0, -1.0]))
out2, jv = jvp(f, x, torch.tensor([0.0, 1.0, 1.0]))
print(vj, jv)
y = f(x).sum()
y.backward()
print(x.grad)
